"""α-entmax on the CPU by the native kernel (the C++ in ``csrc/``, built on first use by `build.py`).

The kernel runs Newton on each row's normaliser over the shrinking set of candidates for the support, fused into one
loop per row, with vectorised exp/log; its backward gives the gradient w.r.t. the scores and α in one pass.

`entmax` serves the mapping (`hf_entmax.entmax`); `entmax_attention` serves the model's attention, fused (attention
dropout included) so that a training step allocates two or three attention-sized tensors instead of five or more;
`restricted_attention` serves Sparsefinder's attention over a graph's pairs. They run where `dispatch.py`, which alone
decides where the kernel applies (CPU tensors, dtypes, the graph's density, ...), sends a call.
"""

import torch

from ..modeling.entmax import entmax_backward, is_masked
from .build import kernel_available


def _kernel_scores(scores: torch.Tensor) -> torch.Tensor:
    """The scores as the kernel takes them: float32/float64 as they are, half-precision ones in float32, with their own
    mask value (their lowest, which is not float32's) marked as −inf."""
    if scores.dtype in (torch.float32, torch.float64):
        return scores
    return scores.to(torch.float32).masked_fill(is_masked(scores), float("-inf"))


class NativeEntmaxFunction(torch.autograd.Function):
    """α-entmax along the last dimension of ``scores`` (..., size); α broadcasts to (..., 1). float32 and float64 are
    computed as they are; bfloat16 and float16 in float32 (inside the function, so that the gradients of a row of NaN
    are NaN at its masked entries too, as in every other mapping) and returned in their own dtype.

    Second-order gradients (a backward with ``create_graph=True``) are computed by the PyTorch implementation's
    backward formula, which autograd differentiates through the function's output."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        probs = torch.ops.hf_entmax.entmax_forward(_kernel_scores(scores), alpha)
        output = probs.to(scores.dtype)
        ctx.save_for_backward(probs, output, alpha)
        return output

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        probs, output, alpha = ctx.saved_tensors
        grad_probs = grad_output.to(probs.dtype)
        if torch.is_grad_enabled():  # create_graph: a backward that autograd can differentiate
            # The output, not the float32 copy of half-precision probabilities, is what autograd connects to the
            # inputs.
            grad_scores, grad_alpha = entmax_backward(
                output.to(probs.dtype), alpha, grad_probs, probs.dim() - 1, needs_alpha=ctx.needs_input_grad[1]
            )
        else:
            grad_scores, grad_alpha = torch.ops.hf_entmax.entmax_backward(
                probs, grad_probs, alpha, ctx.needs_input_grad[1]
            )
        return grad_scores.to(grad_output.dtype), grad_alpha


def entmax(scores: torch.Tensor, alpha: torch.Tensor | float, dim: int) -> torch.Tensor:
    """α-entmax by the native kernel, for the CPU tensors `dispatch.native_entmax` sends it.

    Same contract as `hf_entmax.entmax` (α already checked, ``dim`` normalised): masked entries are −inf or
    the dtype's lowest value, all-masked rows give zeros, half-precision scores are computed in float32.
    """
    # Decoding calls this once per layer and token on a few hundred short rows, so the Python side is kept to a few
    # tensor operations: the kernel broadcasts α and reshapes itself.
    last = dim == scores.dim() - 1
    moved = scores if last else scores.movedim(dim, -1)
    if not isinstance(alpha, torch.Tensor):
        alpha = torch.tensor(alpha, dtype=torch.float64 if scores.dtype == torch.float64 else torch.float32)
    elif not last:  # line α's dimensions up with the scores' before moving `dim` last
        alpha = alpha.reshape((1,) * (scores.dim() - alpha.dim()) + alpha.shape).movedim(dim, -1)
    if torch.is_grad_enabled() and (moved.requires_grad or alpha.requires_grad):
        probs = NativeEntmaxFunction.apply(moved, alpha)
    else:  # inference (generation): the autograd Function's bookkeeping is a fair share of a small call
        probs = torch.ops.hf_entmax.entmax_forward(_kernel_scores(moved), alpha).to(scores.dtype)
    return probs if last else probs.movedim(-1, dim)


def draw_keep_mask(
    shape: torch.Size | tuple[int, ...], dropout: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Which attention weights dropout keeps: a bool tensor of ``shape``, each entry True with probability
    ``1 − dropout``, drawn from ``generator`` (torch's default generator, as `nn.functional.dropout` draws, when
    ``None``, so that ``torch.manual_seed``/``set_seed`` make a run reproducible)."""
    # bool: a quarter of the memory of the float mask nn.functional.dropout keeps for its backward.
    return torch.empty(shape, dtype=torch.bool).bernoulli_(1.0 - dropout, generator=generator)


