"""The model under torch.compile(fullgraph=True), torch.export and ONNX: the Newton iteration runs a fixed number of
steps when traced (it cannot stop on a value it has not computed), so a model with learned α traces whole: its forward
(static and dynamic shapes), a training step, and generation whose decoding steps are compiled with a static cache.

Graph capture is what these tests check, so they compile with backend="eager" or "aot_eager": inductor's cold
compilation of even the tiny model takes about two minutes on two cores (benchmarks/bench_compile.py runs it)."""

import pytest
import torch
from helpers import tiny_model
from torch.export import Dim
from transformers import CompileConfig, DynamicCache, StaticCache
from transformers.integrations.executorch import Seq2SeqLMExportableModule

from hf_entmax import AdaptiveEntmaxMarianMTModel
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


def model_inputs(input_ids: list[list[int]] | None = None, decoder_input_ids: list[list[int]] | None = None) -> dict:
    """A padded batch for the forward (by default 2 sentences of 5 tokens, 3 target tokens); pad is 0."""
    input_ids = torch.tensor(input_ids or [[5, 6, 7, 8, 1], [9, 10, 11, 1, 0]])
    return {
        "input_ids": input_ids,
        "attention_mask": (input_ids != 0).long(),
        "decoder_input_ids": torch.tensor(decoder_input_ids or [[0, 5, 6], [0, 7, 8]]),
        "use_cache": False,
    }


def other_shapes() -> list[dict]:
    """Batches of other sizes and lengths than `model_inputs`' (what a program traced with dynamic shapes must run)."""
    return [
        model_inputs([[5, 6, 7, 8, 9, 10, 1], [9, 10, 11, 1, 0, 0, 0], [12, 1, 0, 0, 0, 0, 0]], [[0, 5, 6, 7, 8]] * 3),
        model_inputs([[13, 1]], [[0]]),
    ]


# Batch, source and target lengths free; the attention mask shares the source's.
BATCH, SOURCE, TARGET = Dim("batch"), Dim("source"), Dim("target")
DYNAMIC_SHAPES = {
    "input_ids": {0: BATCH, 1: SOURCE},
    "attention_mask": {0: BATCH, 1: SOURCE},
    "decoder_input_ids": {0: BATCH, 1: TARGET},
}


def one_layer_model(**overrides) -> AdaptiveEntmaxMarianMTModel:
    """The tiny model with one layer each side: every attention type is still there (encoder self, decoder self,
    cross), and tracing, which unrolls the Newton steps of every attention module, takes half as long as with 2 + 2."""
    return tiny_model(init_std=0.5, encoder_layers=1, decoder_layers=1, **overrides)


# Eager runs the native kernel, traced code the PyTorch path: float32 rounding of two orders of summation, through
# 2 + 2 layers, on logits of size ~1.
LOGIT_TOLERANCE = 1e-4


# Sinusoidal positions are the next test's (its model is the default one, with ASEntmax).
@pytest.mark.slow
@pytest.mark.parametrize(
    ("scaling", "positions", "directions", "cross_positions", "layer_style"),
    [
        ("asentmax", "nape", "both", "none", "gemma2"),
        (None, "alibi", "split", "alibi", "pre_norm"),
        (None, "rope", "both", "rope", "marian"),
    ],
)
def test_torch_export_of_a_model_with_learned_alpha(scaling, positions, directions, cross_positions, layer_style):
    model = one_layer_model(
        attention_scaling=scaling,
        position_embedding_type=positions,
        encoder_alibi_directions=directions,
        cross_attention_positions=cross_positions,
        layer_style=layer_style,
    )
    inputs = model_inputs()
    with torch.no_grad():
        expected = model(**inputs).logits
    exported = torch.export.export(model, (), inputs)
    actual = exported.module()(**inputs).logits
    torch.testing.assert_close(actual, expected, rtol=0, atol=LOGIT_TOLERANCE)


@pytest.mark.slow
def test_torch_export_with_dynamic_batch_and_lengths():
    """One program for every batch size and length (ASEntmax included: it counts each query's keys from the mask)."""
    model = one_layer_model(attention_scaling="asentmax")
    exported = torch.export.export(model, (), model_inputs(), dynamic_shapes={**DYNAMIC_SHAPES, "use_cache": None})
    for inputs in [model_inputs(), *other_shapes()]:
        with torch.no_grad():
            expected = model(**inputs).logits
        actual = exported.module()(**inputs).logits
        torch.testing.assert_close(actual, expected, rtol=0, atol=LOGIT_TOLERANCE)


