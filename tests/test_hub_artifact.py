"""A saved folder must work for someone who has never heard of hf_entmax."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers import SAVED_FOLDER_FILES, tiny_model

from hf_entmax import TranslationPipeline
from hf_entmax.modeling import entmax as entmax_module
from hf_entmax.modeling import modeling_adaptive_entmax_marian as modeling


SOURCES = ["der kleine hund läuft", "zwei katzen schlafen im haus", "ein mann"]


# Marian's positions, and the relative ones whose code is the most of its own (the bias, the split directions; the
# rotations, in cross-attention too).
@pytest.fixture(
    params=[
        {},
        {"position_embedding_type": "nape", "encoder_alibi_directions": "split", "cross_attention_positions": "nape"},
        {"position_embedding_type": "rope", "cross_attention_positions": "rope"},
    ],
    ids=["sinusoidal", "nape-split-cross", "rope-cross"],
)
def saved_folder(tmp_path, tokenizer, request):
    model = tiny_model(vocab_size=len(tokenizer), init_std=0.5, **request.param)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, folder


def test_folder_holds_safetensors_remote_code_and_pipeline_entry(saved_folder):
    _, folder = saved_folder
    files = {path.name for path in folder.iterdir()}
    assert SAVED_FOLDER_FILES <= files
    assert not [name for name in files if name.endswith((".bin", ".pt", ".pkl"))]
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "adaptive_entmax_marian"
    assert config["auto_map"] == {
        "AutoConfig": "configuration_adaptive_entmax_marian.AdaptiveEntmaxMarianConfig",
        "AutoModel": "modeling_adaptive_entmax_marian.AdaptiveEntmaxMarianModel",
        "AutoModelForSeq2SeqLM": "modeling_adaptive_entmax_marian.AdaptiveEntmaxMarianMTModel",
    }
    assert config["custom_pipelines"]["translation"]["impl"] == "pipeline_translation.TranslationPipeline"


def test_remote_code_files_import_only_torch_and_transformers(saved_folder):
    """Hub code is copied flat: only `from .module import name` works, and only torch/transformers (with the
    packages transformers itself requires) are needed."""
    _, folder = saved_folder
    standard_library = set(sys.stdlib_module_names)
    for path in folder.glob("*.py"):
        for line in path.read_text().splitlines():
            if line.startswith("from ."):
                assert re.fullmatch(r"from \.\w+ import .+", line), f"{path.name}: {line}"
            elif line.startswith(("import ", "from ")):
                package = line.split()[1].split(".")[0]
                assert package in standard_library | {"torch", "transformers", "huggingface_hub", "safetensors"}, (
                    f"{path.name}: {line}"
                )


@pytest.mark.slow
def test_loads_and_translates_without_hf_entmax_installed(saved_folder, tokenizer, tmp_path, monkeypatch):
    model, folder = saved_folder
    # Without hf_entmax the folder's own files run their PyTorch implementation: compare like with like, bit for bit
    # (the native kernel agrees to float32 rounding; tests/test_kernels.py checks that).
    monkeypatch.setattr(entmax_module, "native_entmax", None)
    monkeypatch.setattr(modeling, "native_entmax_attention", None)
    inputs = tokenizer(SOURCES, return_tensors="pt", padding=True)
    decoder_input_ids = torch.tensor([[0, 5, 6, 7]] * len(SOURCES))
    expected_logits = model(**inputs, decoder_input_ids=decoder_input_ids).logits
    expected_translations = TranslationPipeline(model=model, tokenizer=tokenizer)(SOURCES, max_new_tokens=8)
    expected_beam = model.generate(**inputs, num_beams=3, max_new_tokens=8)

    results = tmp_path / "results.pt"
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["hf_entmax"] = None  # as if hf_entmax were not installed
        try:
            import hf_entmax
        except ImportError:
            pass
        else:
            raise SystemExit("hf_entmax is importable")
        import torch
        from transformers import AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

        folder = {str(folder)!r}
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules."), type(model)
        base = AutoModel.from_pretrained(folder, trust_remote_code=True)
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        inputs = tokenizer({SOURCES!r}, return_tensors="pt", padding=True)
        decoder_input_ids = torch.tensor([[0, 5, 6, 7]] * {len(SOURCES)})
        out = model(**inputs, decoder_input_ids=decoder_input_ids, output_attentions=True)
        translator = pipeline("translation", model=folder, trust_remote_code=True)
        torch.save(
            {{
                "logits": out.logits,
                "has_exact_zeros": bool((out.encoder_attentions[0] == 0).any()),
                "alphas": model.get_alphas(),
                "base_type": type(base).__name__,
                "translations": translator({SOURCES!r}, max_new_tokens=8),
                "single": translator({SOURCES[0]!r}, max_new_tokens=8),
                "beam": model.generate(**inputs, num_beams=3, max_new_tokens=8),
            }},
            {str(results)!r},
        )
        """
    )
    environment = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    completed = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    loaded = torch.load(results)
    torch.testing.assert_close(loaded["logits"], expected_logits, rtol=0, atol=0)
    assert loaded["has_exact_zeros"]
    assert loaded["base_type"] == "AdaptiveEntmaxMarianModel"
    for kind, alphas in model.get_alphas().items():
        torch.testing.assert_close(loaded["alphas"][kind], alphas)
    assert loaded["translations"] == expected_translations
    assert loaded["single"] == [expected_translations[0]]
    assert torch.equal(loaded["beam"], expected_beam)
