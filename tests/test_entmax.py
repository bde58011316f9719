"""Tests for the α-entmax functions, checked against the paper authors' ``entmax`` package.

Every test runs twice: through the native CPU kernel (where it builds) and through the PyTorch implementation
that a model loaded from the Hub without hf_entmax uses.
"""

import entmax as entmax_ref
import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

from hf_entmax.kernels.cpu import kernel_available
from hf_entmax.modeling import entmax as entmax_module
from hf_entmax.modeling.entmax import (
    Entmax15Function,
    EntmaxFunction,
    SparsemaxFunction,
    entmax,
    entmax15,
    sparsemax,
)


GRADCHECK_ALPHAS = [1.0, 1.01, 1.25, 1.5, 1.75, 2.0]
ORACLE_ALPHAS = [1.01, 1.25, 1.5, 1.75, 2.0]  # the oracle's bisection is not softmax at α = 1
ROW_LENGTHS = [1, 2, 7, 64, 300]
LEARNED_ALPHA = 1.3
# Every transform a user can call: fixed α through the general path, a learned (tensor) α, the sort-based ones.
KINDS = ["alpha=1", "alpha=1.5", "alpha=2", "learned", "sparsemax", "entmax15"]
SPARSE_KINDS = ["alpha=1.5", "alpha=2", "learned", "sparsemax", "entmax15"]
HALF_DTYPES = [torch.bfloat16, torch.float16]
NEG_INF = float("-inf")


def randn(*shape: int, seed: int = 0, scale: float = 1.0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(*shape, generator=generator, dtype=torch.float64)).to(dtype)


def random_mask(*shape: int, seed: int = 0, fraction: float = 0.3) -> torch.Tensor:
    """Random mask that never covers the first entry of a row, so no row is fully masked."""
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(*shape, generator=generator) < fraction
    mask[..., 0] = False
    return mask


