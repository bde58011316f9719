"""Tests for the native CPU kernel: exact gradients, agreement with the float64 reference, fallback."""

import pytest
import torch
from conftest import tiny_model
from torch.autograd import gradcheck

from hf_entmax.kernels import cpu
from hf_entmax.modeling import entmax as entmax_module
from hf_entmax.modeling import modeling_adaptive_entmax_marian as modeling
from hf_entmax.modeling.entmax import EntmaxFunction, entmax


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
    grad_output = torch.randn(scores.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    gradients = []
    for function in (
        lambda a: cpu.NativeEntmaxFunction.apply(scores, a).reshape(-1, 7),
        lambda a: EntmaxFunction.apply(scores, a, 3).reshape(-1, 7),
    ):
        alpha = torch.tensor(1.0 + beta, dtype=torch.float64, requires_grad=True)
        (function(alpha) * grad_output.reshape(-1, 7)).sum().backward()
        gradients.append(alpha.grad)
    torch.testing.assert_close(gradients[0], gradients[1], rtol=1e-10, atol=1e-12)


def test_native_function_gradcheck_distinct_per_row_betas():
    rows = torch.randn(6, 9, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) * 2
    rows = rows.requires_grad_()
    alpha = torch.tensor([[1.05], [1.2], [1.5], [1.6], [1.9], [1.99]], dtype=torch.float64, requires_grad=True)
    assert gradcheck(cpu.NativeEntmaxFunction.apply, (rows, alpha))


def probabilities_and_gradients(function, scores, alpha, grad_output, dtype: torch.dtype):
    """``function(scores, alpha)`` in ``dtype``, and the gradients to both of ``(probs · grad_output).sum()``, in
    float64."""
    z = scores.to(dtype).detach().requires_grad_()
    a = alpha.to(dtype).detach().requires_grad_()
    probs = function(z, a)
    (probs * grad_output.to(dtype)).sum().backward()
    return probs.double(), z.grad.double(), a.grad.double()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_float32_kernel_matches_float64_reference(seed):
    """The fast path's probabilities and gradients (scores and per-head α) agree with float64 to 1e-5."""
    scores = attention_scores(seed, torch.float32, shape=(2, 4, 16, 64))
    alpha = torch.tensor([1.1, 1.37, 1.5, 1.9]).view(1, 4, 1, 1)
    grad_output = torch.randn(scores.shape, generator=torch.Generator().manual_seed(seed + 10))

    inputs = (scores, alpha, grad_output)
    fast = probabilities_and_gradients(lambda z, a: entmax(z, a), *inputs, torch.float32)
    assert fast[0].dtype == torch.float64 and cpu.kernel_available()
    reference = probabilities_and_gradients(lambda z, a: EntmaxFunction.apply(z, a, 3), *inputs, torch.float64)
    for fast_value, reference_value in zip(fast, reference, strict=True):
        torch.testing.assert_close(fast_value, reference_value, rtol=1e-5, atol=1e-5)
    assert fast[0][0, 2, -1].eq(0).all() and fast[1][0, 2, -1].eq(0).all()  # the fully masked row


@pytest.mark.parametrize("size", [1, 7, 8, 9, 63, 64, 65, 300])
def test_float32_kernel_on_rows_of_every_kind(size):
    """Rows that exercise every branch of the kernel's iteration: dense rows updated in place, sparse rows gathered
    and pruned (with a padded remainder), near-softmax to sparsemax, offsets, random and full masks."""
    generator = torch.Generator().manual_seed(size)
    betas = torch.tensor([0.001, 0.05, 0.1, 0.25, 0.37, 0.5, 0.63, 0.75, 0.9, 0.99, 1.0]).repeat_interleave(12)
    rows = betas.shape[0]
    scale = torch.tensor([0.3, 1.0, 3.0, 10.0]).repeat(rows // 4)[:, None]
    scores = torch.randn(rows, size, generator=generator, dtype=torch.float64) * scale
    scores = scores + 5 * torch.randn(rows, 1, generator=generator, dtype=torch.float64)
    scores = scores.masked_fill(torch.rand(rows, size, generator=generator) < 0.2, float("-inf"))
    scores[::17] = float("-inf")  # fully masked rows
    scores = scores.float().double()  # the same inputs for both precisions
    grad_output = torch.randn(rows, size, generator=generator, dtype=torch.float64)

    inputs = (scores, betas, grad_output)
    fast = probabilities_and_gradients(
        lambda z, b: cpu.NativeEntmaxFunction.apply(z, (b + 1)[:, None]), *inputs, torch.float32
    )
    reference = probabilities_and_gradients(
        lambda z, b: EntmaxFunction.apply(z, (b + 1)[:, None], 1), *inputs, torch.float64
    )
    torch.testing.assert_close(fast[0], reference[0], rtol=0, atol=1e-6)
    # Gradients of entries at the very edge of the support are ill-conditioned in float32 (g = p^(2 − α) of a tiny
    # p); 1e-4 still catches any structural mistake, which shows up as an error of order 0.1.
    for fast_value, reference_value in zip(fast[1:], reference[1:], strict=True):
        torch.testing.assert_close(fast_value, reference_value, rtol=1e-4, atol=1e-4)


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
    scores = scores.float().double()
    fast = cpu.NativeEntmaxFunction.apply(scores.float(), (betas + 1)[:, None]).double()
    reference = EntmaxFunction.apply(scores, (betas.double() + 1)[:, None], 1)
    torch.testing.assert_close(fast, reference, rtol=0, atol=1e-6)


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


@pytest.mark.parametrize("beta", [0.0, 0.3, 0.5, 0.8, 1.0])
def test_fused_attention_gradcheck(beta):
    """Gradients of both outputs (the attention output and the returned probabilities) to the query, key, value and
    per-head α, through a causal and padding mask with a fully masked row, with more keys than queries."""
    generator = torch.Generator().manual_seed(int(beta * 10))
    query, key, value = (
        torch.randn(2, 3, length, 4, generator=generator, dtype=torch.float64).requires_grad_() for length in (3, 5, 5)
    )
    alpha = (1 + beta + torch.tensor([0.0, 0.04, -0.03]).clamp(min=-beta, max=1 - beta)).double().view(1, 3, 1, 1)
    # gradcheck's central step would leave [1, 2] at the ends (see test_alpha_gradient_at_the_ends_matches...).
    alpha.requires_grad_(beta not in (0.0, 1.0))
    mask = padding_and_causal_mask(torch.float64, 2, 3, 5)
    assert gradcheck(
        lambda q, k, v, a: cpu.NativeEntmaxAttentionFunction.apply(q, k, v, a, mask), (query, key, value, alpha)
    )


def composed_attention(query, key, value, alpha, mask):
    """The model's attention as separate operations on the PyTorch implementation: the reference."""
    probs = EntmaxFunction.apply(torch.matmul(query, key.transpose(-1, -2)) + mask, alpha, 3)
    return torch.matmul(probs, value), probs


@pytest.mark.parametrize("queries", [1, 16])
def test_float32_fused_attention_matches_float64_composed_attention(queries):
    """Decoding (one query) and training shapes: outputs, probabilities and every gradient agree to 1e-5."""
    generator = torch.Generator().manual_seed(queries)
    inputs = [torch.randn(2, 4, length, 8, generator=generator) for length in (queries, 40, 40)]
    inputs[0] = inputs[0] * 0.7  # (already scaled)
    alpha = torch.tensor([1.05, 1.3, 1.5, 1.9]).view(1, 4, 1, 1)
    upstream = [torch.randn(2, 4, queries, size, generator=generator) for size in (8, 40)]
    results = []
    for function, dtype in ((cpu.native_entmax_attention, torch.float32), (composed_attention, torch.float64)):
        leaves = [tensor.detach().to(dtype).requires_grad_() for tensor in (*inputs, alpha)]
        outputs = function(*leaves, padding_and_causal_mask(dtype, 2, queries, 40))
        sum((output * grad).sum() for output, grad in zip(outputs, upstream, strict=True)).backward()
        results.append([tensor.double() for tensor in (*outputs, *(leaf.grad for leaf in leaves))])
    for fast, reference in zip(*results, strict=True):
        torch.testing.assert_close(fast, reference, rtol=1e-5, atol=1e-5)
    assert results[0][1][0, :, 0].eq(0).all()  # the fully masked row: zeros, no NaN


def test_model_attention_runs_fused_only_where_it_applies(monkeypatch):
    """Fused wherever the kernel applies (training included), composed where dropout is on the probabilities."""
    calls = []
    original = modeling.native_entmax_attention
    monkeypatch.setattr(modeling, "native_entmax_attention", lambda *args: calls.append(1) or original(*args))
    input_ids = torch.tensor([[5, 6, 7, 8, 1], [9, 10, 1, 0, 0]])
    decoder_input_ids = torch.tensor([[0, 11, 12], [0, 13, 14]])
    model = tiny_model().train()
    model(input_ids, decoder_input_ids=decoder_input_ids, labels=decoder_input_ids).loss.backward()
    assert len(calls) == model.config.encoder_layers + 2 * model.config.decoder_layers  # self- and cross-attention
    calls.clear()
    tiny_model(attention_dropout=0.1).train()(input_ids, decoder_input_ids=decoder_input_ids)
    assert not calls


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_take_the_pytorch_implementation_and_agree_with_the_kernel():
    scores = attention_scores(seed=4, dtype=torch.float32, shape=(2, 4, 16, 64))
    alpha = torch.tensor([1.1, 1.37, 1.5, 1.9]).view(1, 4, 1, 1)
    assert cpu.native_entmax(scores.cuda(), alpha.cuda(), 3) is None
    gpu, native = (entmax(scores.to(device), alpha.to(device)).cpu() for device in ("cuda", "cpu"))
    torch.testing.assert_close(gpu, native, rtol=1e-5, atol=1e-5)


def test_kernel_is_used_for_cpu_tensors(monkeypatch):
    calls = []
    original = cpu.native_entmax
    monkeypatch.setattr(entmax_module, "native_entmax", lambda *args: calls.append(1) or original(*args))
    entmax(torch.randn(3, 8), torch.tensor(1.4))
    assert calls


def test_model_outputs_are_the_same_with_and_without_the_kernel(monkeypatch):
    model = tiny_model()
    input_ids = torch.tensor([[5, 6, 7, 8, 1], [9, 10, 1, 0, 0]])
    attention_mask = (input_ids != 0).long()
    decoder_input_ids = torch.tensor([[0, 11, 12], [0, 13, 14]])
    model.eval()
    with torch.no_grad():
        fast = model(input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
        monkeypatch.setattr(entmax_module, "native_entmax", None)
        monkeypatch.setattr(modeling, "native_entmax_attention", None)
        reference = model(input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
    torch.testing.assert_close(fast, reference, rtol=1e-5, atol=1e-5)


def test_failed_build_warns_once_and_falls_back(tmp_path, monkeypatch):
    broken = tmp_path / "broken.cpp"
    broken.write_text("this is not C++\n")
    monkeypatch.setattr(cpu, "SOURCE", broken)
    monkeypatch.setattr(cpu, "_state", {})
    monkeypatch.setenv("HF_ENTMAX_CACHE", str(tmp_path / "cache"))
    scores = torch.randn(4, 10)
    with pytest.warns(UserWarning, match="fast CPU kernel could not be built"):
        assert cpu.native_entmax(scores, 1.5, 1) is None
    assert cpu.native_entmax(scores, 1.5, 1) is None  # no second attempt, no second warning
    monkeypatch.setattr(entmax_module, "native_entmax", cpu.native_entmax)
    torch.testing.assert_close(entmax(scores, 1.5).sum(-1), torch.ones(4))


def test_native_kernel_can_be_turned_off(monkeypatch):
    monkeypatch.setattr(cpu, "_state", {})
    monkeypatch.setenv("HF_ENTMAX_NATIVE", "0")
    assert not cpu.kernel_available()
    assert cpu.native_entmax(torch.randn(2, 5), 1.5, 1) is None