@pytest.mark.slow
def test_encoder_and_decoder_step_export_with_a_static_cache():
    """transformers' ExecuTorch route for seq2seq models: the encoder exported with a dynamic length, one decoding step
    with a static cache. Fed a target token by token, the exported step gives the logits of the eager forward over the
    whole target, for sources of two lengths (the cache restarts at position 0)."""
    model = one_layer_model(attention_scaling="asentmax")
    sources = [torch.tensor([[5, 6, 7, 8, 9, 1]]), torch.tensor([[11, 12, 1]])]
    exportable = Seq2SeqLMExportableModule(model, max_hidden_seq_length=32, max_cache_length=16)
    exportable.export(encoder_input_ids=sources[0])
    encoder, decoder_step = exportable.exported_encoder.module(), exportable.exported_decoder.module()
    target = [0, 5, 9, 13, 17, 21]
    for source in sources:
        with torch.no_grad():
            expected = model(input_ids=source, decoder_input_ids=torch.tensor([target]), use_cache=False).logits[0]
        encoded = encoder(source)
        for position, token in enumerate(target):
            logits = decoder_step(torch.tensor([[token]]), encoded, torch.tensor([position]))[0, -1]
            torch.testing.assert_close(logits, expected[position], rtol=0, atol=LOGIT_TOLERANCE)


@pytest.mark.slow
def test_fullgraph_compile_of_a_model_with_learned_alpha():
    model = one_layer_model()
    inputs = model_inputs()
    with torch.no_grad():
        expected = model(**inputs).logits
        actual = torch.compile(model, fullgraph=True, backend="eager")(**inputs).logits
    torch.testing.assert_close(actual, expected, rtol=0, atol=LOGIT_TOLERANCE)


@pytest.mark.slow
def test_fullgraph_compiled_training_step_gives_the_eager_gradients():
    """Forward and backward through AOTAutograd (α's and ASEntmax's gradients included), as a compiled training step
    runs them; dropout off, so that both see the same function."""
    model = one_layer_model(attention_scaling="asentmax", dropout=0.0)
    inputs = model_inputs()
    inputs["labels"] = inputs.pop("decoder_input_ids")
    model.train()
    gradients = []
    for forward in (model, torch.compile(model, fullgraph=True, backend="aot_eager")):
        model.zero_grad()
        forward(**inputs).loss.backward()
        parameters = model.named_parameters()
        gradients.append({name: weight.grad.clone() for name, weight in parameters if weight.grad is not None})
    expected, actual = gradients
    assert actual.keys() == expected.keys()
    assert any("alpha_logits" in name for name in actual) and any("scale_beta" in name for name in actual)
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=0, atol=LOGIT_TOLERANCE, msg=name)


# --- generation --------------------------------------------------------------------------------------------------


def source_batch(input_ids: list[list[int]]) -> dict[str, torch.Tensor]:
    input_ids = torch.tensor(input_ids)
    return {"input_ids": input_ids, "attention_mask": (input_ids != 0).long()}


# A random model repeats its favourite token; forbidding repeats makes the search walk down each step's ranking, so
# that equal tokens say more than equal favourites. A fixed length makes the two calls' shapes equal.
GENERATION = dict(
    max_new_tokens=10,
    min_new_tokens=10,
    no_repeat_ngram_size=1,
    do_sample=False,
    output_scores=True,
    return_dict_in_generate=True,
)
SOURCES = [[5, 6, 7, 8, 9, 1], [10, 11, 12, 1, 0, 0]]
OTHER_SOURCES = [[14, 15, 1, 0, 0, 0], [16, 17, 18, 19, 20, 1]]  # the same shape, other tokens and padding


