"""α-entmax attention on CUDA tensors by the Triton kernels of `triton_attention.py`, opt-in (``HF_ENTMAX_TRITON=1``).

`triton_entmax_attention` serves the model's attention as `cpu.native_entmax_attention` does on the CPU: it returns
``None`` where the kernel does not apply, as `dispatch.triton_attention_route` decides (and logs), and the caller then
composes the attention of PyTorch operations. This module does not import triton; the route does, once, and only
where ``HF_ENTMAX_TRITON=1``.
"""

import torch

from .dispatch import triton_attention_route


def triton_entmax_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    alpha: torch.Tensor | float,
    mask: torch.Tensor | None,
    dropout: float = 0.0,
    weights_wanted: bool = False,
) -> tuple[torch.Tensor, None] | None:
    """α-entmax attention by the Triton kernels, or ``None`` where they do not apply
    (`dispatch.triton_attention_route`; the caller then composes it).

    Args:
        query: ``(batch, heads, query_len, head_dim)``, already scaled.
        key, value: ``(batch, heads, key_len, head_dim)``, in the query's dtype (float16, bfloat16 or float32).
        alpha: α ∈ [1, 2], a float or one per head (``(1, heads, 1, 1)``).
        mask: Additive mask that broadcasts to ``(batch, heads, query_len, key_len)``: 0 keeps a key, −inf or the
            mask dtype's lowest value masks it. ``None`` masks nothing.
        dropout: The attention dropout probability in effect (0 in evaluation): the kernels have none, so any other
            value leaves the call to the caller.
        weights_wanted: Whether the caller returns the attention weights (``output_attentions``), which the kernels
            never form; ``True`` leaves the call to the caller.

    Returns:
        ``(output, None)``: ``output`` is ``(batch, heads, query_len, head_dim)``, a view whose ``transpose(1, 2)`` is
        contiguous; no weights, as with FlashAttention. Gradients flow to the query, key, value and a tensor α.
    """
    if not triton_attention_route(query, key, value, mask, dropout, weights_wanted).triton:
        return None
    from .triton_attention import entmax_attention  # here, not at the top: it imports triton

    return entmax_attention(query, key, value, alpha, mask), None


__all__ = ["triton_entmax_attention"]
