"""The Triton kernels of α-entmax attention (hf_entmax/kernels/triton_attention.py) on CPU tensors, run by Triton's
interpreter, against the PyTorch implementation in float64, and the model on them.

The interpreter runs kernels only in a process that imported triton with ``TRITON_INTERPRET=1`` set: triton.jit
decides at decoration, and triton.language's own helpers (``tl.max``, ``tl.sum``, ...) are decorated when triton is
imported, which in a whole-suite run has happened long before (test_triton_attention.py imports it). So this file
runs only in a process started with the variable, by `test_triton_attention.py::test_kernels_in_the_interpreter` (or
by hand: ``TRITON_INTERPRET=1 python -m pytest tests/test_triton_attention_interpreted.py``); elsewhere it is skipped,
and the variable reaches nothing else. Shapes are small and blocks 16 × 16 (the smallest ``tl.dot`` takes), so that
every case still crosses block boundaries: the interpreter runs each tile operation in numpy.
"""

import importlib.util

import pytest
import torch
from helpers import tiny_model
from torch.autograd import gradcheck

from hf_entmax.kernels import dispatch
from hf_entmax.modeling import modeling_adaptive_entmax_marian as modeling
from hf_entmax.modeling.entmax import EntmaxFunction
from hf_entmax.modeling.positions import distance_bias


triton = pytest.importorskip("triton")
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402 (only where triton is installed)


if not isinstance(triton.language.cdiv, InterpretedFunction):  # triton was imported without TRITON_INTERPRET=1
    pytest.skip(
        "run by test_triton_attention.py::test_kernels_in_the_interpreter, in a process with TRITON_INTERPRET=1",
        allow_module_level=True,
    )

from hf_entmax.kernels import triton_attention as kernels  # noqa: E402 (interpreted, now that triton is)


BLOCK = 16
# Accuracy against the float64 reference, relative to the largest entry of the tensor compared. float32: the target
# of issue 19; the kernels' own error is float32 rounding (u = 6e-8) through sums of at most a few dozen terms and
# the renormalised Newton iteration, ~1e-6 on these shapes. float64: the α-gradient's series in p^β − 1 is cut after
# 10 terms below |p^β − 1| = 0.1 (error ≤ 0.1^10 relative), and kernel and reference may round an entry to either side
# of that switch. Half precision: the inputs are the same rounded values in both; p, g and the gradient to the scores
# are rounded to the inputs' dtype before their products (unit roundoff u: 2^-11 float16, 2^-8 bfloat16), and so is
# the result, so 8u bounds the error of every sum of products.
TOLERANCE = {
    torch.float32: 1e-5,
    torch.float64: 1e-9,
    torch.float16: 8 * 2.0**-11,
    torch.bfloat16: 8 * 2.0**-8,
}
# Interpreted, the kernels evaluate both sides of every tl.where in numpy, which warns where the unused side takes the
# log of 0 (masked entries, rows without support) as IEEE arithmetic on a GPU silently does.
pytestmark = [
    pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
]


def reference_attention(query, key, value, alpha, mask=None, causal=False) -> torch.Tensor:
    """α-entmax attention in float64 by the PyTorch implementation (`EntmaxFunction`, not the native kernel)."""
    query, key, value = query.double(), key.double(), value.double()
    scores = query @ key.transpose(-1, -2)  # (B, H, Lq, Lk)
    if mask is not None:
        scores = scores + mask.double().masked_fill(mask <= torch.finfo(mask.dtype).min, float("-inf"))
    if causal:
        query_len, key_len = scores.shape[-2:]
        later = torch.arange(key_len)[None, :] > torch.arange(query_len)[:, None] + key_len - query_len
        scores = scores.masked_fill(later, float("-inf"))
    alpha = alpha.double().view(1, -1, 1, 1) if isinstance(alpha, torch.Tensor) else torch.tensor(float(alpha))
    return EntmaxFunction.apply(scores, alpha.double(), 3) @ value


