"""The translation pipeline and the config of a saved folder, as someone without hf_entmax loads them."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers import eager_to_stop, punctuated_tokenizer, tiny_model
from transformers import GenerationConfig

from hf_entmax import AdaptiveEntmaxMarianMTModel
from hf_entmax.modeling import entmax as entmax_module
from hf_entmax.modeling import modeling_adaptive_entmax_marian as modeling


SOURCES = ["der kleine hund läuft", "zwei katzen schlafen im haus", "ein mann"]


@pytest.mark.slow
def test_pipeline_of_a_trained_folder_honours_length_limits_without_generation_warnings(
    tokenizer, tmp_path, monkeypatch
):
    """A folder saved by training holds `max_length` in its generation config; no call may make generate warn."""
    model = tiny_model(vocab_size=len(tokenizer), init_std=0.5)
    # What `hf-entmax train` saves (hf_entmax/training/run.py).
    model.generation_config.num_beams = 2
    model.generation_config.max_length = 40
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    results = tmp_path / "results.pt"
    script = textwrap.dedent(
        f"""
        import logging, sys, warnings
        sys.modules["hf_entmax"] = None  # as on a machine without hf_entmax
        import torch
        from transformers import GenerationConfig, pipeline

        messages = []

        class Keep(logging.Handler):
            def emit(self, record):
                messages.append(f"{{record.name}}: {{record.getMessage()}}")

        handler = Keep(logging.WARNING)
        logging.getLogger().addHandler(handler)  # the folder's own modules (transformers_modules.*) log here
        logging.getLogger("transformers").addHandler(handler)  # transformers' loggers do not propagate
        sources = {SOURCES!r}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            translator = pipeline("translation", model={str(folder)!r}, trust_remote_code=True)
            outputs = {{
                "max_new_tokens": translator(sources, max_new_tokens=5, return_tensors=True),
                "max_length": translator(sources, max_length=6, return_tensors=True),
                "folder_limit": translator(sources[0], return_tensors=True),
                "min_new_tokens": translator(sources[0], min_new_tokens=3, max_new_tokens=5, return_tensors=True),
                "generation_config": translator(
                    sources[0], generation_config=GenerationConfig(max_new_tokens=4, num_beams=3), return_tensors=True
                ),
                "several": translator(sources, max_new_tokens=5, num_return_sequences=2, batch_size=2),
            }}
            made_with_limit = pipeline("translation", model={str(folder)!r}, trust_remote_code=True, max_new_tokens=5)
            outputs["made_with_limit"] = made_with_limit(sources, return_tensors=True)
        messages += [f"{{warning.category.__name__}}: {{warning.message}}" for warning in caught]
        torch.save({{"outputs": outputs, "messages": messages}}, {str(results)!r})
        """
    )
    environment = {
        **os.environ,
        "HF_MODULES_CACHE": str(tmp_path / "modules"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_VERBOSITY": "warning",
    }
    completed = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    loaded = torch.load(results)
    assert loaded["messages"] == []

    # References from the model in memory, with the folder's PyTorch attention (bit for bit, as the folder runs it
    # without hf_entmax) and generate given total lengths (max_new_tokens=k is max_length=k+1 after the start token).
    monkeypatch.setattr(entmax_module, "native_entmax", None)
    monkeypatch.setattr(modeling, "native_entmax_attention", None)

    def reference(source, **generate_kwargs):
        return model.generate(**tokenizer(source, return_tensors="pt"), **generate_kwargs)[0]

    outputs = loaded["outputs"]
    for source, result in zip(SOURCES, outputs["max_new_tokens"], strict=True):
        assert len(result["translation_token_ids"]) <= 1 + 5
        assert torch.equal(result["translation_token_ids"], reference(source, max_length=6))
    for source, result in zip(SOURCES, outputs["max_length"], strict=True):
        assert torch.equal(result["translation_token_ids"], reference(source, max_length=6))
    for source, result in zip(SOURCES, outputs["made_with_limit"], strict=True):
        assert torch.equal(result["translation_token_ids"], reference(source, max_length=6))
    # Without a limit in the call, the folder's own `max_length` (40) holds.
    [result] = outputs["folder_limit"]
    assert 6 < len(result["translation_token_ids"]) <= 40
    assert torch.equal(result["translation_token_ids"], reference(SOURCES[0]))
    [result] = outputs["min_new_tokens"]
    assert torch.equal(result["translation_token_ids"], reference(SOURCES[0], min_length=4, max_length=6))
    [result] = outputs["generation_config"]
    expected = reference(SOURCES[0], generation_config=GenerationConfig(max_length=5, num_beams=3))
    assert torch.equal(result["translation_token_ids"], expected)
    assert [len(candidates) for candidates in outputs["several"]] == [2, 2, 2]
    assert all(set(candidate) == {"translation_text"} for candidates in outputs["several"] for candidate in candidates)


def test_output_attentions_in_the_config_returns_sparse_attentions_and_survives_saving(tokenizer, tmp_path):
    """transformers 5 allows config.output_attentions only with "eager"; α-entmax attention always has them."""
    model = tiny_model(vocab_size=len(tokenizer), init_std=0.5)
    model.config.output_attentions = True
    inputs = tokenizer(SOURCES, return_tensors="pt", padding=True)
    decoder_input_ids = torch.tensor([[0, 5, 6, 7]] * len(SOURCES))
    output = model(**inputs, decoder_input_ids=decoder_input_ids)  # no output_attentions argument: the config's
    layers = model.config.encoder_layers
    assert len(output.encoder_attentions) == len(output.decoder_attentions) == len(output.cross_attentions) == layers
    assert output.encoder_attentions[0].shape == (
        len(SOURCES),
        4,
        inputs["input_ids"].shape[1],
        inputs["input_ids"].shape[1],
    )
    for attention in (*output.encoder_attentions, *output.cross_attentions):
        assert bool((attention == 0).any())  # exact zeros: α-entmax, not softmax
        # Every row is a distribution: float32 sums of at most 8 entries, within assert_close's float32 tolerance.
        torch.testing.assert_close(attention.sum(-1), torch.ones_like(attention.sum(-1)))

    folder = tmp_path / "model"
    model.save_pretrained(folder)
    assert json.loads((folder / "config.json").read_text())["output_attentions"] is True
    reloaded = AdaptiveEntmaxMarianMTModel.from_pretrained(folder)
    assert reloaded.config.output_attentions is True
    assert reloaded(**inputs, decoder_input_ids=decoder_input_ids).encoder_attentions is not None


@pytest.mark.slow
def test_match_sentences_works_in_the_pipeline_of_a_folder_loaded_without_hf_entmax(tmp_path):
    """The pipeline's `match_sentences` (and the sentence_ends.py it needs, saved with the model) as a Hub user runs
    it: batched, each input gets its own count."""
    tokenizer = punctuated_tokenizer()
    folder = tmp_path / "model"
    eager_to_stop(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    assert (folder / "sentence_ends.py").is_file()
    sources = ["der kleine hund. zwei katzen!", "ein mann liest.", "die frau trinkt kaffee", "a? b. c."]
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.modules["hf_entmax"] = None  # as on a machine without hf_entmax
        from transformers import pipeline

        translator = pipeline("translation", model={str(folder)!r}, trust_remote_code=True)
        plain = [result["translation_text"] for result in translator({sources!r})]
        matched = [
            result["translation_text"] for result in translator({sources!r}, match_sentences=True, batch_size=2)
        ]
        try:
            translator("ein hund.", match_sentences="yes")
            refused = None
        except ValueError as error:
            refused = str(error)
        print(json.dumps({{"plain": plain, "matched": matched, "refused": refused}}))
        """
    )
    environment = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    completed = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = json.loads(completed.stdout.strip().splitlines()[-1])
    assert results["plain"] == ["", "", "", ""]
    assert results["matched"] == ["..", ".", "", "..."]
    assert results["refused"] == "`match_sentences` must be True or False, got 'yes'"