def assert_same_generation(actual, expected) -> None:
    """The same tokens, and scores equal up to the rounding of eager (native kernel) vs traced (PyTorch) attention."""
    assert torch.equal(actual.sequences, expected.sequences)
    for actual_scores, expected_scores in zip(actual.scores, expected.scores, strict=True):
        torch.testing.assert_close(actual_scores, expected_scores, rtol=0, atol=LOGIT_TOLERANCE)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("scaling", "positions", "cross_positions", "layer_style"),
    [
        (None, "sinusoidal", "none", "marian"),
        ("asentmax_per_token", "nape", "nape", "gemma2"),
        ("ssmax", "rope", "rope", "pre_norm"),
    ],
)
def test_compiled_static_cache_greedy_decoding_gives_the_eager_tokens(
    scaling, positions, cross_positions, layer_style
):
    """transformers' own path: with a static cache, generate compiles the decoding step (on accelerators; the
    CompileConfig flag forces it on the CPU, as transformers' tests do), with fullgraph=True and no recompilation for
    a second batch of the same shape. Relative positions number the queries from the static cache's count of tokens,
    not from its (fixed) length, in self- and cross-attention."""
    torch.compiler.reset()
    model = one_layer_model(
        attention_scaling=scaling,
        position_embedding_type=positions,
        cross_attention_positions=cross_positions,
        layer_style=layer_style,
    )
    compile_config = CompileConfig(fullgraph=True, dynamic=False, backend="eager")
    compile_config._compile_all_devices = True
    compiled_generation = dict(GENERATION, cache_implementation="static", compile_config=compile_config)
    for sources in (SOURCES, OTHER_SOURCES):
        expected = model.generate(**source_batch(sources), **GENERATION)
        with torch.compiler.set_stance("default" if sources is SOURCES else "fail_on_recompile"):
            actual = model.generate(**source_batch(sources), **compiled_generation)
        assert hasattr(model, "_compiled_call")  # generate took the compiled path
        assert isinstance(actual.past_key_values.self_attention_cache, StaticCache)
        assert_same_generation(actual, expected)


@pytest.mark.slow
def test_beam_search_with_a_compiled_forward_and_static_cache_gives_the_eager_beams():
    """Beam search calls the model's forward itself (transformers compiles only greedy and sampling steps): compiling
    the forward compiles every decoding step."""
    torch.compiler.reset()
    model = one_layer_model(attention_scaling="asentmax")
    beams = dict(GENERATION, num_beams=4, num_return_sequences=2)
    expected = model.generate(**source_batch(SOURCES), **beams)
    model.forward = torch.compile(model.forward, fullgraph=True, dynamic=False, backend="eager")
    actual = model.generate(**source_batch(SOURCES), **beams, cache_implementation="static")
    assert_same_generation(actual, expected)
    torch.testing.assert_close(actual.sequences_scores, expected.sequences_scores, rtol=0, atol=LOGIT_TOLERANCE)


def test_default_generation_compiles_nothing():
    """Declaring `_can_compile_fullgraph` leaves the default path alone: a dynamic cache, no compilation, the tokens
    and scores of generation with compilation turned off, bit for bit."""
    assert AdaptiveEntmaxMarianMTModel._can_compile_fullgraph
    model = tiny_model(init_std=0.5)
    default = model.generate(**source_batch(SOURCES), **GENERATION)
    assert not hasattr(model, "_compiled_call")
    assert type(default.past_key_values.self_attention_cache) is DynamicCache
    never_compiled = model.generate(**source_batch(SOURCES), **GENERATION, disable_compile=True)
    assert torch.equal(default.sequences, never_compiled.sequences)
    for default_scores, never_compiled_scores in zip(default.scores, never_compiled.scores, strict=True):
        assert torch.equal(default_scores, never_compiled_scores)


class Logits(torch.nn.Module):
    """The model's forward as a function of tensors only, as ONNX takes it (docs/model.md shows this wrapper)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        return self.model(input_ids, attention_mask, decoder_input_ids=decoder_input_ids, use_cache=False).logits


@pytest.mark.slow
@pytest.mark.parametrize("layer_style", ["marian", "gemma2"])
def test_onnx_export_with_dynamic_axes_runs_in_onnxruntime(tmp_path, layer_style):
    """Exported once, run by onnxruntime on the traced shapes and on other batch sizes and lengths. One layer each side
    (`one_layer_model`): with symbolic shapes, the translation of the unrolled Newton steps to ONNX takes five times as
    long as with static ones (53 s against 10 s for 2 + 2 layers on a busy two-core machine)."""
    onnxruntime = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    model = Logits(one_layer_model(layer_style=layer_style))
    names = ["input_ids", "attention_mask", "decoder_input_ids"]
    arguments = tuple(model_inputs()[name] for name in names)
    dynamic_shapes = tuple(DYNAMIC_SHAPES[name] for name in names)
    program = torch.onnx.export(model, arguments, dynamo=True, input_names=names, dynamic_shapes=dynamic_shapes)
    program.save(tmp_path / "model.onnx")
    session = onnxruntime.InferenceSession(tmp_path / "model.onnx")
    assert [list(session_input.shape) for session_input in session.get_inputs()] == [
        ["batch", "source"],
        ["batch", "source"],
        ["batch", "target"],
    ]
    for inputs in [model_inputs(), *other_shapes()]:
        with torch.no_grad():
            expected = model(*(inputs[name] for name in names))
        (actual,) = session.run(None, {name: inputs[name].numpy() for name in names})
        torch.testing.assert_close(torch.from_numpy(actual), expected, rtol=0, atol=LOGIT_TOLERANCE)
