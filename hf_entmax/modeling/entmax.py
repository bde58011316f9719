"""α-entmax: sparse, adaptive alternatives to softmax (Peters et al., 2019; Correia et al., 2019).

α-entmax maps scores ``z`` to the probability vector that solves

    entmax_α(z) = argmax_{p ∈ simplex}  pᵀz + H_α(p),

where ``H_α`` is the Tsallis α-entropy. α = 1 is softmax, α = 2 is sparsemax and every α > 1 gives
exact zeros to low-scoring entries. With β = α − 1 the solution is the β-deformed exponential

    p_i = [1 + β (z_i − c)]_+ ^ (1/β),        (p_i = exp(z_i − c) at β = 0)

with one normaliser ``c`` per row chosen so that Σ p = 1. Writing it in terms of ``c`` (rather than
the threshold τ = β c − 1 of the papers) keeps it accurate as α → 1 and makes α = 1 the plain limit.

This file is copied to the Hub next to the model, so it needs nothing but torch.
"""

import math

import torch


# The Newton solver's constants, shared by the Triton kernel (hf_entmax/kernels/triton_attention.py imports them). The
# native kernel's C++ cannot import them: its counterparts in hf_entmax/kernels/csrc/constants.h say how they relate,
# and tests/test_kernel_build.py checks that they do.
# Newton from the left converges monotonically; this bound is a safety net, not a budget (C++: kMaxNewtonPasses, the
# same).
MAX_NEWTON_STEPS = 50
# A row stops once |Σ p − 1| ≤ this many units of its compute dtype's ε: Newton stops on the mass alone here, so the
# tolerance must stay above the rounding of `torch.sum` over long rows. (C++: kMassTolerance, 2 ε, tighter on purpose:
# it also stops where a step no longer moves the normaliser.)
NEWTON_TOLERANCE_EPS = 16
# Traced code (torch.compile, torch.export, ONNX) cannot stop on a value it has not computed: it runs a fixed number
# of steps instead, enough for every row to reach its dtype's rounding before the final renormalisation (measured on
# rows of 2–4096 entries, spreads 0.1–100, α in [1, 2] and adversarial ramps: 8 steps in float32, 12 in float64;
# docs/kernel.md), with a margin.
_TRACED_NEWTON_STEPS = {torch.float32: 16, torch.float64: 24}
# Scores below ``row max − 1e30`` can never be in the support, and clamping them keeps every
# product finite (an α-entmax with β ≥ 1e-30 gives them zero, softmax gives exp(−1e30) = 0).
_FLOOR = -1e30
# Below |β (z − c)| = 0.1 the α-gradient uses its series; above it the closed form is accurate. (C++: another series,
# in −β log p, with its own bound: docs/kernel.md, "Constants".)
SERIES_THRESHOLD = 0.1
SERIES_TERMS = 10


def mask_floor(dtype: torch.dtype) -> float:
    """The masking convention of every attention path: an additive mask entry or a score at or below this value (the
    dtype's lowest, which transformers' eager masks use; −inf too) masks its key. Use `is_masked` on tensors; the
    Triton kernel compares with this value itself."""
    return torch.finfo(dtype).min


def is_masked(values: torch.Tensor) -> torch.Tensor:
    """Where ``values`` (scores, or an additive mask) mask their entry: at or below `mask_floor` of their dtype. NaN
    masks nothing: it makes its row NaN."""
    return values <= mask_floor(values.dtype)


