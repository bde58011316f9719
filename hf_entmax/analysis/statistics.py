"""Per-head attention statistics of Correia et al. (2019), Section 5 and Appendix A, as pure tensor functions.

Every function takes the attention probabilities of one layer, ``attention`` shaped ``(B, H, Q, K)`` (batch,
heads, queries, keys), and ``allowed``, a ``(B, Q, K)`` bool tensor that is true where query ``q`` may attend to
key ``k``: both are real tokens (not padding) and, in decoder self-attention, ``k <= q``. A query with no allowed
key is padding and never counts. Per-query statistics return ``(values, counted)``: ``values`` shaped
``(B, H, Q)`` (or ``(B, Q)`` for a statistic of the whole layer) and ``counted``, the ``(B, Q)`` bool mask of the
queries where the statistic is defined; `masked_mean` averages them.
"""

import math
from collections.abc import Collection, Sequence

import torch


# A SentencePiece piece that starts with this marker begins a new word; the other pieces continue it.
WORD_START = "▁"


def allowed_keys(query_mask: torch.Tensor, key_mask: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Where each query may attend: real queries to real keys, and only to earlier keys when ``causal``.

    Args:
        query_mask: ``(B, Q)`` bool, true at real (non-padding) query positions.
        key_mask: ``(B, K)`` bool, true at real key positions.
        causal: Decoder self-attention: query ``q`` sees keys ``k <= q`` only.

    Returns:
        ``(B, Q, K)`` bool.
    """
    allowed = query_mask[:, :, None] & key_mask[:, None, :]  # (B, Q, K)
    if causal:
        num_queries, num_keys = allowed.shape[1:]
        allowed = allowed & torch.ones(num_queries, num_keys, dtype=torch.bool, device=allowed.device).tril()
    return allowed


def attention_density(attention: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Fraction of the keys a query may attend to that get a non-zero weight (exact zeros count as zeros).

    Softmax gives 1 (unless a weight underflows to 0); a head that puts all mass on one of n keys gives 1/n.

    Returns:
        ``(density, counted)``: ``(B, H, Q)`` in [0, 1] and the ``(B, Q)`` mask of real queries.
    """
    num_allowed = allowed.sum(-1)  # (B, Q)
    nonzero = ((attention != 0) & allowed[:, None]).sum(-1)  # (B, H, Q)
    density = nonzero / num_allowed.clamp(min=1)[:, None]  # (B, H, Q)
    return density, num_allowed > 0


def largest_weight(attention: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The largest weight each query gives a key: 1 when all its mass is on one key, 1/n when spread evenly over n.

    A head that aligns (a target word to the source word it translates) keeps this high whatever its α; one that has
    not found what to attend to spreads its mass and keeps it low, dense or sparse.

    Returns:
        ``(largest, counted)``: ``(B, H, Q)`` in [0, 1] and the ``(B, Q)`` mask of real queries.
    """
    largest = attention.masked_fill(~allowed[:, None], 0.0).amax(-1)  # (B, H, Q)
    return largest, allowed.any(-1)


def entropy_bits(probabilities: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in bits along the last dimension, with 0·log 0 = 0 (exact zeros are fine)."""
    return -torch.special.xlogy(probabilities, probabilities).sum(-1) / math.log(2)


def head_divergence(attention: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean Jensen–Shannon divergence (base 2, so in [0, 1]) between the heads' distributions, per query.

    JS(p, q) = H((p + q) / 2) − (H(p) + H(q)) / 2, averaged over the H·(H − 1)/2 pairs of heads. It is exactly 0
    for identical heads (their mixture is the distribution itself) and 1 for heads with disjoint supports. A layer
    with a single head has no pair: its divergence is 0.

    Returns:
        ``(divergence, counted)``: ``(B, Q)`` and the ``(B, Q)`` mask of real queries.
    """
    # Float64: the difference of entropies cancels to rounding error, which must stay far below the
    # divergences between distinct heads.
    probabilities = (attention.double() * allowed[:, None]).transpose(0, 1)  # (H, B, Q, K)
    num_heads = probabilities.shape[0]
    entropies = entropy_bits(probabilities)  # (H, B, Q)
    total = torch.zeros(probabilities.shape[1:3], dtype=torch.float64, device=attention.device)  # (B, Q)
    # One head against all later heads at a time: memory stays that of the attention tensor.
    for head in range(num_heads - 1):
        mixtures = (probabilities[head] + probabilities[head + 1 :]) / 2  # (H - head - 1, B, Q, K)
        divergences = entropy_bits(mixtures) - (entropies[head] + entropies[head + 1 :]) / 2  # (H - head - 1, B, Q)
        total += divergences.clamp(min=0).sum(0)
    num_pairs = max(num_heads * (num_heads - 1) // 2, 1)
    return (total / num_pairs).to(attention.dtype), allowed.any(-1)


def offset_mass(attention: torch.Tensor, allowed: torch.Tensor, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Probability each query puts on the key ``offset`` positions away (−1: previous token, +1: next token).

    Meaningful for self-attention, where queries and keys are the same sequence. Queries whose key at that
    offset does not exist or may not be attended to (the first token for −1, the last real token for +1, every
    decoder query for +1) do not count.

    Returns:
        ``(mass, counted)``: ``(B, H, Q)`` in [0, 1] and the ``(B, Q)`` mask of queries that have such a key.
    """
    num_queries, num_keys = allowed.shape[1:]
    keys = torch.arange(num_queries, device=attention.device) + offset  # (Q,)
    exists = (keys >= 0) & (keys < num_keys)  # (Q,)
    index = keys.clamp(0, num_keys - 1)  # (Q,)
    counted = allowed[:, torch.arange(num_queries, device=attention.device), index] & exists  # (B, Q)
    mass = attention.gather(-1, index.view(1, 1, -1, 1).expand(*attention.shape[:3], 1)).squeeze(-1)  # (B, H, Q)
    return mass * counted[:, None], counted


def same_word_mass(
    attention: torch.Tensor, allowed: torch.Tensor, word_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Probability each query puts on the *other* subword pieces of its own word (the paper's BPE-merging heads).

    The query's own position is left out, so a head that attends to the token itself is not counted as merging.

    Args:
        attention: ``(B, H, L, L)`` self-attention.
        allowed: ``(B, L, L)``.
        word_ids: ``(B, L)`` long: the index of the word each piece belongs to (see `word_ids`), −1 for special
            tokens and padding, which belong to no word.

    Returns:
        ``(mass, counted)``: ``(B, H, L)`` in [0, 1] and the ``(B, L)`` mask of queries whose word has another
        piece they may attend to.
    """
    length = word_ids.shape[1]
    in_word = word_ids >= 0  # (B, L)
    same = (word_ids[:, :, None] == word_ids[:, None, :]) & in_word[:, :, None]  # (B, L, L)
    same = same & ~torch.eye(length, dtype=torch.bool, device=word_ids.device) & allowed
    mass = (attention * same[:, None]).sum(-1)  # (B, H, L)
    return mass, same.any(-1)


def mass_per_token(
    attention: torch.Tensor, allowed: torch.Tensor, key_token_ids: torch.Tensor, vocab_size: int
) -> torch.Tensor:
    """Attention mass every vocabulary entry receives, summed over all real queries, per head.

    Divided by the number of real queries it is the share of the head's attention that goes to each token
    type, which shows the strongest attended-token patterns (e.g. a head that sends most of its mass to ``</s>``).

    Args:
        key_token_ids: ``(B, K)`` long, the token id at each key position.
        vocab_size: Size of the vocabulary the ids index.

    Returns:
        ``(H, vocab_size)`` float64.
    """
    per_key = (attention.double() * allowed[:, None]).sum(2)  # (B, H, K)
    num_heads = per_key.shape[1]
    per_key = per_key.transpose(0, 1).reshape(num_heads, -1)  # (H, B·K)
    index = key_token_ids.reshape(1, -1).expand(num_heads, -1)  # (H, B·K)
    totals = torch.zeros(num_heads, vocab_size, dtype=torch.float64, device=attention.device)
    return totals.scatter_add_(1, index, per_key)


def masked_mean(values: torch.Tensor, counted: torch.Tensor) -> torch.Tensor:
    """Mean of per-query ``values`` over the ``counted`` queries: ``(B, H, Q)`` → ``(H,)``, ``(B, Q)`` → scalar.

    NaN where no query counts (the statistic is undefined there, e.g. next-token mass in decoder self-attention).
    """
    if values.dim() == 3:
        counted = counted[:, None]  # (B, 1, Q): the same queries for every head
        return (values * counted).sum((0, 2)) / counted.sum((0, 2))
    return (values * counted).sum() / counted.sum()


def word_ids(tokens: Sequence[str], special_tokens: Collection[str] = ()) -> list[int]:
    """The word index of each SentencePiece piece: a piece starting with "▁" begins a word, others continue it.

    Special tokens (``</s>``, ``<pad>``, …) belong to no word and get −1; a first piece without "▁" still
    begins word 0.

    >>> word_ids(["▁the", "▁hou", "se", "</s>"], {"</s>"})
    [0, 1, 1, -1]
    """
    ids, word = [], -1
    previous_special = True
    for token in tokens:
        if token in special_tokens:
            ids.append(-1)
            previous_special = True
            continue
        if token.startswith(WORD_START) or previous_special:
            word += 1
        ids.append(word)
        previous_special = False
    return ids


__all__ = [
    "allowed_keys",
    "attention_density",
    "entropy_bits",
    "head_divergence",
    "largest_weight",
    "masked_mean",
    "mass_per_token",
    "offset_mass",
    "same_word_mass",
    "word_ids",
]