def learned_alpha(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.tensor(LEARNED_ALPHA, dtype=dtype, requires_grad=True)


def apply(kind: str, scores: torch.Tensor, dim: int = -1, alpha: torch.Tensor | None = None) -> torch.Tensor:
    """Applies the transform ``kind``; ``alpha`` is the tensor used for ``kind == "learned"``."""
    if kind == "sparsemax":
        return sparsemax(scores, dim=dim)
    if kind == "entmax15":
        return entmax15(scores, dim=dim)
    if kind == "learned":
        return entmax(scores, learned_alpha() if alpha is None else alpha, dim=dim)
    return entmax(scores, float(kind.removeprefix("alpha=")), dim=dim)


def per_head_alpha(values: list[float], dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype).view(1, -1, 1, 1).requires_grad_()


def masked(scores: torch.Tensor, mask: torch.Tensor, value: float) -> torch.Tensor:
    return scores.masked_fill(mask, value)


def mask_value(name: str, dtype: torch.dtype) -> float:
    return NEG_INF if name == "-inf" else torch.finfo(dtype).min


@pytest.fixture(autouse=True, params=["native", "pytorch"])
def implementation(request, monkeypatch):
    if request.param == "pytorch":
        monkeypatch.setattr(entmax_module, "native_entmax", None)
    elif not kernel_available():
        pytest.skip("the native CPU kernel could not be built on this machine")
    return request.param


# --- gradients: finite differences ---------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", GRADCHECK_ALPHAS)
def test_entmax_function_gradcheck_scores_and_per_head_alpha(alpha):
    scores = randn(2, 3, 2, 5, seed=1, scale=2.0, dtype=torch.float64).requires_grad_()
    alphas = per_head_alpha([alpha] * 3)
    assert gradcheck(lambda z, a: EntmaxFunction.apply(z, a, -1), (scores, alphas))


def test_entmax_function_gradcheck_distinct_per_head_alphas():
    scores = randn(2, 4, 2, 6, seed=2, scale=2.0, dtype=torch.float64).requires_grad_()
    alphas = per_head_alpha([1.0, 1.2, 1.6, 2.0])
    assert gradcheck(lambda z, a: EntmaxFunction.apply(z, a, -1), (scores, alphas))


@pytest.mark.parametrize("function", [SparsemaxFunction, Entmax15Function], ids=["sparsemax", "entmax15"])
@pytest.mark.parametrize("dim", [-1, 1])
def test_sort_based_function_gradcheck(function, dim):
    scores = randn(2, 3, 2, 7, seed=3, scale=2.0, dtype=torch.float64).requires_grad_()
    assert gradcheck(lambda z: function.apply(z, dim % scores.dim()), (scores,))


@pytest.mark.parametrize("mask_name", ["-inf", "finfo.min"])
@pytest.mark.parametrize("kind", ["alpha=1", "alpha=1.5", "alpha=2", "sparsemax", "entmax15"])
def test_gradcheck_with_masked_entries_and_fully_masked_row(kind, mask_name):
    scores = randn(2, 2, 3, 6, seed=4, scale=2.0, dtype=torch.float64).requires_grad_()
    mask = random_mask(2, 2, 3, 6, seed=5)
    mask[1, 0, 2] = True  # one fully masked row
    value = mask_value(mask_name, torch.float64)
    if kind in ("sparsemax", "entmax15"):
        function = SparsemaxFunction if kind == "sparsemax" else Entmax15Function
        assert gradcheck(lambda z: function.apply(masked(z, mask, value), 3), (scores,))
    else:
        alphas = per_head_alpha([float(kind.removeprefix("alpha="))] * 2)
        assert gradcheck(lambda z, a: EntmaxFunction.apply(masked(z, mask, value), a, 3), (scores, alphas))


@pytest.mark.parametrize(
    "kind", ["alpha=1", "alpha=1 tensor", "alpha=1.5", "alpha=2", "learned", "sparsemax", "entmax15"]
)
def test_second_order_gradients_pass_gradgradcheck(kind):
    """Double backward (``create_graph=True``: Hessian-vector products, gradient penalties) is exact, through masked
    entries and a fully masked row, with α learned per head, on both implementations (the kernel's gave zeros silently;
    the PyTorch 1.5-entmax failed this check). A fixed α = 1 tensor goes through the kernel's own softmax."""
    scores = randn(2, 3, 2, 6, seed=46, scale=2.0, dtype=torch.float64).requires_grad_()
    mask = random_mask(2, 3, 2, 6, seed=47)
    mask[1, 0, 1] = True  # one fully masked row
    if kind in ("learned", "alpha=1 tensor"):
        # Interior α for a learned one: gradgradcheck's central steps would leave [1, 2] at its ends.
        alphas = per_head_alpha([1.2, 1.5, 1.8]) if kind == "learned" else torch.ones(1, 3, 1, 1, dtype=torch.float64)
        inputs = (scores, alphas) if kind == "learned" else (scores,)
        assert gradgradcheck(lambda z, *a: entmax(masked(z, mask, NEG_INF), a[0] if a else alphas), inputs)
    else:
        assert gradgradcheck(lambda z: apply(kind, masked(z, mask, NEG_INF)), (scores,))


# --- basic properties ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_outputs_are_probabilities(kind):
    probs = apply(kind, randn(4, 3, 64, seed=6, scale=3.0))
    assert (probs >= 0).all()
    torch.testing.assert_close(probs.sum(-1), torch.ones(4, 3), rtol=0, atol=1e-5)


@pytest.mark.parametrize("kind", SPARSE_KINDS)
def test_alpha_above_one_gives_exact_zeros(kind):
    probs = apply(kind, randn(4, 3, 64, seed=7, scale=3.0))
    zeros_per_row = (probs == 0).sum(-1)
    assert (zeros_per_row > 0).all()
    assert ((probs > 0).sum(-1) > 0).all()


def test_alpha_one_has_full_support():
    assert (entmax(randn(4, 64, seed=8, scale=3.0), 1.0) > 0).all()


# --- agreement with the oracle and with softmax --------------------------------------------------------------------


@pytest.mark.parametrize("length", ROW_LENGTHS)
@pytest.mark.parametrize("alpha", ORACLE_ALPHAS)
def test_entmax_matches_bisect_oracle(alpha, length):
    scores = randn(6, length, seed=9, scale=2.0)
    expected = entmax_ref.entmax_bisect(scores.double(), alpha, dim=-1, n_iter=200)
    torch.testing.assert_close(entmax(scores, alpha).double(), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("length", ROW_LENGTHS)
@pytest.mark.parametrize(
    ("ours", "oracle"),
    [(sparsemax, entmax_ref.sparsemax), (entmax15, entmax_ref.entmax15)],
    ids=["sparsemax", "entmax15"],
)
def test_sort_based_matches_oracle(ours, oracle, length):
    scores = randn(6, length, seed=10, scale=2.0)
    torch.testing.assert_close(ours(scores).double(), oracle(scores.double(), dim=-1), rtol=0, atol=1e-5)


@pytest.mark.parametrize("length", ROW_LENGTHS)
@pytest.mark.parametrize("alpha_kind", ["float", "tensor"])
def test_alpha_one_is_softmax(alpha_kind, length):
    scores = randn(6, length, seed=11, scale=3.0)
    alpha = 1.0 if alpha_kind == "float" else torch.ones(6, 1)
    torch.testing.assert_close(entmax(scores, alpha), torch.softmax(scores, dim=-1), rtol=0, atol=1e-6)


def test_per_head_alpha_matches_oracle_and_softmax():
    """A (1, H, 1, 1) α gives each head its own entmax; the α = 1 head is softmax."""
    scores = randn(2, 4, 3, 16, seed=12, scale=2.0)
    alphas = torch.tensor([1.0, 1.3, 1.6, 2.0]).view(1, 4, 1, 1)
    probs = entmax(scores, alphas)
    torch.testing.assert_close(probs[:, 0], torch.softmax(scores[:, 0], dim=-1), rtol=0, atol=1e-6)
    expected = entmax_ref.entmax_bisect(scores[:, 1:].double(), alphas[:, 1:].double().expand(2, 3, 3, 1), n_iter=200)
    torch.testing.assert_close(probs[:, 1:].double(), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "kind",
    ["alpha=1.25", "alpha=1.5", "sparsemax", "entmax15"],
    ids=["bisect1.25", "bisect1.5", "sparsemax", "entmax15"],
)
def test_masked_scores_match_oracle(kind):
    """−inf entries vs the oracle; its sort-based functions fail on a fully masked row, so that row is left out."""
    scores = masked(randn(5, 12, seed=13, scale=2.0), random_mask(5, 12, seed=14), NEG_INF)
    scores[2] = NEG_INF
    defined = torch.tensor([True, True, False, True, True])
    if kind == "sparsemax":
        probs, expected = sparsemax(scores), entmax_ref.sparsemax(scores[defined].double())
    elif kind == "entmax15":
        probs, expected = entmax15(scores), entmax_ref.entmax15(scores[defined].double())
    else:
        alpha = float(kind.removeprefix("alpha="))
        probs = entmax(scores, alpha)
        expected = entmax_ref.entmax_bisect(scores[defined].double(), alpha, n_iter=200)
    torch.testing.assert_close(probs[defined].double(), expected, rtol=0, atol=1e-5)
    assert (probs[2] == 0).all()


@pytest.mark.parametrize("alpha", ORACLE_ALPHAS)
def test_gradients_match_oracle(alpha):
    """float64 gradients w.r.t. the scores and a per-head α agree with the oracle's closed forms."""
    scores = randn(2, 3, 4, 9, seed=15, scale=2.0, dtype=torch.float64).requires_grad_()
    upstream = randn(2, 3, 4, 9, seed=16, dtype=torch.float64)
    alphas = per_head_alpha([alpha] * 3)
    (entmax(scores, alphas) * upstream).sum().backward()

    ref_scores = scores.detach().clone().requires_grad_()
    ref_alphas = alphas.detach().clone().requires_grad_()
    expected = entmax_ref.entmax_bisect(ref_scores, ref_alphas.expand(2, 3, 4, 1), n_iter=200)
    (expected * upstream).sum().backward()

    torch.testing.assert_close(scores.grad, ref_scores.grad, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(alphas.grad, ref_alphas.grad, rtol=1e-6, atol=1e-9)


def test_alpha_gradient_at_one_matches_central_differences():
    """At α = 1 (where the oracle is undefined) the α-gradient is the limit; check it by central differences."""
    scores = randn(2, 3, 4, 9, seed=17, scale=2.0, dtype=torch.float64)
    upstream = randn(2, 3, 4, 9, seed=18, dtype=torch.float64)
    alphas = per_head_alpha([1.0] * 3)
    (EntmaxFunction.apply(scores, alphas, -1) * upstream).sum().backward()

    step = 1e-5
    numerical = torch.zeros(3, dtype=torch.float64)
    for head in range(3):
        losses = []
        for sign in (1, -1):
            shifted = alphas.detach().clone()
            shifted[0, head] += sign * step
            losses.append((EntmaxFunction.apply(scores, shifted, -1) * upstream).sum())
        numerical[head] = (losses[0] - losses[1]) / (2 * step)
    torch.testing.assert_close(alphas.grad.flatten(), numerical, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("length", [1, 2, 7, 64])
@pytest.mark.parametrize(("kind", "alpha"), [("sparsemax", 2.0), ("entmax15", 1.5)])
def test_sort_based_equals_general_entmax(kind, alpha, length):
    scores = randn(6, length, seed=19, scale=2.0).requires_grad_()
    upstream = randn(6, length, seed=20)
    probs = apply(kind, scores)
    (grad,) = torch.autograd.grad((probs * upstream).sum(), scores)
    general = entmax(scores, alpha)
    (general_grad,) = torch.autograd.grad((general * upstream).sum(), scores)
    torch.testing.assert_close(probs, general, rtol=0, atol=1e-5)
    torch.testing.assert_close(grad, general_grad, rtol=0, atol=1e-5)


# --- masking -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mask_name", ["-inf", "finfo.min"])
@pytest.mark.parametrize("kind", KINDS)
def test_mask_is_truncation(kind, mask_name):
    scores = randn(4, 10, seed=21, scale=3.0)
    mask = random_mask(4, 10, seed=22, fraction=0.4)
    probs = apply(kind, masked(scores, mask, mask_value(mask_name, scores.dtype)))
    assert (probs[mask] == 0).all()
    for row in range(4):
        truncated = apply(kind, scores[row][~mask[row]])
        torch.testing.assert_close(probs[row][~mask[row]], truncated, rtol=0, atol=1e-6)


@pytest.mark.parametrize("mask_style", ["-inf", "finfo.min", "additive finfo.min"])
def test_attention_padding_mask_is_truncation_with_gradients(mask_style):
    """Key padding in (B, H, Lq, Lk) attention with per-head α: outputs and all gradients equal the unpadded batch."""
    lengths = [7, 4]
    scores = randn(2, 3, 5, 7, seed=23, scale=3.0).requires_grad_()
    upstream = randn(2, 3, 5, 7, seed=24)
    alphas = per_head_alpha([1.0, 1.5, 2.0], dtype=torch.float32)
    padding = torch.arange(7) >= torch.tensor(lengths).view(2, 1, 1, 1)
    if mask_style == "additive finfo.min":
        inputs = scores + torch.zeros(2, 1, 1, 7).masked_fill(padding, torch.finfo(torch.float32).min)
    else:
        inputs = masked(scores, padding, mask_value(mask_style, torch.float32))
    probs = entmax(inputs, alphas)
    grad_scores, grad_alpha = torch.autograd.grad((probs * upstream).sum(), (scores, alphas))

    assert (probs.masked_select(padding) == 0).all()
    assert (grad_scores.masked_select(padding) == 0).all()
    expected_grad_alpha = torch.zeros_like(alphas)
    for batch, length in enumerate(lengths):
        truncated_scores = scores[batch : batch + 1, ..., :length].detach().requires_grad_()
        truncated = entmax(truncated_scores, alphas)
        grads = torch.autograd.grad(
            (truncated * upstream[batch : batch + 1, ..., :length]).sum(), (truncated_scores, alphas)
        )
        torch.testing.assert_close(probs[batch : batch + 1, ..., :length], truncated, rtol=0, atol=1e-6)
        torch.testing.assert_close(grad_scores[batch : batch + 1, ..., :length], grads[0], rtol=0, atol=1e-6)
        expected_grad_alpha += grads[1]
    torch.testing.assert_close(grad_alpha, expected_grad_alpha, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mask_name", ["-inf", "finfo.min"])
@pytest.mark.parametrize("kind", KINDS)
def test_fully_masked_row_gives_zeros_and_zero_gradients(kind, mask_name):
    scores = randn(3, 6, seed=25, scale=2.0)
    scores[1] = mask_value(mask_name, scores.dtype)
    scores.requires_grad_()
    alpha = learned_alpha()
    probs = apply(kind, scores, alpha=alpha)
    grad_scores, *grad_alpha = torch.autograd.grad(
        (probs * randn(3, 6, seed=26)).sum(), (scores, alpha) if kind == "learned" else (scores,)
    )

    assert (probs[1] == 0).all()
    assert (grad_scores[1] == 0).all()
    assert torch.isfinite(probs).all() and torch.isfinite(grad_scores).all()
    assert all(torch.isfinite(g).all() for g in grad_alpha)
    torch.testing.assert_close(probs[[0, 2]], apply(kind, scores.detach()[[0, 2]]), rtol=0, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_all_rows_masked_gives_zeros_and_zero_gradients(kind):
    scores = torch.full((2, 5), NEG_INF, requires_grad=True)
    alpha = learned_alpha()
    probs = apply(kind, scores, alpha=alpha)
    grads = torch.autograd.grad(probs.sum(), (scores, alpha) if kind == "learned" else (scores,))
    assert (probs == 0).all()
    assert all((g == 0).all() for g in grads)


# --- dtypes --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_half_precision_matches_float32_and_keeps_dtype(dtype, kind):
    scores = randn(4, 33, seed=27, scale=3.0, dtype=dtype).requires_grad_()
    upstream = randn(4, 33, seed=28, dtype=dtype)
    alpha = learned_alpha()
    probs = apply(kind, scores, alpha=alpha)
    probs.backward(upstream)

    upcast = scores.detach().float().requires_grad_()
    reference_alpha = learned_alpha()
    reference = apply(kind, upcast, alpha=reference_alpha)
    reference.backward(upstream.float())

    assert probs.dtype == dtype and scores.grad.dtype == dtype
    torch.testing.assert_close(probs, reference.to(dtype))
    torch.testing.assert_close(scores.grad, upcast.grad.to(dtype))
    if kind == "learned":
        assert alpha.grad.dtype == torch.float32
        torch.testing.assert_close(alpha.grad, reference_alpha.grad)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_half_precision_finfo_min_is_masked(dtype, kind):
    scores = randn(4, 10, seed=29, scale=3.0, dtype=dtype)
    mask = random_mask(4, 10, seed=30, fraction=0.4)
    probs = apply(kind, masked(scores, mask, torch.finfo(dtype).min))
    assert (probs[mask] == 0).all()
    expected = apply(kind, masked(scores.float(), mask, NEG_INF)).to(dtype)
    torch.testing.assert_close(probs, expected)


@pytest.mark.parametrize("kind", KINDS)
def test_float64_is_computed_and_returned_in_float64(kind):
    scores = randn(3, 9, seed=31, scale=2.0, dtype=torch.float64)
    probs = apply(kind, scores, alpha=learned_alpha(torch.float64))
    assert probs.dtype == torch.float64
    torch.testing.assert_close(probs.sum(-1), torch.ones(3, dtype=torch.float64), rtol=0, atol=1e-12)


# --- extreme scores ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [*KINDS, "alpha=1.01", "alpha=1 tensor"])
def test_huge_scores_are_finite_and_pick_the_maximum(kind):
    scores = randn(4, 8, seed=32, scale=1e4).requires_grad_()
    alpha = torch.tensor(1.0, requires_grad=True) if kind == "alpha=1 tensor" else learned_alpha()
    probs = apply("learned" if kind == "alpha=1 tensor" else kind, scores, alpha=alpha)
    grads = torch.autograd.grad((probs * randn(4, 8, seed=33)).sum(), (scores, alpha), allow_unused=True)

    assert torch.isfinite(probs).all()
    assert all(g is None or torch.isfinite(g).all() for g in grads)
    one_hot = torch.nn.functional.one_hot(scores.argmax(-1), 8).float()
    torch.testing.assert_close(probs, one_hot, rtol=0, atol=1e-6)


# Both implementations, every α family, with a tensor α = 1 for the kernel's own softmax (a float α = 1 is PyTorch's).
EXTREME_KINDS = [*KINDS, "alpha=1.01", "alpha=1.25", "alpha=1 tensor"]
# Magnitudes of extreme spreads for each dtype, up to a quarter of its largest value: 1e4 already leaves everything but
# the maximum at least 1/β = 100 behind it (the iteration's regime); from ~1.7e7 in float32 (~1e16 in float64) the
# spacing of the scores exceeds 2/β, and max − 1/β rounds to max.
MAGNITUDES = {
    torch.float32: [1e4, 1.7e7, 3e7, 1e8, 1e30, 8e37],
    torch.float64: [1e4, 1.7e7, 1e16, 1e30, 1e300],
    torch.bfloat16: [1e4, 1e8, 1e30, 8e37],
    torch.float16: [1e4, 1.6e4],
}
ALL_DTYPES = [torch.float32, torch.float64, *HALF_DTYPES]
POS_INF = float("inf")
NAN = float("nan")


def apply_with_alpha(kind: str, scores: torch.Tensor, alpha_shape: tuple[int, ...] = ()):
    """``(probs, alpha)``: the transform ``kind`` of ``scores``, and the α tensor it learns (``None`` for fixed α)."""
    if kind not in ("learned", "alpha=1 tensor"):
        return apply(kind, scores), None
    value = LEARNED_ALPHA if kind == "learned" else 1.0
    alpha = torch.full(alpha_shape, value, dtype=compute_dtype(scores)).requires_grad_()
    return entmax(scores, alpha), alpha


def compute_dtype(scores: torch.Tensor) -> torch.dtype:
    """The dtype entmax computes ``scores`` in, and its α's."""
    return torch.float64 if scores.dtype == torch.float64 else torch.float32


def gradients(kind: str, scores: torch.Tensor, upstream: torch.Tensor, alpha_shape: tuple[int, ...] = ()):
    """``(probs, grad_scores, grad_alpha)`` of ``(probs * upstream).sum()``; ``grad_alpha`` is ``None`` for fixed α."""
    scores = scores.detach().requires_grad_()
    probs, alpha = apply_with_alpha(kind, scores, alpha_shape)
    leaves = (scores,) if alpha is None else (scores, alpha)
    grads = torch.autograd.grad((probs * upstream).sum(), leaves)
    return probs.detach(), grads[0], grads[1] if alpha is not None else None


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("kind", EXTREME_KINDS)
def test_extreme_spreads_put_all_the_mass_on_the_maximum_with_zero_gradients(kind, dtype):
    """Every other entry at least 1e4 below the maximum, up to the dtype's range: p is exactly one-hot (the kernel once
    gave rows of zeros from ~1.7e7 in float32). Its Jacobian is zero there (g = 1 at the maximum and 0 elsewhere), and
    so is the α-gradient (log p = 0 at the maximum), exactly."""
    for magnitude in MAGNITUDES[dtype]:
        scores = torch.tensor(
            [
                [magnitude, 0.0, -magnitude, magnitude / 2, NEG_INF],
                [magnitude / 4, magnitude / 2, torch.finfo(dtype).min, -magnitude, magnitude],
                [-magnitude, -magnitude / 2, -magnitude / 4, -magnitude, NEG_INF],
            ],
            dtype=dtype,
        )
        probs, grad_scores, grad_alpha = gradients(kind, scores, randn(3, 5, seed=42, dtype=dtype))
        one_hot = torch.nn.functional.one_hot(torch.tensor([0, 4, 2]), 5).to(dtype)
        assert torch.equal(probs, one_hot), f"magnitude {magnitude:g}"
        assert torch.equal(grad_scores, torch.zeros_like(scores)), f"magnitude {magnitude:g}"
        assert grad_alpha is None or grad_alpha.eq(0).all(), f"magnitude {magnitude:g}"


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("kind", EXTREME_KINDS)
def test_infinite_and_huge_maxima_are_ties_with_everything_else_masked(kind, dtype):
    """+inf entries share a row's mass, as equal large finite scores do in the limit, and so do maxima that are huge
    next to the rest; −inf entries stay masked. Values and gradients (to the scores, finite, and to α) are those of the
    tied entries alone, a row of equal scores: p = 1/k, a Jacobian g (δ − 1/k) that is not zero, and an α-gradient that
    is zero up to rounding (p = 1/k does not depend on α)."""
    for magnitude in MAGNITUDES[dtype]:
        scores = torch.tensor(
            [
                [POS_INF, 0.0, POS_INF, NEG_INF, 5.0],
                [1.0, POS_INF, 2.0, torch.finfo(dtype).min, -magnitude],
                [magnitude, magnitude, -magnitude, magnitude, NEG_INF],
                [POS_INF, POS_INF, POS_INF, POS_INF, POS_INF],
            ],
            dtype=dtype,
        )
        ties = [[0, 2], [1], [0, 1, 3], [0, 1, 2, 3, 4]]
        upstream = randn(4, 5, seed=43, dtype=dtype)
        probs, grad_scores, grad_alpha = gradients(kind, scores, upstream)
        expected_probs, expected_scores = torch.zeros_like(probs), torch.zeros_like(grad_scores)
        expected_alpha = None if grad_alpha is None else torch.zeros_like(grad_alpha)
        for row, columns in enumerate(ties):
            tied = gradients(kind, torch.zeros(1, len(columns), dtype=dtype), upstream[row : row + 1, columns])
            expected_probs[row, columns], expected_scores[row, columns] = tied[0][0], tied[1][0]
            if grad_alpha is not None:
                expected_alpha += tied[2]
        # p = 1/k to a few roundings in each computation in its compute dtype (a division; the PyTorch iteration's
        # own, and its rescaling by Σp), then one rounding to the output dtype: 8 units of the first and 2 of the
        # second, relative. Each gradient is a sum of k ≤ 5 products of such terms with the upstream gradient
        # (|dp| ≤ 4): 32 units of compute rounding times max |dp|, and the output's rounding.
        compute_eps, output_eps = torch.finfo(compute_dtype(scores)).eps, torch.finfo(dtype).eps
        message = f"magnitude {magnitude:g}"
        torch.testing.assert_close(probs, expected_probs, rtol=8 * compute_eps + 2 * output_eps, atol=0, msg=message)
        gradient_tolerance = 32 * compute_eps * float(upstream.abs().max())
        torch.testing.assert_close(grad_scores, expected_scores, rtol=2 * output_eps, atol=gradient_tolerance)
        if grad_alpha is not None:
            torch.testing.assert_close(grad_alpha, expected_alpha, rtol=0, atol=gradient_tolerance)


@pytest.mark.parametrize("size", [7, 40])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("kind", EXTREME_KINDS)
def test_nan_makes_its_row_nan_and_leaves_every_other_row_alone(kind, dtype, size):
    """A NaN anywhere in a row makes the whole row NaN, as softmax does (the kernel dropped NaN entries silently; the
    PyTorch sort-based functions raised an IndexError), and so are its gradients. The other rows of the batch, of every
    kind (ordinary, masked, fully masked, +inf, huge spreads), and their gradients, are exactly those of the batch
    without the NaN rows. α is per row, so that each row's α-gradient is its own."""
    scores = randn(10, size, seed=44, scale=2.0, dtype=torch.float64)
    scores[1, 3] = NAN
    scores[2, ::3] = NEG_INF
    scores[2, 1::3] = torch.finfo(dtype).min
    scores[3] = NAN
    scores[4] = NEG_INF
    scores[4, -1] = NAN
    scores[5, ::2] = POS_INF
    scores[6, 0], scores[6, 1] = POS_INF, NAN
    scores[7] = NEG_INF
    scores[8, 0] = 1e4
    scores[9, ::2] = torch.finfo(dtype).min
    scores[9, -1] = NAN
    scores = scores.to(dtype)
    nan_rows = torch.tensor([False, True, False, True, True, False, True, False, False, True])
    upstream = randn(10, size, seed=45, dtype=dtype)

    probs, grad_scores, grad_alpha = gradients(kind, scores, upstream, alpha_shape=(10, 1))
    clean = gradients(kind, scores[~nan_rows], upstream[~nan_rows], alpha_shape=(int((~nan_rows).sum()), 1))

    assert probs[nan_rows].isnan().all() and grad_scores[nan_rows].isnan().all()
    assert not probs[~nan_rows].isnan().any() and grad_scores[~nan_rows].isfinite().all()
    assert torch.equal(probs[~nan_rows], clean[0]) and torch.equal(grad_scores[~nan_rows], clean[1])
    if grad_alpha is not None:
        assert grad_alpha[nan_rows].isnan().all() and torch.equal(grad_alpha[~nan_rows], clean[2])


# --- dim handling --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -2, -3])
@pytest.mark.parametrize("kind", [*KINDS, "per-row alpha"])
def test_any_dim_equals_moving_it_last(kind, dim):
    scores = randn(3, 4, 5, seed=34, scale=2.0).requires_grad_()
    upstream = randn(3, 4, 5, seed=35)
    alpha_shape = list(scores.shape)
    alpha_shape[dim] = 1
    alpha = (1 + torch.rand(alpha_shape, generator=torch.Generator().manual_seed(36))).requires_grad_()
    if kind == "per-row alpha":
        probs = entmax(scores, alpha, dim=dim)
        moved = entmax(scores.movedim(dim, -1), alpha.movedim(dim, -1), dim=-1).movedim(-1, dim)
    else:
        probs = apply(kind, scores, dim=dim)
        moved = apply(kind, scores.movedim(dim, -1), dim=-1).movedim(-1, dim)
    torch.testing.assert_close(probs, moved, rtol=0, atol=1e-6)
    (grad,) = torch.autograd.grad((probs * upstream).sum(), scores)
    (moved_grad,) = torch.autograd.grad((moved * upstream).sum(), scores)
    torch.testing.assert_close(grad, moved_grad, rtol=0, atol=1e-6)


@pytest.mark.parametrize(("dim", "alpha_shape"), [(-1, (3, 1)), (1, (3, 4)), (0, ())])
def test_alpha_with_fewer_dims_broadcasts_and_its_gradient_keeps_its_shape(dim, alpha_shape):
    scores = randn(2, 5, 3, 4, seed=38, scale=2.0)
    upstream = randn(2, 5, 3, 4, seed=39)
    alpha = (1 + torch.rand(alpha_shape, generator=torch.Generator().manual_seed(40))).requires_grad_()
    full_shape = list(scores.shape)
    full_shape[dim] = 1
    full = alpha.detach().expand(full_shape).clone().requires_grad_()
    probs, full_probs = entmax(scores, alpha, dim=dim), entmax(scores, full, dim=dim)
    torch.testing.assert_close(probs, full_probs, rtol=0, atol=0)
    (grad,) = torch.autograd.grad((probs * upstream).sum(), alpha)
    (full_grad,) = torch.autograd.grad((full_probs * upstream).sum(), full)
    assert grad.shape == alpha.shape
    torch.testing.assert_close(grad, full_grad.sum_to_size(alpha.shape), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dim", [3, -4, 10])
@pytest.mark.parametrize("kind", KINDS)
def test_out_of_range_dim_raises_index_error(kind, dim):
    with pytest.raises(IndexError, match="dim"):
        apply(kind, randn(2, 3, 4), dim=dim)


# --- α validation --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "alpha",
    [
        0.5,
        0.999,
        2.5,
        2.0 + 1e-6,
        float("nan"),
        torch.tensor([1.5, 2.5, 1.0]).view(1, 3, 1, 1),
        torch.tensor([0.9, 1.5, 1.0]).view(1, 3, 1, 1),
        torch.full((1, 1, 1, 6), 1.5),  # size 6 ≠ 1 along dim
        torch.full((1, 2, 3, 4, 1), 1.5),  # more dims than the scores
        torch.full((6,), 1.5),  # lines up with the last dim: one α per column, not per row
        torch.full((3, 1), 1.5),  # lines up with (4, 6): does not broadcast
    ],
    ids=[
        "0.5",
        "0.999",
        "2.5",
        "2+1e-6",
        "nan",
        "tensor>2",
        "tensor<1",
        "size!=1 along dim",
        "too many dims",
        "per column",
        "no broadcast",
    ],
)
def test_invalid_alpha_raises_value_error(alpha):
    with pytest.raises(ValueError, match="alpha"):
        entmax(randn(2, 3, 4, 6), alpha)


@pytest.mark.parametrize("alpha", ["1.5", None, True], ids=["text", "None", "bool"])
def test_alpha_of_another_type_is_refused_naming_it(alpha):
    with pytest.raises(TypeError, match="`alpha` must be a number in \\[1, 2\\] or a tensor"):
        entmax(randn(2, 6), alpha)


@pytest.mark.parametrize(
    "mapping", [lambda z: entmax(z, 1.3), sparsemax, entmax15], ids=["entmax", "sparsemax", "entmax15"]
)
@pytest.mark.parametrize("dtype", [torch.int64, torch.complex64, torch.bool])
def test_scores_that_are_not_floating_point_are_refused_naming_the_dtype(mapping, dtype):
    with pytest.raises(TypeError, match=f"`scores` must be a floating-point tensor, got {dtype}"):
        mapping(torch.zeros(2, 3, dtype=dtype))


@pytest.mark.parametrize("shape", [(2, 0), (0, 5), (3, 0, 4)])
@pytest.mark.parametrize(
    "mapping", [lambda z: entmax(z, 1.3), sparsemax, entmax15], ids=["entmax", "sparsemax", "entmax15"]
)
def test_empty_scores_give_an_empty_result_as_softmax_does(mapping, shape):
    scores = torch.zeros(shape, requires_grad=True)
    probs = mapping(scores)
    assert probs.shape == scores.shape
    probs.sum().backward()
    assert scores.grad.shape == scores.shape


@pytest.mark.parametrize("alpha", [1.0, 2.0, torch.tensor([1.0, 2.0, 1.5]).view(1, 3, 1, 1), torch.tensor(1.7)])
def test_boundary_and_broadcastable_alphas_are_accepted(alpha):
    probs = entmax(randn(2, 3, 4, 6, seed=37), alpha)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 3, 4), rtol=0, atol=1e-5)


def _row_with_smallest_positive_entry(alpha: float, others: list[float]) -> torch.Tensor:
    """A float32 row whose last entry is in the support with the smallest probability float32 can give it."""
    low, high = 0.0, 5.0
    for _ in range(80):
        middle = (low + high) / 2
        if entmax(torch.tensor([[*others, -middle]]), alpha)[0, -1] > 0:
            low = middle
        else:
            high = middle
    return torch.tensor([[*others, -low]])


@pytest.mark.parametrize("alpha", [1.3, 1.7, 1.9, 1.99])
@pytest.mark.parametrize("others", [[0.0], [0.0, -0.3, -0.5], [0.0, 0.0, 0.0, -0.01]])
def test_gradients_stay_finite_at_the_edge_of_the_support(alpha, others):
    """A probability of ~1e-9 on the support once made the α-gradient NaN: its base p^β rounded to 0.

    (The value itself is ill-conditioned there, since float32 cannot resolve a base of ~1e-8; it must be finite.)
    """
    scores = _row_with_smallest_positive_entry(alpha, others).requires_grad_()
    alphas = torch.tensor([[alpha]], requires_grad=True)
    probs = entmax(scores, alphas)
    assert 0 < probs[0, -1] < 1e-6
    (probs * torch.arange(1.0, scores.shape[-1] + 1)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert torch.isfinite(alphas.grad).all()


def test_check_alpha_can_be_skipped_by_callers_with_alpha_in_range():
    scores = randn(2, 3, 4, 6, seed=41)
    alpha = torch.tensor([1.2, 1.5, 1.9]).view(1, 3, 1, 1)
    torch.testing.assert_close(entmax(scores, alpha, check_alpha=False), entmax(scores, alpha), rtol=0, atol=0)
    with pytest.raises(ValueError, match="must be in"):
        entmax(scores, alpha + 1)
