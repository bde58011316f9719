"""Positions that act inside attention: RoPE's rotation and ALiBi's (and NAPE's) distance bias.

Marian adds a table of sinusoidal vectors to the token embeddings; a position past the table does not exist, so a
model cannot read inputs longer than ``max_position_embeddings``. The positions here depend only on the distance
between a query and a key, so they apply at any length (`PositionOptions` in the config says which a model uses):

- RoPE (Su et al., 2021) rotates every pair of dimensions ``(x_d, x_{d + D/2})`` of a query or key at position p by
  the angle ``p · θ^(−2d/D)``; the product of a rotated query and key then depends on their distance alone. It may
  rotate cross-attention too (``cross_attention_positions``): target queries by their positions, source keys by
  theirs.
- ALiBi (Press et al., 2022) adds ``−slope_h · |i − j|`` to the score of query i and key j in head h; in
  cross-attention too (``cross_attention_positions``), i the target position and j the source position.
- NAPE (Vasylenko et al., 2026, ASEntmax's reference) is ALiBi on the first half of the heads, with slopes
  1, 1/2, …, 1/(H/2), and no position at all on the other half ("NoPE" heads), which a causal decoder tells apart by
  how many tokens precede them.

In an encoder, ``|i − j|`` is the same to the left and the right, and with position-free heads and cross-attention
the whole encoder–decoder cannot tell a sentence from its mirror image (only the distance to ``</s>`` differs). Split
directions give each biased encoder head one side: the heads alternate between the keys up to the query (j ≤ i) and
the keys from it (j ≥ i), as the two directions of a bidirectional RNN do.

A position is the index of a token in its sequence, counting the tokens already in the cache while decoding. Padding
on the left (batched generation of a decoder-only model) shifts every position of a row by the same amount, which
changes neither a distance nor a rotated product.

This file is copied to the Hub next to the model, so it needs nothing but torch.
"""

import torch


def alibi_slopes(position_type: str, num_heads: int) -> tuple[float, ...] | None:
    """ALiBi's slope of every head, or None for position types without a distance bias.

    ``"alibi"``: ``2^(−8h/H)`` for h = 1 … H (Press et al.'s geometric sequence); ``"nape"``: 1, 1/2, …, 1/(H // 2) for
    the first H // 2 heads and 0 (no position) for the others, as ASEntmax's reference.
    """
    if position_type == "alibi":
        return tuple(2.0 ** (-8.0 * head / num_heads) for head in range(1, num_heads + 1))
    if position_type == "nape":
        biased = num_heads // 2
        return tuple(1.0 / head for head in range(1, biased + 1)) + (0.0,) * (num_heads - biased)
    return None


def alibi_directions(slopes: tuple[float, ...] | None, split: bool) -> tuple[int, ...] | None:
    """The side of the keys each head sees with split directions: −1 (keys up to the query) and +1 (keys from it) in
    turn over the heads with a slope, 0 (both sides) for heads without one; None where directions are not split."""
    if slopes is None or not split:
        return None
    directions, side = [], -1
    for slope in slopes:
        directions.append(side if slope > 0.0 else 0)
        side = -side if slope > 0.0 else side
    return tuple(directions)


def distance_bias(
    slopes: tuple[float, ...],
    query_start: int | torch.Tensor,
    query_len: int,
    key_len: int,
    dtype,
    device,
    directions: tuple[int, ...] | None = None,
) -> torch.Tensor:
    """ALiBi's bias ``−slope_h · |i − j|`` for queries at positions ``query_start … query_start + query_len − 1`` and
    keys at ``0 … key_len − 1``, and with ``directions`` (`alibi_directions`) the other side of each one-sided head
    masked (the dtype's lowest value, as Marian's masks).

    The same formula serves the encoder (keys on both sides) and a causal decoder, where the keys after a query are
    masked anyway: there it is ALiBi's ``slope_h · (j − i)``.

    Returns:
        ``(1, heads, query_len, key_len)`` in ``dtype``.
    """
    query_positions = torch.arange(query_len, device=device) + query_start
    key_positions = torch.arange(key_len, device=device)
    offset = key_positions[None, :] - query_positions[:, None]  # (Lq, Lk): j − i
    bias = -torch.tensor(slopes, dtype=dtype, device=device).view(1, -1, 1, 1) * offset.abs().to(dtype)
    if directions is None:
        return bias
    side = torch.tensor(directions, device=device).view(1, -1, 1, 1)
    other_side = ((side < 0) & (offset > 0)) | ((side > 0) & (offset < 0))  # (1, heads, Lq, Lk)
    return bias.masked_fill(other_side, torch.finfo(dtype).min)


def rope_angles(states: torch.Tensor, start: int | torch.Tensor, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE's cosines and sines for ``states`` at positions ``start …``, to `rotate` queries and keys with.

    Computed once for the queries and keys of a step: in cached decoding, with one position per step, the angles cost
    more than rotating.

    Args:
        states: Queries or keys ``(batch, heads, length, head_dim)``, ``head_dim`` even; only their length, size,
            dtype and device are read.
        start: Position of the first of them (the number of tokens already cached).
        theta: Base of the frequencies ``θ^(−2d/D)``.

    Returns:
        ``(cos, sin)``, each ``(length, head_dim)``: the angle of dimension d repeated at d + D/2, in float32 at least
        (positions in the thousands times a frequency need its precision).
    """
    length, half = states.shape[-2], states.shape[-1] // 2
    dtype = torch.promote_types(states.dtype, torch.float32)
    frequencies = theta ** (-torch.arange(half, dtype=dtype, device=states.device) / half)  # (D/2,)
    positions = (torch.arange(length, device=states.device) + start).to(dtype)
    angles = positions[:, None] * frequencies[None, :]  # (L, D/2)
    angles = torch.cat((angles, angles), dim=-1)  # (L, D): dimension d and d + D/2 turn by the same angle
    return angles.cos(), angles.sin()


def rotate(states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE: ``states`` rotated by `rope_angles`' ``cos`` and ``sin``, dimension d paired with d + D/2 (as Llama does).

    Args:
        states: Queries or keys ``(batch, heads, length, head_dim)``.
        cos, sin: ``(length, head_dim)`` from `rope_angles`, whose dtype the rotation is computed in.

    Returns:
        The rotated states, same shape and dtype.
    """
    half = states.shape[-1] // 2
    promoted = states.to(cos.dtype)
    first, second = promoted[..., :half], promoted[..., half:]
    return (promoted * cos + torch.cat((-second, first), dim=-1) * sin).to(states.dtype)


__all__ = ["alibi_directions", "alibi_slopes", "distance_bias", "rope_angles", "rotate"]