def _keep_scale(dropout: float) -> float:
    # As nn.functional.dropout: kept weights are multiplied by 1 / (1 − p); at p = 1 nothing is kept (and 0 · ∞ = NaN).
    return 1.0 / (1.0 - dropout) if dropout < 1.0 else 0.0


def _attention_forward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    alpha: torch.Tensor,
    mask: torch.Tensor | None,
    dropout: float,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(output, weights, probs, keep)``: without dropout the weights are the probabilities and ``keep`` is None."""
    # The scores are a temporary of this function alone, so the kernel turns them into the probabilities in place.
    probs = torch.ops.hf_entmax.entmax_forward_(torch.matmul(query, key.transpose(-1, -2)), alpha, mask)
    if dropout == 0.0:
        return torch.matmul(probs, value), probs, probs, None
    keep = draw_keep_mask(probs.shape, dropout, generator)
    weights = torch.mul(probs, keep).mul_(_keep_scale(dropout))
    return torch.matmul(weights, value), weights, probs, keep


class NativeEntmaxAttentionFunction(torch.autograd.Function):
    """``probs = entmax(query keyᵀ + mask)``, ``weights = dropout(probs)``, ``output = weights value``, with as few
    attention-sized tensors as the gradients allow.

    Composed of separate operations, attention allocates five tensors of its scores' size per training step (the
    scores, the masked scores, the probabilities, and their two gradients), and with dropout eight (its float mask,
    the dropped weights and their gradient too), three of which live from the forward to the backward; fresh memory
    can cost as much to fault in as the kernel's own work on it (see docs/kernel.md, "The fused attention"). Here
    the mask is added inside the kernel and the probabilities overwrite the scores; without dropout the gradient to
    the scores overwrites the gradient to the probabilities, which this function alone holds. Dropout keeps its
    mask as bool and the dropped weights only until the forward returns; the backward recomputes them for the
    values' gradient in the one buffer that then takes, in turn, the gradient to the weights, to the probabilities
    and to the scores. So a step allocates two attention-sized tensors without dropout and three (and a bool mask)
    with it, and keeps the probabilities (and the mask) for the backward. The inputs are as in
    `entmax_attention`, which makes the query, key and value contiguous.

    Second-order gradients (a backward with ``create_graph=True``) recompute the attention from its inputs by
    operations that autograd differentiates (`_differentiable_attention_backward`).
    """

    @staticmethod
    def forward(ctx, query, key, value, alpha, mask, dropout=0.0, generator=None):
        output, weights, probs, keep = _attention_forward(query, key, value, alpha, mask, dropout, generator)
        ctx.save_for_backward(query, key, value, alpha, probs, keep, mask)
        ctx.keep_scale = _keep_scale(dropout)
        ctx.set_materialize_grads(False)  # unused weights (the usual case) should cost no tensor of zeros
        return output, weights

    @staticmethod
    def backward(ctx, grad_output, grad_weights):
        query, key, value, alpha, probs, keep, mask = ctx.saved_tensors
        grad_query = grad_key = grad_value = None
        if grad_output is None and grad_weights is None:
            return None, None, None, None, None, None, None
        if torch.is_grad_enabled():  # create_graph: a backward that autograd can differentiate
            grads = _differentiable_attention_backward(
                (query, key, value, alpha), mask, keep, ctx.keep_scale, grad_output, grad_weights, ctx.needs_input_grad
            )
            return *grads, None, None, None
        grad_scores = None  # the buffer described above, once it exists
        if grad_output is not None:
            grad_output = grad_output.contiguous()
            if ctx.needs_input_grad[2]:
                weights = probs if keep is None else torch.mul(probs, keep).mul_(ctx.keep_scale)
                grad_value = torch.matmul(weights.transpose(-1, -2), grad_output)
                if keep is not None:
                    grad_scores = weights
            grad_scores = torch.matmul(grad_output, value.transpose(-1, -2), out=grad_scores)
            if grad_weights is not None:
                grad_scores += grad_weights
        else:
            grad_scores = grad_weights.clone(memory_format=torch.contiguous_format)
        if keep is not None:
            grad_scores.mul_(keep).mul_(ctx.keep_scale)  # now the gradient to the probabilities
        grad_scores, grad_alpha = torch.ops.hf_entmax.entmax_backward_(
            probs, grad_scores, alpha, ctx.needs_input_grad[3]
        )
        if ctx.needs_input_grad[0]:
            grad_query = torch.matmul(grad_scores, key)
        if ctx.needs_input_grad[1]:
            grad_key = torch.matmul(grad_scores.transpose(-1, -2), query)
        return grad_query, grad_key, grad_value, grad_alpha, None, None, None


def _composed_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    alpha: torch.Tensor,
    mask: torch.Tensor | None,
    keep: torch.Tensor | None,
    keep_scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused attention's ``(output, weights)`` as operations autograd records, the same ones in the same order:
    the scores, the mask added, the kernel's probabilities (through `NativeEntmaxFunction`), dropout by the given
    ``keep`` mask (None: none), the weights times the values. Shapes as in `entmax_attention`."""
    scores = torch.matmul(query, key.transpose(-1, -2))  # (B, H, Lq, Lk)
    if mask is not None:
        scores = scores + mask  # as the kernel adds it
    probs = NativeEntmaxFunction.apply(scores, alpha)
    weights = probs if keep is None else probs * keep * keep_scale
    return torch.matmul(weights, value), weights  # (B, H, Lq, D), (B, H, Lq, Lk)