def attention_inputs(batch, heads, query_len, key_len, head_dim=8, dtype=torch.float32, seed=0):
    """Query (scaled, with a spread of 1.5: rows from nearly dense to sparse), key and value."""
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, heads, query_len, head_dim, generator=generator) * 1.5
    key, value = (torch.randn(batch, heads, key_len, head_dim, generator=generator) for _ in range(2))
    return tuple(tensor.to(dtype) for tensor in (query, key, value))


def assert_close(actual: torch.Tensor, expected: torch.Tensor, tolerance: float, what: str) -> None:
    assert torch.isfinite(actual).all(), what
    error = (actual.double() - expected).abs().max().item()
    scale = max(expected.abs().max().item(), 1.0)
    assert error <= tolerance * scale, f"{what}: error {error:.3g}, scale {scale:.3g}"


def check_against_reference(query, key, value, alpha, mask=None, causal=False):
    """Forward and every gradient (query, key, value, α) of the kernels against the float64 reference."""
    tolerance = TOLERANCE[query.dtype]
    leaves = [tensor.detach().clone().requires_grad_() for tensor in (query, key, value, alpha)]
    output = kernels.entmax_attention(*leaves, mask, causal, block_m=BLOCK, block_n=BLOCK)
    upstream = torch.randn(output.shape, generator=torch.Generator().manual_seed(1)).to(output.dtype)
    grads = torch.autograd.grad(output, leaves, upstream)
    reference_leaves = [tensor.detach().double().requires_grad_() for tensor in (query, key, value, alpha)]
    expected = reference_attention(*reference_leaves, mask, causal)
    expected_grads = torch.autograd.grad(expected, reference_leaves, upstream.double())
    assert_close(output, expected, tolerance, "output")
    for name, grad, expected_grad in zip(("query", "key", "value", "alpha"), grads, expected_grads, strict=True):
        assert_close(grad, expected_grad, tolerance, f"gradient to the {name}")
    return output, grads


def key_padding_mask(batch, key_len, lengths, dtype=torch.float32) -> torch.Tensor:
    """(B, 1, 1, Lk): 0 on each sequence's first ``lengths[b]`` keys, the dtype's lowest value after (as Marian's)."""
    padded = torch.arange(key_len)[None, :] >= torch.tensor(lengths)[:, None]
    return torch.zeros(batch, 1, 1, key_len, dtype=dtype).masked_fill(padded[:, None, None, :], torch.finfo(dtype).min)


@pytest.mark.slow
@pytest.mark.slow
def test_cross_attention_with_key_padding_and_alpha_per_head():
    # α = 1 exactly (softmax, one exact Newton step), 1.001 (the α-gradient's series), 1.5 and 2 (sparsemax).
    query, key, value = attention_inputs(2, 4, 20, 37)
    alpha = torch.tensor([1.0, 1.001, 1.5, 2.0])
    check_against_reference(query, key, value, alpha, key_padding_mask(2, 37, [37, 23]))


@pytest.mark.slow
def test_causal_self_attention_and_cached_keys():
    query, key, value = attention_inputs(1, 2, 33, 33, seed=2)
    check_against_reference(query, key, value, torch.tensor([1.2, 1.7]), causal=True)
    # Five new queries after sixteen cached keys: query i sees key j ≤ i + 16.
    query, key, value = attention_inputs(1, 2, 5, 21, seed=3)
    check_against_reference(query, key, value, torch.tensor([1.2, 1.7]), causal=True)


def test_alibi_distance_bias_per_head_and_query():
    """ALiBi/NAPE positions reach the kernel as part of the additive mask: finite, per head and query (one head with
    slope 0, as NAPE's position-free heads), added to key padding, with and without the causal mask."""
    query, key, value = attention_inputs(2, 2, 20, 20, seed=5)
    bias = distance_bias((0.5, 0.0), 0, 20, 20, torch.float32, "cpu")  # (1, 2, 20, 20)
    alpha = torch.tensor([1.3, 1.8])
    check_against_reference(query, key, value, alpha, key_padding_mask(2, 20, [20, 13]) + bias)
    check_against_reference(query, key, value, alpha, bias, causal=True)