def _normalize_dim(dim: int, ndim: int) -> int:
    if not -ndim <= dim < ndim:
        raise IndexError(f"`dim` must be in [{-ndim}, {ndim - 1}] for a {ndim}-d tensor, got {dim}")
    return dim % ndim


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _shift_and_mask(scores: torch.Tensor, dim: int, floor: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores in float32 (float64 stays float64) with each row's maximum moved to 0.

    Entries equal to −inf or to the lowest finite value of ``scores.dtype`` (the additive mask
    value of Hugging Face models) are masked: they come back as ``floor`` and get probability 0.
    A row whose maximum is +inf comes back with its +inf entries at 0 and every other entry at
    ``floor``: they share its mass equally, as equal large finite scores do in the limit. A row
    with a NaN comes back all NaN, which every mapping carries through to a row of NaN.

    Returns:
        ``(shifted, empty_rows)``: ``shifted`` has the shape of ``scores`` with values in
        [floor, 0] (or NaN); ``empty_rows`` (size 1 along ``dim``) marks rows whose entries are all masked.
    """
    masked = is_masked(scores)
    z = scores.to(_compute_dtype(scores.dtype)).masked_fill(masked, float("-inf"))
    row_max = z.amax(dim=dim, keepdim=True)  # NaN in a row with a NaN
    empty_rows = row_max == float("-inf")
    row_max = row_max.masked_fill(empty_rows, 0.0)
    # The maxima are set to 0 rather than computed as z − max, which is NaN (∞ − ∞) at the +inf entries.
    shifted = torch.where(z == row_max, 0.0, z - row_max)
    return shifted.clamp_min(floor), empty_rows


def _support_weights(probs: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """``g = p^(2 − α)`` on the support: the diagonal of entmax's Jacobian.

    Outside the support g is p itself: 0, or NaN in a row of NaN, whose gradients then stay NaN.
    """
    support = probs > 0
    return torch.where(support, probs * torch.exp(-beta * torch.log(torch.where(support, probs, 1.0))), probs)


def _scores_backward(grad_probs: torch.Tensor, weights: torch.Tensor, dim: int) -> torch.Tensor:
    """Vector–Jacobian product of every α-entmax w.r.t. its scores.

    The Jacobian is ``diag(g) − g gᵀ / Σ g`` with ``g = p^(2 − α)`` on the support, so the gradient
    is ``g ⊙ dp − g · (Σ g ⊙ dp) / Σ g`` (softmax: g = p; sparsemax: g = 1 on the support).
    """
    weights_sum = weights.sum(dim=dim, keepdim=True).clamp_min(torch.finfo(weights.dtype).tiny)
    weighted = weights * grad_probs
    return weighted - weights * (weighted.sum(dim=dim, keepdim=True) / weights_sum)


def _deformed_exp(
    shifted: torch.Tensor, beta: torch.Tensor, is_softmax: torch.Tensor, safe_beta: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``p = [1 + β w]_+^(1/β)`` (``exp(w)`` at β = 0) and ``g = p^(1 − β)``, the Newton slope.

    ``is_softmax`` is ``β == 0`` and ``safe_beta`` is β with 1 there (a divisor): the caller computes them once per
    solve rather than once per Newton step, which traced code would unroll.
    """
    base_minus_one = (beta * shifted).clamp_min(-1.0)  # β w, where w = z − c ≤ 0
    log_probs = torch.where(is_softmax, shifted, torch.log1p(base_minus_one) / safe_beta)
    probs = torch.exp(log_probs)
    base = 1.0 + base_minus_one
    slope = torch.where(probs > 0, probs / torch.where(base > 0, base, 1.0), 0.0)
    return probs, slope


def _deformed_log(
    log_mass: torch.Tensor, beta: torch.Tensor, is_softmax: torch.Tensor, safe_beta: torch.Tensor
) -> torch.Tensor:
    """``log_β(s) = (s^β − 1) / β`` (``log s`` at β = 0) from ``log s``, computed without cancellation."""
    return torch.where(is_softmax, log_mass, torch.expm1(beta * log_mass) / safe_beta)


def _entmax_newton(shifted: torch.Tensor, beta: torch.Tensor, empty_rows: torch.Tensor, dim: int) -> torch.Tensor:
    """Solve for each row's normaliser ``c`` by Newton's method and return the probabilities.

    Newton runs on ``h(c) = log_β(Σ_i p_i(c))``. ``Σ_i p_i(c)^β`` is the ℓ_{1/β}-norm of
    ``[1 + β (z − c)]_+``, so ``h`` is convex and decreasing in ``c``: started from the left
    (c = 0, where the largest entry alone has mass 1) Newton never overshoots. The step is exact
    for softmax (one step gives log-sum-exp) and whenever the support entries are tied, so rows
    converge in a few steps; converged rows stop moving and the loop ends when all have (traced code runs a fixed
    number of steps instead: it cannot branch on the data).
    """
    tolerance = NEWTON_TOLERANCE_EPS * torch.finfo(shifted.dtype).eps
    normaliser = torch.zeros_like(shifted.sum(dim=dim, keepdim=True))
    # Terms of β alone, out of the loop: traced code unrolls it, and each operation in it is one node per step.
    is_softmax = beta == 0
    safe_beta = torch.where(is_softmax, 1.0, beta)
    one_minus_beta = 1 - beta
    nonempty_rows = ~empty_rows
    traced = torch.compiler.is_compiling()
    for _ in range(_TRACED_NEWTON_STEPS[shifted.dtype] + 1 if traced else MAX_NEWTON_STEPS):
        probs, slope = _deformed_exp(shifted - normaliser, beta, is_softmax, safe_beta)
        mass = probs.sum(dim=dim, keepdim=True)
        active = ((mass - 1).abs() > tolerance) & nonempty_rows
        if not traced and not bool(active.any()):
            break
        # h / |h'| with h' = −s^(β − 1) Σ g.
        log_mass = torch.log(mass)
        h = _deformed_log(log_mass, beta, is_softmax, safe_beta)
        step = h * torch.exp(one_minus_beta * log_mass) / slope.sum(dim=dim, keepdim=True)
        normaliser = torch.where(active, normaliser + step, normaliser)
    # The remaining error in the mass is below the tolerance; dividing it out makes Σ p = 1 exact.
    return probs / mass.clamp_min(torch.finfo(mass.dtype).tiny)


def _expm1_ratio(y: torch.Tensor) -> torch.Tensor:
    """``(e^y − 1) / y``, by its series ``Σ_k y^k / (k + 1)!`` near 0, so that it and its derivatives are right
    at y = 0 too (second-order gradients differentiate it)."""
    small = y.abs() < SERIES_THRESHOLD
    series = torch.zeros_like(y)
    factorial = math.factorial(SERIES_TERMS + 1)
    for k in range(SERIES_TERMS, -1, -1):  # Horner
        series = series * y + 1.0 / factorial
        factorial //= k + 1
    return torch.where(small, series, torch.expm1(y) / torch.where(small, 1.0, y))


def _alpha_sensitivity(log_probs: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """``∂ log p_i / ∂β`` at a fixed normaliser, on the support.

    With ``w = z − c`` and ``u = β w``: ``log p = log1p(u) / β`` and the derivative is
    ``(w / (1 + u) − log p) / β``. That difference cancels as ``u → 0``, where the series
    ``w² Σ_{k≥1} (−1)^k k / (k + 1) u^(k−1)`` (−w²/2 at α = 1) is used instead.
    """
    # u = β w and the base 1 + u = p^β, each recovered from p without cancellation: expm1 is exact for small u,
    # and exp is exact for a tiny base, where 1 + expm1(…) would round to 0 at the edge of the support.
    base_minus_one = torch.expm1(beta * log_probs)
    base = torch.exp(beta * log_probs)
    safe_beta = torch.where(beta == 0, 1.0, beta)
    shifted = log_probs * _expm1_ratio(beta * log_probs)  # w = (p^β − 1) / β, smooth through β = 0
    closed_form = (shifted / base - log_probs) / safe_beta
    series = torch.zeros_like(base_minus_one)
    for k in range(SERIES_TERMS, 0, -1):  # Horner
        series = series * base_minus_one + (-1) ** k * k / (k + 1)
    series = shifted * shifted * series
    return torch.where(base_minus_one.abs() < SERIES_THRESHOLD, series, closed_form)


def entmax_backward(
    probs: torch.Tensor, alpha: torch.Tensor, grad_probs: torch.Tensor, dim: int, needs_alpha: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Vector–Jacobian products of α-entmax at its probabilities: the gradients w.r.t. the scores and α.

    Made of differentiable operations, smooth on the support (and through α = 1), so that autograd can differentiate
    it for second-order gradients when ``probs`` is the output it knows. The native kernel's autograd function uses it
    for those too.

    Args:
        probs: The probabilities, in their compute dtype, any shape.
        alpha: α, broadcasting to ``probs`` with size 1 along ``dim``.
        grad_probs: The gradient w.r.t. ``probs``, same shape and dtype.
        dim: The dimension that sums to one.
        needs_alpha: Whether to compute the gradient w.r.t. α.

    Returns:
        ``(grad_scores, grad_alpha)``: ``grad_scores`` like ``probs``; ``grad_alpha`` summed to α's shape, in its
        dtype (``None`` unless ``needs_alpha``). Rows of NaN give NaN.
    """
    beta = alpha.to(probs.dtype) - 1
    weights = _support_weights(probs, beta)
    grad_scores = _scores_backward(grad_probs, weights, dim)
    if not needs_alpha:
        return grad_scores, None
    # dp/dβ = p ⊙ D − g · (Σ p ⊙ D) / Σ g, with D = ∂ log p / ∂β at a fixed normaliser
    # (the second term is the normaliser's response, which keeps Σ p = 1).
    on_support = probs > 0
    log_probs = torch.log(torch.where(on_support, probs, 1.0))
    probs_sensitivity = torch.where(on_support, probs * _alpha_sensitivity(log_probs, beta), 0.0)
    weights_sum = weights.sum(dim=dim, keepdim=True).clamp_min(torch.finfo(weights.dtype).tiny)
    grad_beta = (grad_probs * probs_sensitivity).sum(dim=dim, keepdim=True) - (
        (grad_probs * weights).sum(dim=dim, keepdim=True) * probs_sensitivity.sum(dim=dim, keepdim=True) / weights_sum
    )
    return grad_scores, grad_beta.sum_to_size(alpha.shape).to(alpha.dtype)


def _probs_for_backward(probs: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    """The probabilities a backward works from: those saved in the compute dtype; for second-order gradients (a
    backward that autograd records) the output itself, which autograd connects to the inputs, unlike a float32 copy of
    half-precision probabilities."""
    return output.to(probs.dtype) if torch.is_grad_enabled() else probs


class EntmaxFunction(torch.autograd.Function):
    """α-entmax with a (broadcastable) tensor α; gradients w.r.t. scores and α in closed form, themselves
    differentiable (second-order gradients)."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, alpha: torch.Tensor, dim: int) -> torch.Tensor:
        shifted, empty_rows = _shift_and_mask(scores, dim, _FLOOR)
        beta = alpha.to(shifted.dtype) - 1
        probs = _entmax_newton(shifted, beta, empty_rows, dim)
        output = probs.to(scores.dtype)
        ctx.dim = dim
        ctx.save_for_backward(probs, output, alpha)
        return output

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        probs, output, alpha = ctx.saved_tensors
        probs = _probs_for_backward(probs, output)
        grad_scores, grad_alpha = entmax_backward(
            probs, alpha, grad_output.to(probs.dtype), ctx.dim, needs_alpha=ctx.needs_input_grad[1]
        )
        return grad_scores.to(grad_output.dtype), grad_alpha, None


class SparsemaxFunction(torch.autograd.Function):
    """Sparsemax (α = 2) by sorting: exact Euclidean projection onto the simplex."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, dim: int) -> torch.Tensor:
        # Entries more than 1 below the maximum are never in the support.
        shifted, empty_rows = _shift_and_mask(scores, dim, floor=-2.0)
        sorted_scores = shifted.sort(dim=dim, descending=True).values
        cumulative = sorted_scores.cumsum(dim=dim)
        ranks = _ranks_along(shifted, dim)
        # Every row but a row of NaN has the largest entry in its support; that row takes any size (its τ is NaN).
        support_size = (1 + ranks * sorted_scores > cumulative).sum(dim=dim, keepdim=True).clamp_min(1)
        threshold = (cumulative.gather(dim, support_size - 1) - 1) / support_size
        probs = (shifted - threshold).clamp_min(0).masked_fill(empty_rows, 0.0)
        output = probs.to(scores.dtype)
        ctx.dim = dim
        ctx.save_for_backward(probs, output)
        return output

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        probs = _probs_for_backward(*ctx.saved_tensors)
        weights = torch.where(probs > 0, 1.0, probs)  # 1 on the support; p (0, or NaN in a row of NaN) outside
        grad_scores = _scores_backward(grad_output.to(probs.dtype), weights, ctx.dim)
        return grad_scores.to(grad_output.dtype), None


class Entmax15Function(torch.autograd.Function):
    """1.5-entmax by sorting: exact, ``p = [z/2 − τ]_+²``."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, dim: int) -> torch.Tensor:
        # z/2 − τ ≤ 0 for z ≤ −2 because τ ≥ −1: lower entries are never in the support.
        shifted, empty_rows = _shift_and_mask(scores, dim, floor=-3.0)
        halves = shifted / 2
        sorted_halves = halves.sort(dim=dim, descending=True).values
        ranks = _ranks_along(shifted, dim)
        # For a support of the k largest entries, τ solves Σ_{j≤k} (x_j − τ)² = 1.
        mean = sorted_halves.cumsum(dim=dim) / ranks
        mean_of_squares = (sorted_halves * sorted_halves).cumsum(dim=dim) / ranks
        squared_deviation = ranks * (mean_of_squares - mean * mean)
        candidates = mean - torch.sqrt(((1 - squared_deviation) / ranks).clamp_min(0))
        # Every row but a row of NaN has the largest entry in its support; that row takes any size (its τ is NaN).
        support_size = (candidates <= sorted_halves).sum(dim=dim, keepdim=True).clamp_min(1)
        threshold = candidates.gather(dim, support_size - 1)
        probs = (halves - threshold).clamp_min(0).square().masked_fill(empty_rows, 0.0)
        output = probs.to(scores.dtype)
        ctx.dim = dim
        ctx.save_for_backward(probs, output)
        return output

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        probs = _probs_for_backward(*ctx.saved_tensors)
        # g = √p on the support; p (0, or NaN in a row of NaN) outside, where √'s derivative would be infinite.
        support = probs > 0
        weights = torch.where(support, torch.sqrt(torch.where(support, probs, 1.0)), probs)
        grad_scores = _scores_backward(grad_output.to(probs.dtype), weights, ctx.dim)
        return grad_scores.to(grad_output.dtype), None


def _ranks_along(like: torch.Tensor, dim: int) -> torch.Tensor:
    """1, 2, …, n laid along ``dim`` so that it broadcasts against ``like``."""
    shape = [1] * like.dim()
    shape[dim] = like.shape[dim]
    return torch.arange(1, like.shape[dim] + 1, dtype=like.dtype, device=like.device).view(shape)


class SoftmaxFunction(torch.autograd.Function):
    """Softmax (α = 1) in float32 with the rules of entmax for masks, +inf and NaN (all-masked rows give zeros, a row
    with a NaN and its gradients are all NaN, masked entries included, as every other mapping's)."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, dim: int) -> torch.Tensor:
        shifted, empty_rows = _shift_and_mask(scores, dim, _FLOOR)
        probs = torch.softmax(shifted, dim=dim).masked_fill(empty_rows, 0.0)
        output = probs.to(scores.dtype)
        ctx.dim = dim
        ctx.save_for_backward(probs, output)
        return output

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        probs = _probs_for_backward(*ctx.saved_tensors)
        grad_scores = _scores_backward(grad_output.to(probs.dtype), probs, ctx.dim)  # g = p
        return grad_scores.to(grad_output.dtype), None


def _check_scores(scores: torch.Tensor) -> None:
    if not isinstance(scores, torch.Tensor) or not scores.is_floating_point():
        kind = scores.dtype if isinstance(scores, torch.Tensor) else type(scores).__name__
        raise TypeError(f"`scores` must be a floating-point tensor, got {kind}")


def _check_alpha(alpha: torch.Tensor | float, scores: torch.Tensor, dim: int) -> None:
    if isinstance(alpha, torch.Tensor):
        # Broadcasting lines α up with the scores from the right: the dimension of α that falls on `dim` must be 1.
        from_right = dim - scores.dim()
        if alpha.dim() > scores.dim() or (alpha.dim() >= -from_right and alpha.shape[from_right] != 1):
            raise ValueError(
                f"`alpha` of shape {tuple(alpha.shape)} must broadcast to the scores {tuple(scores.shape)} "
                f"with size 1 along `dim`={dim} (e.g. (1, heads, 1, 1) for one α per head)"
            )
        try:
            torch.broadcast_shapes(alpha.shape, scores.shape)
        except RuntimeError:
            raise ValueError(
                f"`alpha` of shape {tuple(alpha.shape)} does not broadcast to the scores {tuple(scores.shape)}"
            ) from None
        if torch.compiler.is_compiling():
            return
        low, high = float(alpha.detach().min()), float(alpha.detach().max())
    elif isinstance(alpha, (int, float)) and not isinstance(alpha, bool):
        low = high = float(alpha)
    else:
        raise TypeError(f"`alpha` must be a number in [1, 2] or a tensor, got {type(alpha).__name__} {alpha!r}")
    if not 1.0 <= low <= high <= 2.0:
        raise ValueError(f"`alpha` must be in [1, 2], got values in [{low}, {high}]")


def entmax(
    scores: torch.Tensor, alpha: torch.Tensor | float, dim: int = -1, *, check_alpha: bool = True
) -> torch.Tensor:
    """α-entmax of ``scores`` along ``dim`` for α ∈ [1, 2].

    Solves ``argmax_{p ∈ simplex} pᵀz + H_α(p)`` (Tsallis entropy ``H_α``): α = 1 is softmax,
    α = 1.5 the paper's 1.5-entmax, α = 2 sparsemax; for α > 1 low scores get exact zeros.
    Gradients flow to the scores and a tensor α, and are themselves differentiable
    (``create_graph=True`` gives exact second-order gradients).

    Args:
        scores: Tensor of any shape, e.g. attention scores ``(batch, heads, queries, keys)``.
            Entries equal to −inf or to ``torch.finfo(scores.dtype).min`` are masked and get
            probability 0; a row with every entry masked gives all zeros. +inf entries share their
            row's mass equally (the limit of equal large scores), as do the maxima of a row whose
            other entries are far below them; a NaN makes its whole row NaN, gradients included, as
            in softmax. bfloat16/float16 scores are computed in float32 and returned in their own dtype.
        alpha: A float, or a tensor that broadcasts to ``scores`` and has size 1 along ``dim``
            (e.g. ``(1, heads, 1, 1)`` for one α per head). Gradients flow to a tensor α.
        dim: The dimension that sums to one.
        check_alpha: Check that α is in [1, 2]. For a tensor α that reads its values (a device synchronisation on
            GPU), so callers whose α is in range by construction, like the model's attention, turn it off.

    Returns:
        The probabilities, same shape and dtype as ``scores``.
    """
    _check_scores(scores)
    dim = _normalize_dim(dim, scores.dim())
    if check_alpha:
        _check_alpha(alpha, scores, dim)
    if scores.numel() == 0:
        return torch.softmax(scores, dim)  # rows of no entries: an empty result, as softmax gives
    if not isinstance(alpha, torch.Tensor) and alpha == 1.0:
        return SoftmaxFunction.apply(scores, dim)
    if native_entmax is not None and (probs := native_entmax(scores, alpha, dim)) is not None:
        return probs
    if not isinstance(alpha, torch.Tensor):
        alpha = torch.tensor(alpha, dtype=_compute_dtype(scores.dtype), device=scores.device)
    return EntmaxFunction.apply(scores, alpha, dim)


def sparsemax(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Sparsemax (α = 2 entmax): the Euclidean projection of ``scores`` onto the simplex.

    Exact (sort-based; the native kernel's Newton iteration is exact for it too). Masking, dtypes and shapes
    as in :func:`entmax`.
    """
    _check_scores(scores)
    dim = _normalize_dim(dim, scores.dim())
    if scores.numel() == 0:
        return torch.softmax(scores, dim)
    if native_entmax is not None and (probs := native_entmax(scores, 2.0, dim)) is not None:
        return probs
    return SparsemaxFunction.apply(scores, dim)


def entmax15(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """1.5-entmax of ``scores`` along ``dim``, exact (sort-based). As :func:`entmax` with α = 1.5."""
    _check_scores(scores)
    dim = _normalize_dim(dim, scores.dim())
    if scores.numel() == 0:
        return torch.softmax(scores, dim)
    if native_entmax is not None and (probs := native_entmax(scores, 1.5, dim)) is not None:
        return probs
    return Entmax15Function.apply(scores, dim)


# With hf_entmax installed, its kernels take the mappings and the model's attention where they apply (the native CPU
# kernel, the Triton kernel; `hf_entmax.kernels.dispatch` picks). This file alone (a model folder loaded without
# hf_entmax) runs the PyTorch implementation above, and so does the model's attention, which imports
# `native_entmax_attention` from here. Imported last: the kernels import this file's conventions and backward.
try:
    from hf_entmax.kernels.dispatch import native_entmax, native_entmax_attention
except ModuleNotFoundError as error:
    # Only a missing hf_entmax (or one without these kernels) falls back; anything missing inside the kernels is a
    # bug that must not quietly turn every call into the slow path.
    if error.name not in ("hf_entmax", "hf_entmax.kernels", "hf_entmax.kernels.dispatch"):
        raise
    native_entmax = native_entmax_attention = None


__all__ = ["entmax", "entmax15", "is_masked", "mask_floor", "sparsemax"]