def _differentiable_attention_backward(
    inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    mask: torch.Tensor | None,
    keep: torch.Tensor | None,
    keep_scale: float,
    grad_output: torch.Tensor | None,
    grad_weights: torch.Tensor | None,
    needs_input_grad: tuple[bool, ...],
) -> tuple[torch.Tensor | None, ...]:
    """The gradients of the fused attention to ``inputs`` (query, key, value, α), as operations autograd records: the
    attention recomputed from the inputs (`_composed_attention`, with the same dropout mask) and differentiated with
    ``create_graph=True``. The fused backward's saved probabilities are not part of the graph, so differentiating it
    would miss their dependence on the inputs."""
    output, weights = _composed_attention(*inputs, mask, keep, keep_scale)
    pairs = [(output, grad_output), (weights, grad_weights)]
    outputs = [tensor for tensor, grad in pairs if grad is not None]
    grads = [grad for _, grad in pairs if grad is not None]
    needed = needs_input_grad[:4]
    wanted = [tensor for tensor, need in zip(inputs, needed, strict=True) if need]
    computed = iter(torch.autograd.grad(outputs, wanted, grads, create_graph=True, allow_unused=True))
    return tuple(next(computed) if need else None for need in needed)


def entmax_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    alpha: torch.Tensor | float,
    mask: torch.Tensor | None,
    dropout: float = 0.0,
    generator: torch.Generator | None = None,
    composed: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """α-entmax attention by the native kernel, fused, for the tensors `dispatch.native_entmax_attention` sends it.

    Args:
        query: ``(batch, heads, query_len, head_dim)``, already scaled.
        key, value: ``(batch, heads, key_len, head_dim)``, in the query's dtype (float32 or float64).
        alpha: α ∈ [1, 2], a float or a tensor that broadcasts to ``(batch, heads, query_len, 1)``.
        mask: Additive mask in the query's dtype that broadcasts to ``(batch, heads, query_len, key_len)``:
            0 keeps a key, −inf or the dtype's lowest value masks it. ``None`` masks nothing. No gradient reaches it.
        dropout: Probability of dropping each attention weight, as ``nn.functional.dropout`` on the probabilities
            in training (the caller passes 0 in evaluation): dropped weights become 0, the others are divided by
            ``1 − dropout``.
        generator: Where the dropout mask is drawn from: torch's default generator when ``None``.
        composed: Compute the output from the weights by PyTorch products around the kernel's mapping
            (`_composed_attention`), so that a gradient of the output reaches the weights (gradient-based
            attribution, where the caller returns them); the result, dropout mask included, is the fused kernel's.

    Returns:
        ``(output, weights)``: ``output = weights @ value`` is ``(batch, heads, query_len, head_dim)`` and ``weights``
        ``(batch, heads, query_len, key_len)``: the probabilities, after dropout when there is any (as Marian's eager
        attention returns them); gradients flow from both to the query, key, value and a tensor α.

    Raises:
        ValueError: ``dropout`` outside [0, 1].
    """
    if not 0.0 <= dropout <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {dropout}")
    if not isinstance(alpha, torch.Tensor):
        alpha = torch.tensor(alpha, dtype=query.dtype)
    if composed:
        keep = draw_keep_mask((*query.shape[:-1], key.shape[-2]), dropout, generator) if dropout > 0.0 else None
        return _composed_attention(query, key, value, alpha, mask, keep, _keep_scale(dropout))
    if torch.is_grad_enabled() and any(tensor.requires_grad for tensor in (query, key, value, alpha)):
        # Marian's heads are strided views of its projections, which every batched product would copy again; each of
        # these is used twice. Made contiguous here, so that the tensors the function saves are its inputs, which
        # second-order gradients differentiate through.
        query, key, value = (tensor.contiguous() for tensor in (query, key, value))
        return NativeEntmaxAttentionFunction.apply(query, key, value, alpha, mask, dropout, generator)
    output, weights, _, _ = _attention_forward(query, key, value, alpha, mask, dropout, generator)  # no autograd
    return output, weights


