"""Tests for the native CPU kernel: exact gradients, agreement with the float64 reference, fallback."""

import math
from types import SimpleNamespace

import pytest
import torch
from helpers import random_predictor, tiny_model
from torch.autograd import gradcheck, gradgradcheck

from hf_entmax.kernels import cpu, dispatch
from hf_entmax.kernels.dispatch import attention_route, describe
from hf_entmax.modeling import entmax as entmax_module
from hf_entmax.modeling import modeling_adaptive_entmax_marian as modeling
from hf_entmax.modeling.entmax import NEWTON_TOLERANCE_EPS, EntmaxFunction, entmax
from hf_entmax.modeling.sparsefinder_attention import NearestKeys, PredictedSparsity, nearest_graph


pytestmark = pytest.mark.skipif(not cpu.kernel_available(), reason="the native CPU kernel could not be built here")

# β = α − 1 for softmax, near-softmax, general, 1.5-entmax (exact path), general, sparsemax (exact path).
BETAS = [0.0, 0.01, 0.25, 0.5, 0.75, 1.0]


def attention_scores(seed: int, dtype: torch.dtype, shape=(2, 4, 5, 33)) -> torch.Tensor:
    """Scores with realistic spread (std 1–3 per head), a padding mask, and one fully masked row."""
    generator = torch.Generator().manual_seed(seed)
    spread = torch.tensor([1.0, 1.5, 2.0, 3.0]).view(1, 4, 1, 1)
    scores = torch.randn(*shape, generator=generator, dtype=torch.float64) * spread
    mask = torch.zeros(shape, dtype=torch.bool)
    mask[1, :, :, shape[-1] // 2 :] = True  # a padded sequence
    mask[0, 2, -1] = True  # one fully masked row
    return scores.masked_fill(mask, float("-inf")).to(dtype)


# ---- Rounding bounds ------------------------------------------------------------------------------------------------
#
# The float32 kernel is compared with the float64 PyTorch reference on the same inputs, within bounds on the float32
# rounding of its computation (first order in the unit roundoff u = 2^-24), evaluated entry by entry from the
# reference's values. They hold whatever the summation order and vector width (AVX2, AVX-512, a baseline build), and
# they are tight: the worst error on these inputs is under half its bound (AVX-512 and baseline builds alike), and
# a stopping tolerance 32 times too loose, a shift that loses its low part, a slope g = p^(1 − β) with β off by a
# relative 1e-5 or a series four terms short each fail them.
#
# Building blocks: a sum of n terms, in any order, errs by at most n u Σ|term|; a product of matrices with inner size
# k by k u |A| |B| entry by entry, plus |ΔA| |B| + |A| |ΔB| for errors its inputs carry. The kernel's exp and log are
# accurate to about an ulp, and each quantity below is a few operations on top of them.
#
# Forward, a row of n entries, with t = z − max z − c, base = 1 + β t = p^β and g = p^(1 − β) (t = log p for softmax):
# - p at the final normaliser c is exp((1/β − 1) log base) · base, to a relative u (4 + 4 |log p|); t, formed as
#   z − shift in two steps, carries 2 u |t|, which moves log p by 2 u |t| / base;
# - the iteration stops once the computed Σp is within 2ε = 4u of 1, and that sum errs by n u plus the entries' own
#   errors (Σ p · their relative error; near-softmax rows' Taylor finish adds ε = 2u to it, and up to as much to any
#   one entry). The normaliser is then off by δc = (Σp − 1)/Σg, which moves p_i/Σp by δc (g_i − p_i Σg): at most
#   |Σp − 1| max(p_i, g_i/Σg);
# - dividing by Σp adds (n + 1) u relative.
# Scores that carry errors Δz of their own (attention's products) add |J| Δz, with the Jacobian J = diag(g) − g gᵀ/Σg.
#
# Backward, at given probabilities: the gradients are compared with the reference's backward at the kernel's own
# probabilities (whose errors the forward's bound covers). g = exp((1 − β) log p) has a relative u (3 + 3 (1 − β)
# |log p|); the mean M = Σ g dp / Σg adds the sums' n u; grad_z = g (dp − M) two roundings. The gradient to β is
# Σ (dp − M) s with s = p ∂log p/∂β, each s to u (20 + 12 |log p|) (a dozen operations, and the closed form's
# cancellation, at most 1/(1 − 2/e) ≈ 4). Errors Δdp in dp (attention's products) add |∂grad/∂dp| Δdp.
#
# The kernel flushes denormal numbers to zero, and its exp floors at e^−87: every bound has an absolute floor of 1e4
# times float32's smallest normal number, what a flushed value becomes at most after the factors a gradient multiplies
# p by (log² p ≤ 87², |dp|).
FLOAT32_ROUNDOFF = 2.0**-24
FLOAT64_ROUNDOFF = 2.0**-53
# Where the PyTorch implementation stops its iteration, in units of the roundoff u = ε/2 (the kernel's 2ε = 4u is
# `forward_bound`'s default; tests/test_kernel_build.py checks csrc/constants.h still says 2ε).
REFERENCE_STOPPING_TOLERANCE = 2.0 * NEWTON_TOLERANCE_EPS
FLUSHED = 1e4 * torch.finfo(torch.float32).tiny


def row_quantities(probs: torch.Tensor, alpha: torch.Tensor | float) -> SimpleNamespace:
    """β, log p, base = p^β, t, g = p^(1 − β) and Σg of float64 probabilities (..., n), α broadcasting to (..., 1)."""
    beta = (torch.as_tensor(alpha, dtype=torch.float64) - 1).expand((*probs.shape[:-1], 1))
    support = probs > 0
    log_probs = torch.where(support, probs, 1.0).log()
    base = torch.exp(beta * log_probs)
    shifted = torch.where(beta == 0, log_probs, (base - 1) / torch.where(beta == 0, 1.0, beta))
    slope = torch.where(support, torch.exp((1 - beta) * log_probs), 0.0)
    slope_sum = slope.sum(-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    return SimpleNamespace(
        beta=beta, support=support, log_probs=log_probs, base=base, shifted=shifted, slope=slope, slope_sum=slope_sum
    )


def forward_bound(
    probs: torch.Tensor,
    alpha: torch.Tensor | float,
    score_error: torch.Tensor | None = None,
    roundoff: float = FLOAT32_ROUNDOFF,
    stopping_tolerance: float = 4.0,
) -> torch.Tensor:
    """Bound on the kernel's error in each probability, from the exact (float64) ``probs``; see above.
    ``stopping_tolerance``: how far from 1 the iteration lets the computed Σp end, in units of ``roundoff``."""
    row = row_quantities(probs, alpha)
    size = probs.shape[-1]
    relative = torch.where(
        row.support, roundoff * (4 + 4 * row.log_probs.abs() + 2 * row.shifted.abs() / row.base), 0.0
    )
    taylor_finish = torch.where((row.beta > 0) & (row.beta < 0.5), 2 * roundoff, 0.0)
    mass_error = (probs * relative).sum(-1, keepdim=True) + taylor_finish
    normaliser_error = ((size + stopping_tolerance) * roundoff + mass_error) * torch.maximum(
        probs, row.slope / row.slope_sum
    )
    bound = probs * (relative + mass_error + (size + 1) * roundoff) + normaliser_error + taylor_finish + FLUSHED
    if score_error is not None:
        bound = bound + row.slope * (score_error + (row.slope * score_error).sum(-1, keepdim=True) / row.slope_sum)
    return bound


def backward_bound(
    probs: torch.Tensor,
    alpha: torch.Tensor | float,
    grad_probs: torch.Tensor,
    grad_error: torch.Tensor | None = None,
    roundoff: float = FLOAT32_ROUNDOFF,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bounds on the kernel's errors in the gradients to the scores (per entry) and to β (per row, (..., 1)) at the
    float64 ``probs`` and ``grad_probs``; see above."""
    row = row_quantities(probs, alpha)
    size = probs.shape[-1]
    slope_error = torch.where(row.support, roundoff * (3 + 3 * (1 - row.beta) * row.log_probs.abs()), 0.0)
    term_error = slope_error + size * roundoff  # relative, of each term of the sums
    weighted = row.slope * grad_probs
    mean = weighted.sum(-1, keepdim=True) / row.slope_sum
    mean_error = (weighted.abs() * term_error).sum(-1, keepdim=True) / row.slope_sum + mean.abs() * (
        (row.slope * term_error).sum(-1, keepdim=True) / row.slope_sum + roundoff
    )
    if grad_error is not None:
        mean_error = mean_error + (row.slope * grad_error).sum(-1, keepdim=True) / row.slope_sum
    scores = row.slope * ((grad_probs - mean).abs() * (slope_error + 2 * roundoff) + mean_error) + FLUSHED
    if grad_error is not None:
        scores = scores + row.slope * grad_error
    sensitivity = torch.where(row.support, probs * entmax_module._alpha_sensitivity(row.log_probs, row.beta), 0.0)
    sensitivity_error = torch.where(row.support, roundoff * (20 + 12 * row.log_probs.abs()), 0.0) + size * roundoff
    terms = sensitivity.abs() * (grad_probs.abs() + mean.abs())  # the size of each term (dp − M) s
    beta = (
        (terms * (sensitivity_error + 3 * roundoff)).sum(-1, keepdim=True)
        + sensitivity.sum(-1, keepdim=True).abs() * mean_error
        + FLUSHED
    )
    if grad_error is not None:
        response = sensitivity - row.slope * sensitivity.sum(-1, keepdim=True) / row.slope_sum  # ∂grad_β/∂dp
        beta = beta + (response.abs() * grad_error).sum(-1, keepdim=True)
    return scores, beta


def matmul_bound(
    a: torch.Tensor,
    b: torch.Tensor,
    a_error: torch.Tensor | None = None,
    b_error: torch.Tensor | None = None,
    roundoff: float = FLOAT32_ROUNDOFF,
) -> torch.Tensor:
    """Bound on the error of a float32 ``a @ b`` of float64 ``a``, ``b`` that carry errors ``a_error``, ``b_error``."""
    bound = a.shape[-1] * roundoff * (a.abs() @ b.abs())
    if a_error is not None:
        bound = bound + a_error @ b.abs()
    if b_error is not None:
        bound = bound + a.abs() @ b_error
    return bound


def summed_bound(values: torch.Tensor, errors: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Bound on a float32 sum of ``values`` (each within ``errors``) down to ``shape``, as α's gradient is summed."""
    terms = values.numel() // torch.Size(shape).numel()
    return errors.sum_to_size(shape) + terms * FLOAT32_ROUNDOFF * values.abs().sum_to_size(shape)


def reference_backward(
    probs: torch.Tensor, alpha: torch.Tensor | float, grad_probs: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The float64 reference's backward (`entmax_backward`, as `EntmaxFunction` runs it) at given probabilities along
    the last dimension: the gradients to the scores and to α per row, (..., 1)."""
    row_alpha = torch.as_tensor(alpha, dtype=torch.float64).expand((*probs.shape[:-1], 1)).contiguous()
    return entmax_module.entmax_backward(probs, row_alpha, grad_probs, probs.dim() - 1)


def assert_within(actual: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor, what: str) -> None:
    error = (actual.double() - expected).abs()
    ratio = error / bound
    assert (error <= bound).all(), (
        f"{what}: an error of {error.flatten()[ratio.argmax()]:.3g} at {ratio.argmax()} (flat index) is "
        f"{ratio.max():.2f} times its rounding bound"
    )


@pytest.mark.parametrize("beta", BETAS)
def test_native_function_gradcheck_with_masks(beta):
    scores = attention_scores(seed=int(beta * 100), dtype=torch.float64, shape=(2, 4, 3, 7))
    alpha = torch.full((1, 4, 1, 1), 1 + beta, dtype=torch.float64)  # one α per head, broadcast by the kernel
    # gradcheck's central step would leave [1, 2] at the ends; see the one-sided test below.
    alpha.requires_grad_(beta not in (0.0, 1.0))
    assert gradcheck(cpu.NativeEntmaxFunction.apply, (scores.requires_grad_(), alpha))


@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_alpha_gradient_at_the_ends_matches_the_reference(beta):
    """At α = 1 and α = 2 the α-gradient is the one-sided limit; the PyTorch reference's is checked by gradcheck."""
    scores = attention_scores(seed=7, dtype=torch.float64, shape=(2, 4, 3, 7))
    grad_probs = torch.randn(scores.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    alpha = torch.full((*scores.shape[:-1], 1), 1.0 + beta, dtype=torch.float64)  # one α per row
    probs = EntmaxFunction.apply(scores, alpha, 3)
    _, grad_alpha = torch.ops.hf_entmax.entmax_backward(probs, grad_probs, alpha, True)
    _, expected = reference_backward(probs, alpha, grad_probs)
    # Two float64 computations, each within the bound, so within twice it of each other; and the reference's series
    # for ∂log p/∂β (10 terms where |β (z − c)| < 0.1) truncates at a relative 0.1^10.
    sensitivity = probs * entmax_module._alpha_sensitivity(torch.where(probs > 0, probs, 1.0).log(), alpha - 1)
    truncation = 1e-10 * (sensitivity.abs() * (grad_probs.abs() + 3 * grad_probs.abs().amax())).sum(-1, keepdim=True)
    bound = 2 * backward_bound(probs, alpha, grad_probs, roundoff=FLOAT64_ROUNDOFF)[1] + truncation
    assert_within(grad_alpha, expected, bound, "gradient to α")


def test_native_function_gradcheck_distinct_per_row_betas():
    rows = torch.randn(6, 9, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) * 2
    rows = rows.requires_grad_()
    alpha = torch.tensor([[1.05], [1.2], [1.5], [1.6], [1.9], [1.99]], dtype=torch.float64, requires_grad=True)
    assert gradcheck(cpu.NativeEntmaxFunction.apply, (rows, alpha))


def check_kernel_against_reference(scores: torch.Tensor, alpha: torch.Tensor, grad_probs: torch.Tensor) -> None:
    """The float32 kernel's probabilities, and its gradients to the scores and α at them, within their rounding
    bounds of the float64 reference's. ``scores`` (..., n) and ``grad_probs`` are float32, ``alpha`` broadcasts to
    the rows (..., 1): float32, so that both see the same α."""
    probs = cpu.NativeEntmaxFunction.apply(scores, alpha)
    reference = EntmaxFunction.apply(scores.double(), alpha.double(), scores.dim() - 1)
    assert_within(probs, reference, forward_bound(reference, alpha), "probabilities")
    row_alpha = alpha.expand((*scores.shape[:-1], 1)).contiguous()
    grad_scores, grad_alpha = torch.ops.hf_entmax.entmax_backward(probs, grad_probs, row_alpha, True)
    expected_scores, expected_alpha = reference_backward(probs.double(), alpha, grad_probs.double())
    bound_scores, bound_alpha = backward_bound(probs.double(), alpha, grad_probs.double())
    assert_within(grad_scores, expected_scores, bound_scores, "gradient to the scores")
    assert_within(grad_alpha, expected_alpha, bound_alpha, "gradient to α")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_float32_kernel_matches_float64_reference(seed):
    """The fast path (`entmax` of float32 CPU scores, one α per head): probabilities and gradients to the scores and α
    within their rounding bounds of the float64 reference."""
    scores = attention_scores(seed, torch.float32, shape=(2, 4, 16, 64))
    alpha = torch.tensor([1.1, 1.37, 1.5, 1.9]).view(1, 4, 1, 1)
    grad_probs = torch.randn(scores.shape, generator=torch.Generator().manual_seed(seed + 10))
    leaves = [scores.clone().requires_grad_(), alpha.clone().requires_grad_()]
    probs = entmax(*leaves)
    probs.backward(grad_probs)
    assert cpu.kernel_available() and probs.grad_fn.name() == "NativeEntmaxFunctionBackward"

    reference = EntmaxFunction.apply(scores.double(), alpha.double(), 3)
    assert_within(probs, reference, forward_bound(reference, alpha), "probabilities")
    expected_scores, expected_alpha = reference_backward(probs.detach().double(), alpha, grad_probs.double())
    bound_scores, bound_alpha = backward_bound(probs.detach().double(), alpha, grad_probs.double())
    assert_within(leaves[0].grad, expected_scores, bound_scores, "gradient to the scores")
    summed = summed_bound(expected_alpha, bound_alpha, alpha.shape)  # the kernel sums the rows' gradients per head
    assert_within(leaves[1].grad, expected_alpha.sum_to_size(alpha.shape), summed, "gradient to α")
    assert probs[0, 2, -1].eq(0).all() and leaves[0].grad[0, 2, -1].eq(0).all()  # the fully masked row


@pytest.mark.parametrize("size", [1, 7, 8, 9, 63, 64, 65, 300])
def test_float32_kernel_on_rows_of_every_kind(size):
    """Rows that exercise every branch of the kernel's iteration: dense rows updated in place, sparse rows gathered
    and pruned (with a padded remainder), short rows in SIMD lanes, near-softmax to sparsemax, offsets, random and
    full masks."""
    generator = torch.Generator().manual_seed(size)
    betas = torch.tensor([0.001, 0.05, 0.1, 0.25, 0.37, 0.5, 0.63, 0.75, 0.9, 0.99, 1.0]).repeat_interleave(12)
    rows = betas.shape[0]
    scale = torch.tensor([0.3, 1.0, 3.0, 10.0]).repeat(rows // 4)[:, None]
    scores = torch.randn(rows, size, generator=generator, dtype=torch.float64) * scale
    scores = scores + 5 * torch.randn(rows, 1, generator=generator, dtype=torch.float64)
    scores = scores.masked_fill(torch.rand(rows, size, generator=generator) < 0.2, float("-inf"))
    scores[::17] = float("-inf")  # fully masked rows
    grad_probs = torch.randn(rows, size, generator=generator)
    check_kernel_against_reference(scores.float(), (betas + 1)[:, None], grad_probs)


@pytest.mark.parametrize("size", [256, 2048])
def test_float32_kernel_on_long_near_softmax_rows(size):
    """α < 1.5 on long rows: one rough Halley pass, then exact passes and the Taylor finish, which may start above the
    root; low spread (hundreds of entries in the support), ties with the maximum, and outliers."""
    generator = torch.Generator().manual_seed(size)
    betas = torch.tensor([0.02, 0.1, 0.2, 0.25, 0.3, 0.45]).repeat_interleave(16)
    rows = betas.shape[0]
    scale = torch.tensor([0.1, 0.3, 1.0, 3.0]).repeat(rows // 4)[:, None]
    scores = torch.randn(rows, size, generator=generator, dtype=torch.float64) * scale
    ties = torch.arange(rows) % 3 == 1
    scores[ties, : size // 2] = scores[ties].max(-1, keepdim=True).values - 1e-3 * torch.rand(size // 2)
    scores[torch.arange(rows) % 3 == 2, 0] += 8
    grad_probs = torch.randn(rows, size, generator=generator)
    check_kernel_against_reference(scores.float(), (betas + 1)[:, None], grad_probs)


@pytest.mark.parametrize("offset", [0.0, 100.0, 1000.0])
def test_float32_kernel_keeps_its_accuracy_for_large_scores(offset):
    """t = z − (max z + c) is formed from a two-float split of the shift, so that large scores cost no digits: a
    vectorised split over SIMD lanes that GCC folded away cost short rows an error of ε |z| on AVX-512 builds."""
    generator = torch.Generator().manual_seed(11)
    betas = torch.tensor([0.1, 0.37, 0.63, 0.75, 0.9]).repeat_interleave(8)
    for size in (7, 20, 100):  # short rows in SIMD lanes, rows gathered into them, rows iterated on alone
        scores = torch.randn(betas.shape[0], size, generator=generator) * torch.tensor([0.3, 1.0]).repeat(20)[:, None]
        grad_probs = torch.randn(scores.shape, generator=generator)
        check_kernel_against_reference(scores + offset, (betas + 1)[:, None], grad_probs)


def spaced_scores(offset: float, spacing: float, rows: int, size: int, seed: int) -> torch.Tensor:
    """float64 rows of ``offset`` plus a few multiples of ``spacing`` (exact in the dtype whose spacing it is there),
    with ties and near-ties at the maximum."""
    generator = torch.Generator().manual_seed(seed)
    steps = torch.randint(-5, 1, (rows, size), generator=generator).double()
    return offset + spacing * steps


@pytest.mark.parametrize("offset", [2.0**23, 1e7, 1.7e7, 3e7, 1e8])
def test_float32_kernel_on_scores_a_few_spacings_apart_at_large_magnitudes(offset):
    """Scores around 1e7–1e8, where float32's spacing (0.5 to 8) is close to 1/β: candidates at the edge of the
    support, ties, and rows whose support is the maxima alone. The thresholds that select candidates once rounded up
    past entries of the support (sparsemax of [1e7, 1e7 − 1, 1e7] was [0, 0, 0])."""
    spacing = 2.0 ** (math.floor(math.log2(offset)) - 23)
    betas = torch.tensor([0.01, 0.25, 0.37, 0.5, 0.63, 0.75, 0.9, 1.0]).repeat_interleave(8)
    for size in (3, 12, 64):  # rows in SIMD lanes, gathered into them, iterated on alone
        scores = spaced_scores(offset, spacing, betas.shape[0], size, seed=size).float()
        grad_probs = torch.randn(scores.shape, generator=torch.Generator().manual_seed(size))
        check_kernel_against_reference(scores, (betas + 1)[:, None], grad_probs)


@pytest.mark.parametrize("offset", [1e15, 4e15, 1e16])
def test_float64_kernel_on_scores_a_few_spacings_apart_at_large_magnitudes(offset):
    """As above in float64, where the shift row max + c, one double, once lost the normaliser's digits around 1e15
    (rows of NaN, or summing to 26). Two float64 computations, each within its bound (the reference stops within
    NEWTON_TOLERANCE_EPS ε of Σp = 1), so within their sum of each other."""
    spacing = 2.0 ** (math.floor(math.log2(offset)) - 52)
    alpha = (torch.tensor([0.01, 0.25, 0.37, 0.5, 0.63, 0.75, 0.9, 1.0], dtype=torch.float64) + 1).repeat_interleave(8)
    for size in (3, 12, 64):
        scores = spaced_scores(offset, spacing, alpha.shape[0], size, seed=size)
        probs = torch.ops.hf_entmax.entmax_forward(scores, alpha[:, None])
        reference = EntmaxFunction.apply(scores, alpha[:, None], 1)
        bound = forward_bound(reference, alpha[:, None], roundoff=FLOAT64_ROUNDOFF) + forward_bound(
            reference, alpha[:, None], roundoff=FLOAT64_ROUNDOFF, stopping_tolerance=REFERENCE_STOPPING_TOLERANCE
        )
        assert_within(probs, reference, bound, f"probabilities of rows of {size}")


def test_kernel_names_an_alpha_that_does_not_broadcast():
    with pytest.raises(
        RuntimeError, match=r"alpha of shape \[3\] must broadcast to the rows of the scores, \[2, 5, 1\]"
    ):
        torch.ops.hf_entmax.entmax_forward(torch.randn(2, 5, 7), torch.full((3,), 1.5))


@pytest.mark.parametrize("size", [50, 12])
def test_each_row_is_computed_alone(size):
    """A row's result does not depend on the rows computed with it: not on those before it in the same thread (scratch
    space is reused), nor on the short rows that share its SIMD lanes."""
    generator = torch.Generator().manual_seed(0)
    rows = torch.randn(64, size, generator=generator) * torch.linspace(0.3, 5, 64)[:, None]
    alpha = torch.linspace(1.05, 2.0, 64)[:, None]
    together = torch.ops.hf_entmax.entmax_forward(rows, alpha)
    order = torch.randperm(64, generator=generator)
    shuffled = torch.ops.hf_entmax.entmax_forward(rows[order], alpha[order])
    assert torch.equal(shuffled, together[order])
    for index in (0, 31, 63):
        alone = torch.ops.hf_entmax.entmax_forward(rows[index : index + 1], alpha[index : index + 1])
        assert torch.equal(alone[0], together[index])


@pytest.mark.parametrize("rows", [1, 8, 16, 19])
def test_fully_masked_short_rows_give_zeros(rows):
    """Short rows go through the SIMD lanes eight at a time; a batch of lanes that are all fully masked runs no pass
    at all, and must still write zeros (once it wrote whatever its scratch held, times zero: NaN for inf garbage)."""
    scores = torch.full((rows, 12), float("-inf"))
    scores[rows // 2 :: 9, :3] = torch.tensor([0.5, -1.0, 2.0])  # a few live rows among them
    for alpha in (torch.tensor(1.3), torch.linspace(1.05, 1.95, rows)[:, None]):
        probs = torch.ops.hf_entmax.entmax_forward(scores, alpha)
        live = scores[:, 0].isfinite()
        assert probs[~live].eq(0).all() and not probs.isnan().any()
        torch.testing.assert_close(probs[live].sum(-1), torch.ones(int(live.sum())))
        mask = torch.zeros(rows, 12).masked_fill(scores.isinf(), torch.finfo(torch.float32).min)
        unmasked = scores.masked_fill(scores.isinf(), 0.0)
        assert torch.equal(torch.ops.hf_entmax.entmax_forward_(unmasked, alpha, mask), probs)


def padding_and_causal_mask(dtype: torch.dtype, batch: int, queries: int, keys: int) -> torch.Tensor:
    """An additive (batch, 1, queries, keys) mask: causal, the second sequence padded, and one fully masked row."""
    masked = (
        torch.ones(queries, keys, dtype=torch.bool).triu(keys - queries + 1).expand(batch, 1, queries, keys).clone()
    )
    masked[1, ..., keys // 2 :] = True
    masked[0, 0, 0] = True
    return torch.zeros(masked.shape, dtype=dtype).masked_fill(masked, torch.finfo(dtype).min)


@pytest.mark.parametrize("size", [12, 50])
def test_masked_and_in_place_kernels_agree_with_the_plain_ones_bit_for_bit(size):
    """The attention path's ops: the mask added inside the kernel (broadcast over heads and queries), the probabilities
    written over the scores, and the gradient to the scores written over the gradient to the probabilities."""
    generator = torch.Generator().manual_seed(size)
    scores = torch.randn(2, 4, 6, size, generator=generator) * torch.tensor([0.5, 1.0, 2.0, 4.0]).view(1, 4, 1, 1)
    alpha = torch.tensor([1.0, 1.2, 1.5, 1.8]).view(1, 4, 1, 1)
    for mask in (
        padding_and_causal_mask(torch.float32, 2, 6, size),
        padding_and_causal_mask(torch.float32, 2, 1, size),
    ):
        expected = torch.ops.hf_entmax.entmax_forward(scores + mask, alpha)
        assert torch.equal(torch.ops.hf_entmax.entmax_forward(scores, alpha, mask), expected)
        overwritten = scores.clone()
        assert torch.ops.hf_entmax.entmax_forward_(overwritten, alpha, mask) is overwritten
        assert torch.equal(overwritten, expected)

    probs = torch.ops.hf_entmax.entmax_forward(scores + mask, alpha)
    grad = torch.randn(probs.shape, generator=generator)
    expected_scores, expected_alpha = torch.ops.hf_entmax.entmax_backward(probs, grad, alpha, True)
    overwritten = grad.clone()
    grad_scores, grad_alpha = torch.ops.hf_entmax.entmax_backward_(probs, overwritten, alpha, True)
    assert grad_scores.data_ptr() == overwritten.data_ptr()
    assert torch.equal(overwritten, expected_scores) and torch.equal(grad_alpha, expected_alpha)


def test_kernel_names_a_mask_that_does_not_fit_the_scores():
    scores, alpha = torch.randn(2, 4, 3, 7), torch.tensor(1.5)
    with pytest.raises(
        RuntimeError, match=r"mask of shape \[3, 1, 1, 7\] must broadcast to the scores, \[2, 4, 3, 7\]"
    ):
        torch.ops.hf_entmax.entmax_forward(scores, alpha, torch.zeros(3, 1, 1, 7))
    with pytest.raises(RuntimeError, match="mask must be a CPU tensor of the scores' dtype, Float, got Double"):
        torch.ops.hf_entmax.entmax_forward(scores, alpha, torch.zeros(2, 1, 1, 7, dtype=torch.float64))


@pytest.mark.parametrize(("beta", "dropout"), [(0.0, 0.0), (0.3, 0.0), (0.5, 0.0), (0.8, 0.0), (1.0, 0.0), (0.3, 0.4)])
def test_fused_attention_gradcheck(beta, dropout):
    """Gradients of both outputs (the attention output and the returned weights) to the query, key, value and
    per-head α, through a causal and padding mask with a fully masked row, with more keys than queries, and through
    dropout (a generator seeded anew for each evaluation draws the same mask every time)."""
    generator = torch.Generator().manual_seed(int(beta * 10))
    query, key, value = (
        torch.randn(2, 3, length, 4, generator=generator, dtype=torch.float64).requires_grad_() for length in (3, 5, 5)
    )
    alpha = (1 + beta + torch.tensor([0.0, 0.04, -0.03]).clamp(min=-beta, max=1 - beta)).double().view(1, 3, 1, 1)
    # gradcheck's central step would leave [1, 2] at the ends (see test_alpha_gradient_at_the_ends_matches...).
    alpha.requires_grad_(beta not in (0.0, 1.0))
    mask = padding_and_causal_mask(torch.float64, 2, 3, 5)

    def attention(q, k, v, a):
        mask_generator = torch.Generator().manual_seed(5)
        return cpu.NativeEntmaxAttentionFunction.apply(q, k, v, a, mask, dropout, mask_generator)

    if dropout > 0:  # the mask drops some entries of the support and scales up the others
        weights = attention(query, key, value, alpha)[1]
        probs = cpu.entmax_attention(query, key, value, alpha, mask)[1]
        assert ((weights == 0) & (probs > 0)).any() and (weights > probs).any()
    assert gradcheck(attention, (query, key, value, alpha))


@pytest.mark.parametrize(("beta", "dropout"), [(0.0, 0.0), (0.3, 0.0), (0.5, 0.0), (1.0, 0.0), (0.3, 0.4)])
def test_fused_attention_second_order_gradients(beta, dropout):
    """Double backward (``create_graph=True``) of the fused attention as the model calls it: Marian's heads as strided
    views of (batch, length, heads, head_dim) projections, a causal and padding mask with a fully masked row, dropout;
    float64 gradgradcheck of both outputs w.r.t. the query, key, value and per-head α (its backward once ran the
    kernel's own, which autograd cannot differentiate: second-order gradients were silently zero)."""
    generator = torch.Generator().manual_seed(int(beta * 10) + 1)
    projections = [
        torch.randn(2, length, 3, 4, generator=generator, dtype=torch.float64).requires_grad_() for length in (3, 5, 5)
    ]
    alpha = (1 + beta + torch.tensor([0.0, 0.04, -0.03]).clamp(min=-beta, max=1 - beta)).double().view(1, 3, 1, 1)
    alpha.requires_grad_(beta not in (0.0, 1.0))  # as in test_fused_attention_gradcheck
    mask = padding_and_causal_mask(torch.float64, 2, 3, 5)

    def attention(q, k, v, a):
        heads = [projection.transpose(1, 2) for projection in (q, k, v)]  # (batch, heads, length, head_dim), strided
        return cpu.entmax_attention(*heads, a, mask, dropout, torch.Generator().manual_seed(5))

    assert attention(*projections, alpha)[0].grad_fn.name() == "NativeEntmaxAttentionFunctionBackward"
    assert gradgradcheck(attention, (*projections, alpha))


def test_fused_attention_on_nan_infinite_and_huge_scores():
    """Queries whose scores hold a NaN, +inf or a huge spread: the fused attention's weights are the mapping's (a row
    of NaN, the mass shared by the +inf keys, all of it on the maximum), the other queries' weights, outputs and
    gradients to the query are exactly those without the special queries, and the gradients of finite rows are
    finite."""
    generator = torch.Generator().manual_seed(12)
    key, value = (torch.randn(2, 4, 9, 8, generator=generator) for _ in range(2))
    key[..., 0] = torch.tensor([1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0])  # no key gives ∞ · 0
    query = torch.randn(2, 4, 6, 8, generator=generator)
    special = query.clone()
    special[:, :, 1] = 0.0
    special[:, :, 1, 0] = float("inf")  # +inf at the keys with k₀ = 1, −inf at the others
    special[:, :, 2, 3] = float("nan")
    special[:, :, 3] *= 1e30  # scores ~1e30 apart
    rows = torch.tensor([False, True, True, True, False, False])
    alpha = torch.tensor([1.0, 1.3, 1.5, 2.0]).view(1, 4, 1, 1)
    mask = padding_and_causal_mask(torch.float32, 2, 6, 9)
    grad_output = torch.randn(2, 4, 6, 8, generator=generator)

    results = []
    for queries in (special, query):
        leaves = [tensor.clone().requires_grad_() for tensor in (queries, key, value)]
        output, weights = cpu.entmax_attention(*leaves, alpha, mask)
        output.backward(grad_output)
        results.append((output.detach(), weights.detach(), leaves[0].grad))
    (output, weights, grad_query), (clean_output, clean_weights, clean_grad_query) = results

    expected = EntmaxFunction.apply(special @ key.transpose(-1, -2) + mask, alpha, 3)  # the PyTorch implementation
    assert weights[:, :, 2].isnan().all() and output[:, :, 2].isnan().all() and grad_query[:, :, 2].isnan().all()
    # p = 1/k at ties, to a few roundings (see test_infinite_and_huge_maxima_are_ties_with_everything_else_masked).
    torch.testing.assert_close(weights[:, :, [1, 3]], expected[:, :, [1, 3]], rtol=8 * torch.finfo().eps, atol=0)
    assert grad_query[:, :, [1, 3]].isfinite().all()
    for ours, clean in ((output, clean_output), (weights, clean_weights), (grad_query, clean_grad_query)):
        assert torch.equal(ours[:, :, ~rows], clean[:, :, ~rows])


@pytest.mark.parametrize(("queries", "dropout"), [(1, 0.0), (16, 0.0), (16, 0.3)])
def test_float32_fused_attention_matches_float64_composed_attention(queries, dropout):
    """Decoding (one query) and training shapes, with and without dropout (the same mask in both): the probabilities,
    weights and output within their float32 rounding bounds of the float64 composed attention, and every gradient
    within those of the composed attention's backward at the kernel's probabilities."""
    generator = torch.Generator().manual_seed(queries)
    query, key, value = (torch.randn(2, 4, length, 8, generator=generator) for length in (queries, 40, 40))
    query = query * 0.7  # (already scaled)
    alpha = torch.tensor([1.05, 1.3, 1.5, 1.9]).view(1, 4, 1, 1)
    grad_output, grad_weights = (torch.randn(2, 4, queries, size, generator=generator) for size in (8, 40))
    leaves = [tensor.clone().requires_grad_() for tensor in (query, key, value, alpha)]
    mask = padding_and_causal_mask(torch.float32, 2, queries, 40)
    output, weights = cpu.entmax_attention(*leaves, mask, dropout, torch.Generator().manual_seed(3))
    torch.autograd.backward((output, weights), (grad_output, grad_weights))
    with torch.no_grad():  # the same probabilities, before dropout
        probs = cpu.entmax_attention(query, key, value, alpha, mask)[1].double()
    keep = cpu.draw_keep_mask(probs.shape, dropout, torch.Generator().manual_seed(3))
    scale = 1 / (1 - dropout)  # in float32: one rounding, as the product with it

    q, k, v = (tensor.double() for tensor in (query, key, value))
    reference_probs = EntmaxFunction.apply(
        q @ k.transpose(-1, -2) + padding_and_causal_mask(torch.float64, 2, queries, 40), alpha.double(), 3
    )
    probs_bound = forward_bound(reference_probs, alpha, score_error=matmul_bound(q, k.transpose(-1, -2)))
    assert_within(probs, reference_probs, probs_bound, "probabilities")
    reference_weights = reference_probs * keep * scale
    weights_bound = keep * scale * (probs_bound + 2 * FLOAT32_ROUNDOFF * reference_probs)
    assert_within(weights, reference_weights, weights_bound, "weights")
    assert_within(output, reference_weights @ v, matmul_bound(reference_weights, v, weights_bound), "output")

    # The composed backward at the kernel's probabilities, step by step with each step's bound.
    kernel_weights = probs * keep * scale
    grad_output, grad_weights = grad_output.double(), grad_weights.double()
    grad_to_weights = grad_output @ v.transpose(-1, -2) + grad_weights
    error_to_weights = matmul_bound(grad_output, v.transpose(-1, -2)) + FLOAT32_ROUNDOFF * grad_to_weights.abs()
    grad_to_probs = grad_to_weights * keep * scale
    error_to_probs = keep * scale * (error_to_weights + 2 * FLOAT32_ROUNDOFF * grad_to_weights.abs())
    grad_scores, grad_alpha_rows = reference_backward(probs, alpha, grad_to_probs)
    error_scores, error_alpha_rows = backward_bound(probs, alpha, grad_to_probs, error_to_probs)
    expected = {
        "query": (grad_scores @ k, matmul_bound(grad_scores, k, error_scores)),
        "key": (
            grad_scores.transpose(-1, -2) @ q,
            matmul_bound(grad_scores.transpose(-1, -2), q, error_scores.transpose(-1, -2)),
        ),
        "value": (
            kernel_weights.transpose(-1, -2) @ grad_output,
            matmul_bound(
                kernel_weights.transpose(-1, -2), grad_output, 2 * FLOAT32_ROUNDOFF * kernel_weights.transpose(-1, -2)
            ),
        ),
        "alpha": (
            grad_alpha_rows.sum_to_size(alpha.shape),
            summed_bound(grad_alpha_rows, error_alpha_rows, alpha.shape),
        ),
    }
    for leaf, (name, (gradient, bound)) in zip(leaves, expected.items(), strict=True):
        assert_within(leaf.grad, gradient, bound, f"gradient to the {name}")
    assert weights[0, :, 0].eq(0).all() and output[0, :, 0].eq(0).all()  # the fully masked row: zeros, no NaN


def test_fused_attention_without_dropout_is_the_plain_kernel_ops():
    """At dropout 0 the fused attention is the kernel's probabilities times the values, forward and backward, bit for
    bit, and it draws no random numbers (runs that set a seed are reproduced as before)."""
    generator = torch.Generator().manual_seed(0)
    query, key, value = (torch.randn(2, 4, length, 8, generator=generator) for length in (6, 9, 9))
    alpha = torch.tensor([1.0, 1.2, 1.5, 1.8]).view(1, 4, 1, 1)
    mask = padding_and_causal_mask(torch.float32, 2, 6, 9)
    grad_output = torch.randn(2, 4, 6, 8, generator=generator)
    leaves = [tensor.clone().requires_grad_() for tensor in (query, key, value, alpha)]
    state = torch.get_rng_state()
    output, weights = cpu.entmax_attention(*leaves, mask, dropout=0.0)
    output.backward(grad_output)
    assert torch.equal(torch.get_rng_state(), state)

    probs = torch.ops.hf_entmax.entmax_forward(query @ key.transpose(-1, -2), alpha, mask)
    assert torch.equal(weights, probs) and torch.equal(output, probs @ value)
    grad_scores, grad_alpha = torch.ops.hf_entmax.entmax_backward(
        probs, grad_output @ value.transpose(-1, -2), alpha, True
    )
    for leaf, expected in zip(
        leaves,
        (grad_scores @ key, grad_scores.transpose(-1, -2) @ query, probs.transpose(-1, -2) @ grad_output, grad_alpha),
        strict=True,
    ):
        assert torch.equal(leaf.grad, expected)


def test_fused_attention_dropout_rate_scale_and_seed():
    """Dropout drops each weight with probability p (the kept fraction is within 6σ of 1 − p, σ² = p (1 − p) / n),
    multiplies the others by 1 / (1 − p) as `nn.functional.dropout` does, and draws from torch's default generator:
    a seed reproduces the mask, another seed changes it."""
    generator = torch.Generator().manual_seed(1)
    query, key, value = (torch.randn(4, 8, 64, 16, generator=generator) for _ in range(3))
    probs = cpu.entmax_attention(query, key, value, 1.0, None)[1]  # softmax: every entry is in the support
    for dropout in (0.1, 0.5):
        torch.manual_seed(0)
        output, weights = cpu.entmax_attention(query, key, value, 1.0, None, dropout)
        kept = weights != 0
        sigma = (dropout * (1 - dropout) / kept.numel()) ** 0.5
        assert abs(kept.double().mean().item() - (1 - dropout)) < 6 * sigma
        assert torch.equal(weights[kept], probs[kept] * (1 / (1 - dropout)))
        assert torch.equal(output, weights @ value)
        torch.manual_seed(0)
        assert torch.equal(cpu.entmax_attention(query, key, value, 1.0, None, dropout)[1], weights)
        torch.manual_seed(1)
        assert not torch.equal(cpu.entmax_attention(query, key, value, 1.0, None, dropout)[1], weights)
    leaves = [tensor.clone().requires_grad_() for tensor in (query, key, value)]
    output, weights = cpu.entmax_attention(*leaves, 1.3, None, dropout=1.0)  # nothing kept: zeros, no NaN
    output.sum().backward()
    assert output.eq(0).all() and weights.eq(0).all() and all(leaf.grad.eq(0).all() for leaf in leaves)
    for dropout in (-0.1, 1.5):
        with pytest.raises(ValueError, match=f"dropout probability has to be between 0 and 1, but got {dropout}"):
            cpu.entmax_attention(query, key, value, 1.3, None, dropout)


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_wanted_weights_with_gradients_are_in_the_outputs_graph_and_the_function_is_the_fused_one(dropout):
    """With the weights wanted where autograd records, the output is computed from them (a gradient of the output
    reaches them, as attribution needs), by the fused kernel's operations: the same output, weights and dropout mask
    from the same seed, bit for bit, and the same gradients to the inputs up to float32 rounding of the products."""
    generator = torch.Generator().manual_seed(3)
    query, key, value = (torch.randn(2, 4, length, 8, generator=generator) for length in (6, 9, 9))
    alpha = torch.tensor([1.0, 1.2, 1.5, 1.8]).view(1, 4, 1, 1)
    mask = padding_and_causal_mask(torch.float32, 2, 6, 9)
    grad_output = torch.randn(2, 4, 6, 8, generator=generator)
    results = {}
    for wanted in (False, True):
        leaves = [tensor.clone().requires_grad_() for tensor in (query, key, value, alpha)]
        torch.manual_seed(0)
        output, weights = dispatch.native_entmax_attention(*leaves, mask, dropout, weights_wanted=wanted)
        weights.retain_grad()
        output.backward(grad_output)
        results[wanted] = output, weights, [leaf.grad for leaf in leaves]
    (fused, fused_weights, fused_grads), (composed, composed_weights, composed_grads) = results[False], results[True]
    assert fused_weights.grad is None  # the fused kernel's weights are a second output, beside the output's path
    assert composed_weights.grad is not None and composed_weights.grad.abs().sum() > 0
    assert torch.equal(composed, fused) and torch.equal(composed_weights, fused_weights)
    for name, composed_grad, fused_grad in zip(
        ("query", "key", "value", "α"), composed_grads, fused_grads, strict=True
    ):
        torch.testing.assert_close(composed_grad, fused_grad, rtol=1e-5, atol=1e-6, msg=name)
    with torch.no_grad():  # nothing to record: the fused kernel, which returns the weights too
        assert dispatch.native_entmax_attention(query, key, value, alpha, mask, weights_wanted=True)[1].grad_fn is None
    assert attention_route(query, key, value, mask, weights_grad=True).composed
    assert "with attention weights wanted with gradients: native CPU kernel's mapping" in describe()


def test_model_attention_runs_fused_in_training_and_evaluation(monkeypatch):
    """Fused wherever the kernel applies, training with attention dropout included (`hf-entmax train` uses 0.1); the
    dropout reaches it in training only, and evaluation applies none."""
    dropouts = []
    original = modeling.native_entmax_attention
    monkeypatch.setattr(
        modeling,
        "native_entmax_attention",
        lambda *args, **kwargs: dropouts.append(args[5]) or original(*args, **kwargs),
    )
    input_ids = torch.tensor([[5, 6, 7, 8, 1], [9, 10, 1, 0, 0]])
    decoder_input_ids = torch.tensor([[0, 11, 12], [0, 13, 14]])
    model = tiny_model(attention_dropout=0.1, dropout=0.0)
    attention_modules = model.config.encoder_layers + 2 * model.config.decoder_layers  # self- and cross-attention
    model.train()(input_ids, decoder_input_ids=decoder_input_ids, labels=decoder_input_ids).loss.backward()
    assert dropouts == [0.1] * attention_modules
    dropouts.clear()
    with torch.no_grad():
        evaluated = model.eval()(input_ids, decoder_input_ids=decoder_input_ids).logits
        assert dropouts == [0.0] * attention_modules
        without_dropout = tiny_model(attention_dropout=0.0, dropout=0.0)(
            input_ids, decoder_input_ids=decoder_input_ids
        )
    assert torch.equal(evaluated, without_dropout.logits)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_take_the_pytorch_implementation_and_agree_with_the_kernel():
    scores = attention_scores(seed=4, dtype=torch.float32, shape=(2, 4, 16, 64))
    alpha = torch.tensor([1.1, 1.37, 1.5, 1.9]).view(1, 4, 1, 1)
    assert dispatch.native_entmax(scores.cuda(), alpha.cuda(), 3) is None
    reference = EntmaxFunction.apply(scores.double(), alpha.double(), 3)
    # The PyTorch implementation's float32 error has the kernel's terms, with its own stopping tolerance.
    gpu = entmax(scores.cuda(), alpha.cuda()).cpu()
    gpu_bound = forward_bound(reference, alpha, stopping_tolerance=REFERENCE_STOPPING_TOLERANCE)
    assert_within(gpu, reference, gpu_bound, "probabilities on CUDA")
    assert_within(entmax(scores, alpha), reference, forward_bound(reference, alpha), "probabilities of the kernel")


def test_kernel_is_used_for_cpu_tensors(monkeypatch):
    calls = []
    original = dispatch.native_entmax
    monkeypatch.setattr(entmax_module, "native_entmax", lambda *args: calls.append(1) or original(*args))
    entmax(torch.randn(3, 8), torch.tensor(1.4))
    assert calls


def test_model_outputs_are_the_same_with_and_without_the_kernel(monkeypatch):
    """The model's attention through the kernel and through the composed PyTorch operations is the same function: in
    float64, where each path computes every probability to within the reference's 16 ε of Newton tolerance and the
    tiny model's layers add a few hundred roundings, the logits agree to 1000 ε of their size."""
    model = tiny_model().double().eval()
    input_ids = torch.tensor([[5, 6, 7, 8, 1], [9, 10, 1, 0, 0]])
    attention_mask = (input_ids != 0).long()
    decoder_input_ids = torch.tensor([[0, 11, 12], [0, 13, 14]])
    calls = []
    original = modeling.native_entmax_attention
    monkeypatch.setattr(
        modeling, "native_entmax_attention", lambda *args, **kwargs: calls.append(1) or original(*args, **kwargs)
    )
    with torch.no_grad():
        fast = model(input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
        assert len(calls) == 6
        monkeypatch.setattr(entmax_module, "native_entmax", None)
        monkeypatch.setattr(modeling, "native_entmax_attention", None)
        reference = model(input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
    bound = 1000 * FLOAT64_ROUNDOFF * reference.abs().max()
    assert_within(fast, reference, torch.full_like(reference, bound.item()), "logits")


# ---- Restricted attention (Sparsefinder's graphs, each query's keys gathered) --------------------------------------


def random_graph(shape: tuple[int, ...], keep: float, seed: int) -> torch.Tensor:
    """A bool graph with each pair kept with probability ``keep``, one row without pairs and one with every pair."""
    graph = torch.rand(shape, generator=torch.Generator().manual_seed(seed)) < keep
    graph[0, 0, 0] = False  # a query without pairs: zeros, as a fully masked query of the full attention
    graph[-1, -1, -1] = True
    return graph


def graph_to_mask(graph: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(graph.shape, dtype=dtype).masked_fill(~graph, float("-inf"))


@pytest.mark.parametrize("size", [1, 7, 8, 9, 31, 32, 33, 70, 300])
def test_graph_rows_list_each_rows_pairs_in_order(size):
    """Rows of every length the op's chunks see (32-byte chunks, 8-byte words, a remainder), sparse and dense rows
    (visited bit by bit, and written without a branch), empty and full rows."""
    generator = torch.Generator().manual_seed(size)
    keep = torch.tensor([0.0, 0.03, 0.2, 0.5, 0.9, 1.0]).repeat_interleave(4).view(-1, 1)  # (24, 1)
    graph = (torch.rand(24, size, generator=generator) < keep).view(2, 3, 4, size)
    offsets, columns = cpu.graph_rows(graph)
    rows = graph.view(-1, size)
    assert offsets.dtype == torch.int64 and columns.dtype == torch.int32
    assert torch.equal(offsets, torch.cat([torch.zeros(1, dtype=torch.int64), rows.sum(-1).cumsum(0)]))
    assert torch.equal(columns.long(), rows.nonzero()[:, 1])  # nonzero lists each row's columns in order
    assert torch.equal(
        cpu.rows_mask(offsets, columns, graph.shape, torch.float32), graph_to_mask(graph, torch.float32)
    )


def float64_attention_inputs(
    batch: int, queries: int, keys: int, generator: torch.Generator
) -> tuple[torch.Tensor, ...]:
    """``(query, key, value, alpha)`` in float64 for 4 heads of 8 dimensions, α per head from 1.05 to 2."""
    query, key, value = (
        torch.randn(batch, 4, length, 8, generator=generator, dtype=torch.float64) for length in (queries, keys, keys)
    )
    return query, key, value, torch.tensor([1.05, 1.3, 1.5, 2.0], dtype=torch.float64).view(1, 4, 1, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("keys", [1, 3, 8, 40])
def test_nearest_rows_are_the_nearest_graphs_rows(keys, dtype):
    """The native nearest rows are the compressed rows of the bool graph PyTorch's top-k forms (`nearest_graph`):
    rows with more allowed keys than ``keys``, with fewer, with none (all +inf), with NaN distances (after every
    number, as torch.topk orders them), and negative and -inf distances; distinct values, since the two break ties
    (NaN among NaN included) differently."""
    generator = torch.Generator().manual_seed(keys)
    distances = torch.randperm(3 * 4 * 5 * 30, generator=generator).view(3, 4, 5, 30).to(dtype) - 100
    distances[0, 0, 0] = float("inf")  # no allowed key
    distances[0, 0, 1, 2:] = float("inf")  # two allowed keys
    distances[0, 1, 0, ::2] = float("nan")  # 15 numbers: no NaN is chosen below 16 keys, all 30 pairs at 40
    distances[0, 1, 2, 5] = float("-inf")
    distances[1] = distances[1].masked_fill(torch.rand(4, 5, 30, generator=generator) < 0.5, float("inf"))
    offsets, columns = cpu.nearest_rows(distances, keys)
    expected_offsets, expected_columns = cpu.graph_rows(nearest_graph(distances, keys))
    assert torch.equal(offsets, expected_offsets) and torch.equal(columns, expected_columns)
    assert offsets[1] == 0 and offsets[2] - offsets[1] == min(keys, 2)


def test_nearest_rows_break_ties_toward_the_lower_column_and_name_bad_input():
    distances = torch.tensor([[3.0, 1.0, 1.0, 2.0, 1.0, 0.0], [math.nan, 5.0, math.nan, 3.0, math.inf, math.nan]])
    # Row 2: its two numbers, then NaN pairs from the lowest column; +inf never.
    assert cpu.nearest_rows(distances, 3)[1].tolist() == [1, 2, 5, 0, 1, 3]
    with pytest.raises(RuntimeError, match="float32 or float64 CPU tensor"):
        cpu.nearest_rows(distances.half(), 3)
    with pytest.raises(RuntimeError, match="keys must be at least 1, got 0"):
        cpu.nearest_rows(distances, 0)


def test_gathered_attention_over_unformed_nearest_keys_is_the_masked_attention_over_their_graph():
    """The model's nearest method hands the dispatcher its distances unformed (`NearestKeys`); the gathered path forms
    the rows natively and agrees with the masked path over the bool graph to float64 rounding, padding and a bias
    on the pairs included; where gathering would not pay (more keys than `RESTRICTED_MAX_DENSITY` of a row) the
    masked path runs."""
    generator = torch.Generator().manual_seed(7)
    batch, heads, queries, keys = 2, 4, 3, 40
    query, key, value, alpha = float64_attention_inputs(batch, queries, keys, generator)
    padding = torch.zeros(batch, 1, 1, keys, dtype=torch.float64)
    padding[1, ..., 30:] = torch.finfo(torch.float64).min
    mask = padding - torch.rand(1, heads, queries, keys, generator=generator, dtype=torch.float64)
    squared = torch.rand(batch, heads, queries, keys, generator=generator, dtype=torch.float64)
    for nearest, gathered in ((6, True), (30, False)):
        graph = NearestKeys(squared.masked_fill(entmax_module.is_masked(padding), float("inf")), nearest)
        output, weights = dispatch.native_entmax_attention(query, key, value, alpha, mask, graph=graph)
        masked = PredictedSparsity.graph_mask(graph.dense(), mask, torch.float64)
        expected, expected_weights = modeling.composed_entmax_attention(query, key, value, alpha, masked, 0.0)
        assert (weights is None) == gathered
        torch.testing.assert_close(output, expected, rtol=1e-12, atol=1e-12)
        if not gathered:
            torch.testing.assert_close(weights, expected_weights, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("biased", [False, True])
@pytest.mark.parametrize("beta", [0.0, 0.3, 0.5, 0.8, 1.0])
def test_restricted_attention_gradcheck(beta, biased):
    """Gradients to the query, key, value and per-head α through a random graph with a query without pairs, with and
    without a bias on the pairs' scores (ALiBi's, which takes no gradient)."""
    generator = torch.Generator().manual_seed(int(beta * 10))
    query, key, value = (
        torch.randn(2, 3, length, 4, generator=generator, dtype=torch.float64).requires_grad_() for length in (3, 6, 6)
    )
    alpha = (1 + beta + torch.tensor([0.0, 0.04, -0.03]).clamp(min=-beta, max=1 - beta)).double().view(1, 3, 1, 1)
    alpha.requires_grad_(beta not in (0.0, 1.0))  # as in test_fused_attention_gradcheck
    offsets, columns = cpu.graph_rows(random_graph((2, 3, 3, 6), 0.6, seed=int(beta * 10)))
    pair_bias = -torch.rand(columns.numel(), generator=generator, dtype=torch.float64) if biased else None

    def attention(q, k, v, a):
        return cpu.NativeRestrictedAttentionFunction.apply(q, k, v, a, offsets, columns, pair_bias)

    assert gradcheck(attention, (query, key, value, alpha))
    assert gradgradcheck(attention, (query, key, value, alpha))


def test_gathered_attention_adds_the_masks_values_on_the_graphs_pairs():
    """The dispatcher's gathered path reads the additive mask's values on the graph's pairs (ALiBi's distance bias
    per head, plus a padding mask per batch row, broadcast as the model's are) and adds them to the scores, as the
    masked path does: the two agree to float64 rounding."""
    generator = torch.Generator().manual_seed(5)
    batch, heads, queries, keys = 2, 4, 12, 12
    query, key, value, alpha = float64_attention_inputs(batch, queries, keys, generator)
    distances = (torch.arange(queries)[:, None] - torch.arange(keys)).abs().double()
    bias = -torch.tensor([1.0, 0.5, 0.25, 0.0], dtype=torch.float64).view(1, heads, 1, 1) * distances
    padding = torch.zeros(batch, 1, 1, keys, dtype=torch.float64)
    padding[1, ..., :3] = torch.finfo(torch.float64).min  # the second row's first three keys are padding
    mask = padding + bias  # (B, H, 1 or Lq, Lk), as the model's attention function builds it
    graph = (distances <= 2).expand(batch, heads, queries, keys) & ~entmax_module.is_masked(padding)
    assert graph.float().mean() <= dispatch.RESTRICTED_MAX_DENSITY  # so that the pairs are gathered
    gathered = dispatch.native_entmax_attention(query, key, value, alpha, mask, graph=graph)
    assert gathered is not None and gathered[1] is None  # the gathered path (no weights)
    masked = PredictedSparsity.graph_mask(graph, mask, torch.float64)
    expected, _ = modeling.composed_entmax_attention(query, key, value, alpha, masked, 0.0)
    torch.testing.assert_close(gathered[0], expected, rtol=1e-12, atol=1e-12)


def restricted_and_masked(graph: torch.Tensor, dtype: torch.dtype, seed: int):
    """The gathered attention over ``graph`` and the fused attention with the pairs outside it masked, forward and
    backward on the same inputs (``(B, H, Lq, 8)`` queries, already scaled; α per head): ``(inputs, gathered outputs
    and gradients, masked outputs and gradients)``."""
    batch, heads, queries, keys = graph.shape
    generator = torch.Generator().manual_seed(seed)
    query, key, value = (torch.randn(batch, heads, length, 8, generator=generator) for length in (queries, keys, keys))
    inputs = (query * 0.7, key, value, torch.tensor([1.05, 1.3, 1.5, 2.0]).view(1, 4, 1, 1))
    inputs = tuple(tensor.to(dtype) for tensor in inputs)
    grad_output = torch.randn(batch, heads, queries, 8, generator=generator, dtype=dtype)
    offsets, columns = cpu.graph_rows(graph)
    results = []
    for attention in (
        lambda *leaves: cpu.NativeRestrictedAttentionFunction.apply(*leaves, offsets, columns),
        lambda *leaves: cpu.entmax_attention(*leaves, graph_to_mask(graph, dtype))[0],
    ):
        leaves = [tensor.clone().requires_grad_() for tensor in inputs]
        output = attention(*leaves)
        output.backward(grad_output)
        results.append((output.detach(), *(leaf.grad for leaf in leaves)))
    return inputs, grad_output, *results


GRAPHS = {
    "random": lambda shape: random_graph(shape, 0.3, seed=1),
    "all pairs": lambda shape: torch.ones(shape, dtype=torch.bool),
    "causal": lambda shape: torch.ones(shape[-2:], dtype=torch.bool).tril(shape[-1] - shape[-2]).expand(shape),
}


@pytest.mark.parametrize("graph_name", list(GRAPHS))
def test_float32_restricted_attention_matches_float64_masked_attention(graph_name):
    """The gathered attention is the masked attention: in float32, its output and every gradient within the float32
    rounding bounds of the float64 masked attention (the bounds of test_float32_fused_attention_matches_float64_...,
    which hold for any summation order, and so for the gathered rows: a score is the same sum of D products, a row
    solves the same equation over fewer entries (the masked ones add nothing), and the output and the gradients to
    the keys and values are sums over fewer terms than the full products the bounds are written for). The float32
    masked attention is within the same bounds, so the two float32 paths agree up to float32 rounding."""
    graph = GRAPHS[graph_name]((2, 4, 16, 40))
    inputs, grad_output, gathered, masked = restricted_and_masked(graph, torch.float32, seed=3)
    q, k, v = (tensor.double() for tensor in inputs[:3])
    alpha = inputs[3]
    probs = EntmaxFunction.apply(q @ k.transpose(-1, -2) + graph_to_mask(graph, torch.float64), alpha.double(), 3)
    probs_bound = forward_bound(probs, alpha, score_error=matmul_bound(q, k.transpose(-1, -2)))
    # The backward is compared with the reference's at the float32 kernel's own probabilities (as in the fused test):
    # the gathered attention's, which agree with the masked kernel's within the forward bound.
    offsets, columns = cpu.graph_rows(graph)
    kernel_probs = cpu.rows_mask(offsets, columns, graph.shape, torch.float64).exp()  # 1 on the graph, 0 off it
    kernel_probs[graph] = torch.ops.hf_entmax.restricted_attention_forward(*inputs, offsets, columns)[1].double()
    assert_within(kernel_probs, probs, probs_bound, "probabilities")
    grad_output = grad_output.double()
    grad_probs = grad_output @ v.transpose(-1, -2)
    grad_scores, grad_alpha_rows = reference_backward(kernel_probs, alpha, grad_probs)
    error_scores, error_alpha_rows = backward_bound(
        kernel_probs, alpha, grad_probs, matmul_bound(grad_output, v.transpose(-1, -2))
    )
    expected = {
        "output": (probs @ v, matmul_bound(probs, v, probs_bound)),
        "query": (grad_scores @ k, matmul_bound(grad_scores, k, error_scores)),
        "key": (
            grad_scores.transpose(-1, -2) @ q,
            matmul_bound(grad_scores.transpose(-1, -2), q, error_scores.transpose(-1, -2)),
        ),
        "value": (
            kernel_probs.transpose(-1, -2) @ grad_output,
            matmul_bound(kernel_probs.transpose(-1, -2), grad_output),
        ),
        "alpha": (
            grad_alpha_rows.sum_to_size(alpha.shape),
            summed_bound(grad_alpha_rows, error_alpha_rows, alpha.shape),
        ),
    }
    for ours, (name, (reference, bound)) in zip(gathered, expected.items(), strict=True):
        assert_within(ours, reference, bound, f"gathered {name}")
    assert_within(masked[0], *expected["output"], "masked output")
    # The masked path's gradients come from its own probabilities, within the forward bound of the reference's as the
    # gathered path's are: for the values', twice that bound apart from those the reference above is computed at.
    masked_value_bound = matmul_bound(kernel_probs.transpose(-1, -2), grad_output, 2 * probs_bound.transpose(-1, -2))
    assert_within(masked[3], expected["value"][0], masked_value_bound, "masked gradient to the value")
    empty = ~graph.any(-1)  # queries without pairs (the random graph's first): zeros, no NaN
    assert gathered[0][empty].eq(0).all() and gathered[1][empty].eq(0).all()


def test_float64_restricted_attention_equals_the_masked_attention_to_float64_rounding():
    """In float64 the two paths differ only by the order of their sums and the iteration's stopping point, each
    within the float64 rounding bounds above (computed with u = 2^-53): 2 bounds apart at most."""
    graph = GRAPHS["random"]((2, 4, 16, 40))
    inputs, _, gathered, masked = restricted_and_masked(graph, torch.float64, seed=5)
    q, k, v, alpha = inputs
    probs = EntmaxFunction.apply(q @ k.transpose(-1, -2) + graph_to_mask(graph, torch.float64), alpha, 3)
    score_error = matmul_bound(q, k.transpose(-1, -2), roundoff=FLOAT64_ROUNDOFF)
    probs_bound = forward_bound(probs, alpha, score_error, roundoff=FLOAT64_ROUNDOFF)
    output_bound = 2 * matmul_bound(probs, v, probs_bound, roundoff=FLOAT64_ROUNDOFF)
    assert_within(gathered[0], masked[0], output_bound, "output")
    for name, ours, theirs in zip(("query", "key", "value", "alpha"), gathered[1:], masked[1:], strict=True):
        # Gradients of size ~1 through a few products of 8–40 terms: 1e-12 is ~10^3 float64 roundings of margin.
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12, msg=f"gradient to the {name}")


def test_restricted_attention_gathers_only_where_it_pays():
    """The model's attention gathers a graph's pairs where it keeps at most `RESTRICTED_MAX_DENSITY` of them (the rule
    docs/sparsefinder.md gives, forming no weights), and otherwise masks the others for the fused kernel, having only
    counted them; where the kernel does not apply (mixed dtypes) neither runs."""
    generator = torch.Generator().manual_seed(0)
    query, key, value = (torch.randn(1, 2, length, 8, generator=generator) for length in (4, 20, 20))
    pairs = int(dispatch.RESTRICTED_MAX_DENSITY * 4 * 20)  # per head
    sparse = torch.zeros(1, 2, 4 * 20, dtype=torch.bool)
    sparse[..., :pairs] = True  # as dense as the rule takes
    sparse = sparse[..., torch.randperm(4 * 20, generator=generator)].view(1, 2, 4, 20)
    dense = sparse.clone()
    dense[0, 0][~dense[0, 0]] = True
    for graph, gathered in ((sparse, True), (dense, False)):
        output, weights = dispatch.native_entmax_attention(query, key, value, 1.5, None, graph=graph)
        expected, expected_weights = cpu.entmax_attention(query, key, value, 1.5, graph_to_mask(graph, torch.float32))
        assert (weights is None) == gathered
        if gathered:
            torch.testing.assert_close(output, expected)
        else:
            assert torch.equal(output, expected) and torch.equal(weights, expected_weights)
    assert dispatch.native_entmax_attention(query.double(), key, value, 1.5, None, graph=sparse) is None
    offsets, columns = cpu.graph_rows(dense, max_pairs=2 * pairs)
    assert columns is None and offsets[-1] == 2 * pairs + 4 * 20 - pairs


def test_restricted_attention_names_bad_graphs():
    query = key = value = torch.randn(1, 1, 3, 4)
    offsets, columns = cpu.graph_rows(torch.ones(1, 1, 3, 3, dtype=torch.bool))
    with pytest.raises(RuntimeError, match=r"columns must be key positions in \[0, 2\)"):
        torch.ops.hf_entmax.restricted_attention_forward(
            query, key[..., :2, :], value[..., :2, :], torch.tensor(1.5), offsets, columns
        )
    with pytest.raises(
        RuntimeError, match="offsets must be a contiguous int64 CPU tensor of batch × heads × query_len"
    ):
        torch.ops.hf_entmax.restricted_attention_forward(query, key, value, torch.tensor(1.5), offsets[:-1], columns)


def test_model_attends_over_gathered_pairs_where_it_pays_and_masks_elsewhere(monkeypatch):
    """Through the model (float64): a window graph with fallback rows (padding queries, whose window holds no real
    key) runs gathered, and its logits are the masked path's to 1000 ε of their size (as in
    test_model_outputs_are_the_same_with_and_without_the_kernel), and so is cached beam search; wanted weights and
    attention dropout in training take the masked path, which forms the weights."""
    gathered_calls = []
    original = cpu.restricted_attention
    monkeypatch.setattr(cpu, "restricted_attention", lambda *args: gathered_calls.append(1) or original(*args))
    model = tiny_model(attention_dropout=0.1, dropout=0.0).double().eval()
    input_ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 1], [9, 10, 1, 0, 0, 0, 0, 0]])
    batch = {
        "input_ids": input_ids,
        "attention_mask": (input_ids != 0).long(),
        "decoder_input_ids": torch.tensor([[0, 11, 12, 13, 14], [0, 13, 14, 15, 16]]),
    }
    model.set_predicted_sparsity("window:size=1")
    with torch.no_grad():
        gathered = model(**batch)
        assert len(gathered_calls) == 4  # encoder and decoder self-attention; the window has no cross-attention
        assert gathered.encoder_attentions is None
        with_weights = model(**batch, output_attentions=True)
        assert len(gathered_calls) == 4 and all(weights is not None for weights in with_weights.encoder_attentions)
        monkeypatch.setattr(dispatch, "RESTRICTED_MAX_DENSITY", 0.0)  # gathering never pays: the masked path
        masked = model(**batch)
    bound = 1000 * FLOAT64_ROUNDOFF * masked.logits.abs().max()
    assert_within(gathered.logits, masked.logits, torch.full_like(masked.logits, bound.item()), "logits")
    torch.testing.assert_close(with_weights.logits, masked.logits, rtol=0, atol=0)
    generation = {"input_ids": input_ids, "attention_mask": batch["attention_mask"], "max_length": 8, "num_beams": 2}
    masked_tokens = model.generate(**generation)
    monkeypatch.undo()
    monkeypatch.setattr(cpu, "restricted_attention", lambda *args: gathered_calls.append(1) or original(*args))
    gathered_calls.clear()
    assert torch.equal(model.generate(**generation), masked_tokens) and gathered_calls  # cached decoding gathers too
    gathered_calls.clear()
    model.train()(**batch, labels=batch["decoder_input_ids"]).loss.backward()
    assert not gathered_calls  # attention dropout 0.1: masked


def test_model_forms_nearest_keys_natively_and_matches_the_masked_path(monkeypatch):
    """Through the model (float64, every attention type restricted to each query's 3 nearest keys, padding in the
    batch): the nearest method's rows are formed by the native kernel and attended over gathered, and the logits and
    cached beam search are those of the masked path over the bool graph PyTorch's top-k forms."""
    formed = []
    original = cpu.nearest_rows
    monkeypatch.setattr(cpu, "nearest_rows", lambda *args: formed.append(1) or original(*args))
    model = tiny_model(dropout=0.0).double().eval()
    model.set_predicted_sparsity("nearest:keys=3", predictor=random_predictor(model))
    input_ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 1], [9, 10, 1, 0, 0, 0, 0, 0]])
    batch = {
        "input_ids": input_ids,
        "attention_mask": (input_ids != 0).long(),
        "decoder_input_ids": torch.tensor([[0, 11, 12, 13, 14, 15, 16], [0, 13, 14, 15, 16, 17, 18]]),
    }
    generation = {"input_ids": input_ids, "attention_mask": batch["attention_mask"], "max_length": 8, "num_beams": 2}
    with torch.no_grad():
        gathered = model(**batch)
        assert len(formed) == 3 * model.config.decoder_layers  # three keys of 7–8 is below the gathering rule's half
        gathered_tokens = model.generate(**generation)
        monkeypatch.setattr(dispatch, "RESTRICTED_MAX_DENSITY", 0.0)  # gathering never pays: the masked path
        formed.clear()
        masked = model(**batch)
        assert not formed
        masked_tokens = model.generate(**generation)
    bound = 1000 * FLOAT64_ROUNDOFF * masked.logits.abs().max()
    assert_within(gathered.logits, masked.logits, torch.full_like(masked.logits, bound.item()), "logits")
    assert torch.equal(gathered_tokens, masked_tokens)
