"""The model under torch.compile(fullgraph=True) and torch.export: the Newton iteration runs a fixed number of steps
when traced (it cannot stop on a value it has not computed), so both trace a model with learned α."""

import pytest
import torch
from helpers import tiny_model

from hf_entmax.modeling import entmax as entmax_module
from hf_entmax.modeling.entmax import entmax


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_traced_iteration_gives_what_the_stopping_one_gives(dtype, monkeypatch):
    """Rows of 2–512 entries, spreads 0.1–100, α across [1, 2] and ramps: the fixed number of steps reaches the same
    answer, up to a few roundings of probabilities in [0, 1] (16 ε, as the iteration's own tolerance)."""
    monkeypatch.setattr(entmax_module, "native_entmax", None)  # the PyTorch path, which traced code runs
    generator = torch.Generator().manual_seed(0)
    rows = [torch.randn(16, n, generator=generator, dtype=dtype) * std for n in (2, 64, 512) for std in (0.1, 3, 100)]
    rows += [torch.linspace(0, -5, 512, dtype=dtype)[None], -torch.logspace(-6, 2, 512, dtype=dtype)[None]]
    for alpha in (1.01, 1.3, 1.5, 1.9, 2.0):
        stopping = [entmax(scores, torch.tensor(alpha, dtype=dtype)) for scores in rows]
        with monkeypatch.context() as tracing:
            tracing.setattr(torch.compiler, "is_compiling", lambda: True)
            traced = [entmax(scores, torch.tensor(alpha, dtype=dtype)) for scores in rows]
        for expected, actual in zip(stopping, traced, strict=True):
            torch.testing.assert_close(actual, expected, rtol=0, atol=16 * torch.finfo(dtype).eps)


def model_inputs() -> dict[str, torch.Tensor]:
    input_ids = torch.tensor([[5, 6, 7, 8, 1], [9, 10, 11, 1, 0]])
    return {
        "input_ids": input_ids,
        "attention_mask": (input_ids != 0).long(),
        "decoder_input_ids": torch.tensor([[0, 5, 6], [0, 7, 8]]),
        "use_cache": False,
    }


# Eager runs the native kernel, traced code the PyTorch path: float32 rounding of two orders of summation, through
# 2 + 2 layers, on logits of size ~1.
LOGIT_TOLERANCE = 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("scaling", [None, "asentmax"])
def test_torch_export_of_a_model_with_learned_alpha(scaling):
    model = tiny_model(init_std=0.5, attention_scaling=scaling)
    inputs = model_inputs()
    with torch.no_grad():
        expected = model(**inputs).logits
    exported = torch.export.export(model, (), inputs)
    actual = exported.module()(**inputs).logits
    torch.testing.assert_close(actual, expected, rtol=0, atol=LOGIT_TOLERANCE)


@pytest.mark.slow
def test_fullgraph_compile_of_a_model_with_learned_alpha():
    model = tiny_model(init_std=0.5)
    inputs = model_inputs()
    with torch.no_grad():
        expected = model(**inputs).logits
        actual = torch.compile(model, fullgraph=True, backend="eager")(**inputs).logits
    torch.testing.assert_close(actual, expected, rtol=0, atol=LOGIT_TOLERANCE)


class Logits(torch.nn.Module):
    """The model's forward as a function of tensors only, as ONNX takes it."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "decoder_input_ids": decoder_input_ids}
        return self.model(**inputs, use_cache=False).logits


@pytest.mark.slow
def test_onnx_export_runs_in_onnxruntime(tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    model = Logits(tiny_model(init_std=0.5))
    inputs = model_inputs()
    names = ["input_ids", "attention_mask", "decoder_input_ids"]
    arguments = tuple(inputs[name] for name in names)
    with torch.no_grad():
        expected = model(*arguments)
    program = torch.onnx.export(model, arguments, dynamo=True, input_names=names)
    program.save(tmp_path / "model.onnx")
    session = onnxruntime.InferenceSession(tmp_path / "model.onnx")
    feeds = {name: tensor.numpy() for name, tensor in zip(names, arguments, strict=True)}
    (actual,) = session.run(None, feeds)
    torch.testing.assert_close(torch.from_numpy(actual), expected, rtol=0, atol=LOGIT_TOLERANCE)