def graph_rows(graph: torch.Tensor, max_pairs: int = -1) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A bool graph ``(..., Lk)`` as compressed rows ``(offsets, columns)``: ``offsets`` ``(rows + 1,)`` int64, where
    each row's entries start in ``columns``, ``(number of true entries,)`` int32, the positions of its true entries in
    increasing order. With ``max_pairs`` ≥ 0, a graph of more true entries returns after counting them, with
    ``columns`` None."""
    return torch.ops.hf_entmax.graph_rows(graph, max_pairs)


def nearest_rows(distances: torch.Tensor, keys: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The graph of each row's ``keys`` smallest ``distances`` ``(..., Lk)`` below +inf (all of them where a row has
    no more; +inf marks a pair that may not be chosen) as compressed rows (`graph_rows`), made row by row without
    forming the bool graph (Sparsefinder's nearest method). Ties go to the lower column."""
    return torch.ops.hf_entmax.nearest_rows(distances, keys)


def _pair_rows(offsets: torch.Tensor) -> torch.Tensor:
    """``(number of columns,)`` the row of each entry of a graph's compressed rows."""
    return torch.repeat_interleave(torch.arange(offsets.numel() - 1), offsets.diff())


def rows_mask(
    offsets: torch.Tensor,
    columns: torch.Tensor,
    shape: torch.Size | tuple[int, ...],
    dtype: torch.dtype,
    pair_bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """The additive mask ``shape`` = ``(..., Lk)`` of a graph given as compressed rows (`graph_rows`): 0 (or the
    pair's ``pair_bias``) on its pairs, −inf elsewhere."""
    mask = torch.full(shape, float("-inf"), dtype=dtype)
    mask.view(-1, shape[-1])[_pair_rows(offsets), columns.long()] = 0.0 if pair_bias is None else pair_bias.to(dtype)
    return mask


def pair_values(mask: torch.Tensor, offsets: torch.Tensor, columns: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """``(number of columns,)`` the entries of ``mask`` (broadcastable to ``shape`` = ``(batch, heads, query_len,
    key_len)``) at a graph's pairs, in the compressed rows' order, read without broadcasting the mask to ``shape``."""
    mask = mask.view((1,) * (4 - mask.dim()) + tuple(mask.shape))
    rows, heads, query_len = _pair_rows(offsets), shape[1], shape[2]
    indices = (rows // (heads * query_len), rows // query_len % heads, rows % query_len)
    # A broadcast dimension of the mask (size 1) is read at 0 whatever the pair's index there.
    indices = tuple(index if mask.shape[dim] > 1 else torch.zeros_like(index) for dim, index in enumerate(indices))
    return mask[(*indices, columns.long())].contiguous()


class NativeRestrictedAttentionFunction(torch.autograd.Function):
    """``output = entmax(query keyᵀ on the graph's pairs) value``: α-entmax attention over the pairs of a graph only,
    each query's keys gathered (``torch.ops.hf_entmax.restricted_attention_forward``), equal to the fused attention
    with the pairs outside the graph masked. Only the probabilities of the graph's pairs are kept for the backward,
    which visits each row's support alone. The inputs are as in `restricted_attention`, contiguous, with the
    graph as compressed rows (`graph_rows`).

    Second-order gradients (a backward with ``create_graph=True``) recompute the attention densely, the pairs outside
    the graph masked, by operations that autograd differentiates (`_differentiable_attention_backward`)."""

    @staticmethod
    def forward(ctx, query, key, value, alpha, offsets, columns, pair_bias=None):
        output, probs = torch.ops.hf_entmax.restricted_attention_forward(
            query, key, value, alpha, offsets, columns, pair_bias
        )
        ctx.save_for_backward(query, key, value, alpha, offsets, columns, probs, pair_bias)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        query, key, value, alpha, offsets, columns, probs, pair_bias = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: a backward that autograd can differentiate
            scores_shape = (*query.shape[:-1], key.shape[-2])
            mask = rows_mask(offsets, columns, scores_shape, query.dtype, pair_bias)
            grads = _differentiable_attention_backward(
                (query, key, value, alpha), mask, None, 1.0, grad_output, None, ctx.needs_input_grad
            )
            return *grads, None, None, None
        grad_query, grad_key, grad_value, grad_alpha = torch.ops.hf_entmax.restricted_attention_backward(
            grad_output.contiguous(), query, key, value, alpha, offsets, columns, probs, ctx.needs_input_grad[3]
        )
        return grad_query, grad_key, grad_value, grad_alpha, None, None, None


def restricted_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    alpha: torch.Tensor | float,
    offsets: torch.Tensor,
    columns: torch.Tensor,
    pair_bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """α-entmax attention over the pairs of a graph only, each query's keys gathered, by the native kernel, for the
    tensors `dispatch.native_entmax_attention` sends it. Equal to the fused attention with the pairs outside the graph
    masked, up to rounding.

    Args:
        query: ``(batch, heads, query_len, head_dim)``, already scaled.
        key, value: ``(batch, heads, key_len, head_dim)``, in the query's dtype (float32 or float64).
        alpha: α ∈ [1, 2], a float or a tensor that broadcasts to ``(batch, heads, query_len, 1)``.
        offsets, columns: The ``(batch, heads, query_len, key_len)`` graph of the pairs attended over, as compressed
            rows (`graph_rows`). A query without pairs gets zeros, as a fully masked query of the full attention.
        pair_bias: ``(number of columns,)`` added to the pairs' scores (the additive mask's values there,
            `pair_values`: ALiBi's distance bias), in the query's dtype; it gets no gradient. ``None``: nothing added.

    Returns:
        ``output = probs @ value``, ``(batch, heads, query_len, head_dim)``, where ``probs`` is α-entmax over each
        query's pairs and 0 elsewhere; gradients flow to the query, key, value and a tensor α. No dropout.
    """
    if not isinstance(alpha, torch.Tensor):
        alpha = torch.tensor(alpha, dtype=query.dtype)
    query, key, value = (tensor.contiguous() for tensor in (query, key, value))
    if torch.is_grad_enabled() and any(tensor.requires_grad for tensor in (query, key, value, alpha)):
        return NativeRestrictedAttentionFunction.apply(query, key, value, alpha, offsets, columns, pair_bias)
    return torch.ops.hf_entmax.restricted_attention_forward(query, key, value, alpha, offsets, columns, pair_bias)[0]


__all__ = [
    "NativeEntmaxAttentionFunction",
    "NativeEntmaxFunction",
    "NativeRestrictedAttentionFunction",
    "draw_keep_mask",
    "entmax",
    "entmax_attention",
    "graph_rows",
    "kernel_available",
    "nearest_rows",
    "pair_values",
    "restricted_attention",
    "rows_mask",
]