def test_decoding_one_query():
    query, key, value = attention_inputs(2, 2, 1, 40, seed=4)
    check_against_reference(query, key, value, torch.tensor([1.1, 1.6]), key_padding_mask(2, 40, [40, 9]))


@pytest.mark.slow
def test_fully_masked_rows_give_zeros():
    """Rows whose keys are all masked, by −inf, by float32's lowest value or with the whole sequence masked: zeros and
    zero gradients, no NaN; the other rows as the reference."""
    query, key, value = attention_inputs(2, 2, 18, 20, seed=5)
    mask = torch.zeros(2, 1, 18, 20)
    mask[0, :, 3] = float("-inf")
    mask[0, :, 17] = torch.finfo(torch.float32).min
    mask[1] = torch.finfo(torch.float32).min
    mask[0, :, 5, 7:] = float("-inf")  # and a row with a few keys
    output, (grad_query, *_) = check_against_reference(query, key, value, torch.tensor([1.0, 1.5]), mask)
    empty = torch.zeros(2, 18, dtype=torch.bool)
    empty[0, [3, 17]] = True
    empty[1] = True
    for rows, batch in ((empty[0], 0), (empty[1], 1)):
        assert not output.detach()[batch][:, rows].any() and not grad_query[batch][:, rows].any()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs(dtype):
    """float16/bfloat16 queries, keys and values (scores in float32), against the reference on the same values."""
    query, key, value = attention_inputs(1, 2, 20, 24, dtype=dtype, seed=6)
    output, _ = check_against_reference(query, key, value, torch.tensor([1.3, 1.8]), key_padding_mask(1, 24, [21]))
    assert output.dtype == dtype


def test_float64_gradcheck():
    """The kernels in float64 (Triton's interpreter runs them in numpy) against finite differences, α included (in
    the open interval, where a central difference stays in [1, 2])."""
    query, key, value = (tensor.requires_grad_() for tensor in attention_inputs(1, 2, 3, 5, 4, torch.float64, seed=7))
    alpha = torch.tensor([1.3, 1.8], dtype=torch.float64, requires_grad=True)
    mask = key_padding_mask(1, 5, [4], torch.float64)

    def attention(query, key, value, alpha):
        return kernels.entmax_attention(query, key, value, alpha, mask, block_m=BLOCK, block_n=BLOCK)

    # Fast mode (one random direction per input) keeps the interpreted forward calls to a handful.
    assert gradcheck(attention, (query, key, value, alpha), fast_mode=True)
    assert gradcheck(lambda *inputs: attention(*inputs[:3], alpha), (query, key, value), fast_mode=True)


@pytest.mark.slow
def test_tiles_below_the_threshold_are_skipped():
    """A key block whose scores are far below every row's threshold is never read for its values: its values are NaN
    here, and the output and every gradient stay finite (p = 0 there, but 0 · NaN would be NaN)."""
    query, key, value = attention_inputs(1, 1, 16, 32, seed=8)
    direction = torch.nn.functional.normalize(torch.randn(8, generator=torch.Generator().manual_seed(9)), dim=0)
    query = direction.expand(1, 1, 16, 8) * 3 + 0.1 * query
    key = torch.cat([direction.expand(1, 1, 16, 8) + 0.3 * key[:, :, :16], -direction.expand(1, 1, 16, 8)], dim=2)
    poisoned = value.clone()
    poisoned[:, :, 16:] = float("nan")
    alpha = torch.tensor([2.0], requires_grad=True)
    leaves = [tensor.clone().requires_grad_() for tensor in (query, key, poisoned)]
    output = kernels.entmax_attention(*leaves, alpha, block_m=BLOCK, block_n=BLOCK)
    grads = torch.autograd.grad(output.sum(), [*leaves, alpha])
    expected = reference_attention(query, key, value.masked_fill(poisoned.isnan(), 0.0), alpha.detach())
    assert_close(output.detach(), expected, TOLERANCE[torch.float32], "output")
    assert all(torch.isfinite(grad).all() for grad in grads)
    assert not grads[1][:, :, 16:].any() and not grads[2][:, :, 16:].any()


def test_entmax_attention_checks_its_inputs(monkeypatch):
    query, key, value = attention_inputs(1, 2, 3, 5)
    cases = {
        "(batch, heads, length, head_dim)": (query[0], key, value, 1.5),
        "does not fit": (query, key[:, :1], value[:, :1], 1.5),
        "must share one of": (query, key.double(), value, 1.5),
        "one per head": (query, key, value, torch.full((3,), 1.5)),
    }
    for message, arguments in cases.items():
        with pytest.raises(ValueError, match=message):
            kernels.entmax_attention(*arguments)
    with pytest.raises(ValueError, match="additive float mask"):
        kernels.entmax_attention(query, key, value, 1.5, torch.ones(1, 1, 1, 5, dtype=torch.bool))
    # Imported without TRITON_INTERPRET, the kernels are for GPUs, which take CUDA tensors only.
    spec = importlib.util.find_spec("hf_entmax.kernels.triton_attention")
    compiled = importlib.util.module_from_spec(spec)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    spec.loader.exec_module(compiled)
    with pytest.raises(ValueError, match="CUDA device"):
        compiled.entmax_attention(query, key, value, 1.5)


@pytest.mark.slow
def test_model_runs_on_the_triton_kernel(monkeypatch, batch):
    """The model's attention through the Triton route (CPU tensors taking it instead of the native kernel's): the same
    loss and gradients as the PyTorch operations; weights wanted (output_attentions) or attention dropout in training
    go to PyTorch."""
    monkeypatch.setattr(dispatch, "TRITON_DEVICE_TYPES", ("cpu",))  # the interpreter's tensors
    monkeypatch.setenv("HF_ENTMAX_TRITON", "1")
    calls = []
    original = kernels.entmax_attention
    monkeypatch.setattr(kernels, "entmax_attention", lambda *args: calls.append(1) or original(*args))
    model = tiny_model(alpha_init="random")

    def loss_and_alpha_grads():
        model.zero_grad()
        loss = model(**batch, labels=batch["decoder_input_ids"]).loss
        loss.backward()
        return loss.detach(), [parameter.grad for name, parameter in model.named_parameters() if "alpha" in name]

    loss, alpha_grads = loss_and_alpha_grads()
    assert len(calls) == 6  # encoder self-attention, decoder self- and cross-attention, 2 layers each
    monkeypatch.delenv("HF_ENTMAX_TRITON")
    expected_loss, expected_alpha_grads = loss_and_alpha_grads()
    assert len(calls) == 6
    assert_close(loss, expected_loss.double(), TOLERANCE[torch.float32], "loss")
    for grad, expected in zip(alpha_grads, expected_alpha_grads, strict=True):
        assert_close(grad, expected.double(), TOLERANCE[torch.float32], "gradient to the α logits")

    monkeypatch.setenv("HF_ENTMAX_TRITON", "1")
    with torch.no_grad():
        outputs = model(**batch, output_attentions=True)
    assert len(calls) == 6 and all(weights is not None for weights in outputs.encoder_attentions)
    model.config.attention_dropout = 0.1
    for module in model.modules():
        if isinstance(module, modeling.AdaptiveEntmaxMarianAttention):
            module.dropout = 0.1
    model.train()
    model(**batch, labels=batch["decoder_input_ids"])
    assert len(calls) == 6
