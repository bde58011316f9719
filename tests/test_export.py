"""Hub-ready folders and model cards: contents, sharding, loading without hf_entmax, card metadata round trip."""

import json

import pytest
import torch
from conftest import SENTENCES, tiny_model
from huggingface_hub import ModelCard

from hf_entmax import AdaptiveEntmaxMarianMTModel, analyze_model
from hf_entmax.analysis.report import write_report
from hf_entmax.cli import main
from hf_entmax.conversion import (
    ModelCardInfo,
    check_folder_loads,
    export_hub_folder,
    find_pickle_files,
    measure_attention_sparsity,
    render_model_card,
)
from hf_entmax.errors import HfEntmaxValueError


SUMMARY = {
    "source_lang": "de",
    "target_lang": "en",
    "data": "bentrevett/multi30k",
    "num_examples": {"train": 29000, "validation": 1014, "test": 1000},
    "global_step": 1200,
    "world_size": 1,
    "metrics": {"eval_bleu": 35.123, "eval_chrf": 56.5, "test_bleu": 34.2, "test_chrf": 54.25, "train_loss": 2.1},
    "hyperparameters": {"learning_rate": 0.001, "alpha_learning_rate": 0.01, "per_device_train_batch_size": 64},
}


@pytest.fixture
def model(tokenizer):
    return tiny_model(vocab_size=len(tokenizer), init_std=0.5)


def card_info() -> ModelCardInfo:
    return ModelCardInfo.from_training_summary(
        SUMMARY, model_id="someone/entmax-de-en", base_model="Helsinki-NLP/opus-mt-de-en", tags=["multi30k"]
    )


def test_hub_folder_holds_everything_and_loads_without_hf_entmax(model, tokenizer, tmp_path):
    folder = export_hub_folder(model, tokenizer, tmp_path / "hub", card=card_info())
    files = {path.name for path in folder.iterdir()}
    assert {
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "README.md",
        "configuration_adaptive_entmax_marian.py",
        "modeling_adaptive_entmax_marian.py",
        "entmax.py",
        "pipeline_translation.py",
    } <= files
    assert find_pickle_files(folder) == []
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"]["AutoModelForSeq2SeqLM"] == "modeling_adaptive_entmax_marian.AdaptiveEntmaxMarianMTModel"
    assert config["custom_pipelines"]["translation"]["impl"] == "pipeline_translation.TranslationPipeline"

    # A fresh process where hf_entmax cannot be imported computes the same logits and translations.
    assert check_folder_loads(folder) <= 1e-4


def test_large_weights_are_sharded_and_load_back_identically(model, tokenizer, tmp_path):
    folder = export_hub_folder(model, tokenizer, tmp_path / "hub", max_shard_size="50KB")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shards = sorted(path.name for path in folder.glob("model-*-of-*.safetensors"))
    assert len(shards) > 1 and sorted(set(index["weight_map"].values())) == shards
    assert not (folder / "model.safetensors").exists()

    loaded = AdaptiveEntmaxMarianMTModel.from_pretrained(folder).eval()
    for key, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], tensor), key
    inputs = tokenizer(SENTENCES[:3], return_tensors="pt", padding=True)
    decoder_input_ids = torch.tensor([[0, 5, 6, 7]] * 3)
    torch.testing.assert_close(
        loaded(**inputs, decoder_input_ids=decoder_input_ids).logits,
        model(**inputs, decoder_input_ids=decoder_input_ids).logits,
        rtol=0,
        atol=0,
    )


def test_model_card_metadata_round_trips_and_the_body_has_the_alpha_table(model, tmp_path):
    render_model_card(model, card_info()).save(tmp_path / "README.md")
    card = ModelCard.load(tmp_path / "README.md")

    assert card.data.language == ["de", "en"]
    assert card.data.license == "apache-2.0"
    assert card.data.library_name == "transformers"
    assert card.data.pipeline_tag == "translation"
    assert {"entmax", "sparse-attention", "multi30k"} <= set(card.data.tags)
    assert card.data.base_model == "Helsinki-NLP/opus-mt-de-en"
    assert card.data.datasets == ["bentrevett/multi30k"]
    scores = {(result.dataset_split, result.metric_type): result.metric_value for result in card.data.eval_results}
    assert scores == {("validation", "bleu"): 35.12, ("validation", "chrf"): 56.5, ("test", "bleu"): 34.2,
                      ("test", "chrf"): 54.25}  # fmt: skip
    assert {result.dataset_type for result in card.data.eval_results} == {"bentrevett/multi30k"}
    assert {result.task_type for result in card.data.eval_results} == {"translation"}

    body = card.text
    assert 'AutoModelForSeq2SeqLM.from_pretrained("someone/entmax-de-en", trust_remote_code=True)' in body
    assert 'pipeline("translation", model="someone/entmax-de-en", trust_remote_code=True)' in body
    for kind, title in (("encoder_self", "Encoder self-attention"), ("cross", "Cross-attention")):
        alphas = model.get_alphas()[kind]
        assert f"**{title}** (learned; mean α {alphas.mean().item():.3f})" in body
        row = "| 1 | " + " | ".join(f"{alpha:.3f}" for alpha in alphas[1].tolist()) + " |"
        assert row in body
    assert "| bentrevett/multi30k | test | 34.20 | 54.25 |" in body
    assert "- `alpha_learning_rate`: 0.01" in body and "- `global_step`: 1200" in body
    assert "@inproceedings{correia2019adaptively" in body
    assert "Attention sparsity" not in body  # not measured


def test_attention_sparsity_is_measured_and_shown(tokenizer, tmp_path):
    sparsemax = tiny_model(vocab_size=len(tokenizer), init_std=0.5, alpha_init=2.0, learn_alpha=False)
    softmax = tiny_model(vocab_size=len(tokenizer), init_std=0.5, alpha_init=1.0, learn_alpha=False)
    assert measure_attention_sparsity(softmax, tokenizer, SENTENCES[:3], max_new_tokens=8) == {
        "encoder_self": 0.0,
        "decoder_self": 0.0,
        "cross": 0.0,
    }
    sparsity = measure_attention_sparsity(sparsemax, tokenizer, SENTENCES[:3], max_new_tokens=8)
    assert all(0.2 < value < 1 for value in sparsity.values()), sparsity

    info = ModelCardInfo(source_lang="de", target_lang="en", mean_sparsity=sparsity)
    body = render_model_card(sparsemax, info).text
    assert f"| Cross-attention | {100 * sparsity['cross']:.1f}% |" in body
    assert "**Encoder self-attention** (fixed; mean α 2.000)" in body


def test_a_card_without_results_has_no_model_index(model, tmp_path):
    render_model_card(model, ModelCardInfo()).save(tmp_path / "README.md")
    text = (tmp_path / "README.md").read_text()
    card = ModelCard.load(tmp_path / "README.md")
    assert "model-index" not in text and card.data.eval_results is None
    assert card.data.license == "apache-2.0" and card.data.pipeline_tag == "translation"
    assert "No training information was recorded" in text


def test_folder_without_remote_code_fails_the_load_check(model, tokenizer, tmp_path):
    folder = export_hub_folder(model, tokenizer, tmp_path / "hub")
    config = json.loads((folder / "config.json").read_text())
    del config["auto_map"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(HfEntmaxValueError, match="has no auto_map"):
        check_folder_loads(folder)


def test_export_command_builds_the_card_from_the_training_summary(model, tokenizer, tmp_path, capsys):
    trained = tmp_path / "trained"  # what `hf-entmax train` leaves behind, pickled training arguments included
    model.save_pretrained(trained)
    tokenizer.save_pretrained(trained)
    (trained / "training_summary.json").write_text(json.dumps({**SUMMARY, "base_model": None}))
    (trained / "training_args.bin").write_bytes(b"pickle")
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("\n".join(SENTENCES[:3]))

    output = tmp_path / "hub"
    arguments = ["export", "--model", str(trained), "--output", str(output), "--repo_id", "someone/entmax-de-en"]
    assert main([*arguments, "--sparsity_sentences", str(sentences), "--no-check_load"]) == 0
    assert "Wrote the Hub-ready folder" in capsys.readouterr().out
    assert find_pickle_files(output) == []
    card = ModelCard.load(output / "README.md")
    assert card.data.language == ["de", "en"]
    assert {result.metric_value for result in card.data.eval_results} == {35.12, 56.5, 34.2, 54.25}
    assert "### Attention sparsity" in card.text
    assert "(29,000 pairs" not in card.text and "train: 29,000 pairs" in card.text

    (tmp_path / "marian").mkdir()
    (tmp_path / "marian" / "config.json").write_text(json.dumps({"model_type": "marian"}))
    assert main(["export", "--model", str(tmp_path / "marian"), "--output", str(tmp_path / "out")]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "convert it with `hf-entmax convert`" in error


def test_export_puts_the_head_analysis_into_the_card(model, tokenizer, tmp_path, capsys):
    trained = tmp_path / "trained"
    model.save_pretrained(trained)
    tokenizer.save_pretrained(trained)
    analysis = analyze_model(trained, SENTENCES[0::2], SENTENCES[1::2], num_examples=0, progress=False)
    write_report([analysis], tmp_path / "analysis")

    output = tmp_path / "hub"
    arguments = ["export", "--model", str(trained), "--output", str(output), "--no-check_load"]
    assert main([*arguments, "--analysis", str(tmp_path / "analysis")]) == 0
    body = ModelCard.load(output / "README.md").text
    assert "## Attention analysis" in body and "Measured with `hf-entmax analyze` on 4 sentences" in body
    density = analysis.attention["cross"].density.mean().item()
    assert f"| trained | Cross-attention | {analysis.attention['cross'].alpha.mean().item():.2f} (" in body
    assert f"| {100 * density:.0f}% |" in body
    for figure in ("alpha_heatmap.png", "density_heatmap.png", "js_divergence.png"):
        assert f"](analysis/{figure})" in body
        assert (output / "analysis" / figure).read_bytes() == (tmp_path / "analysis" / figure).read_bytes()
    assert not (output / "analysis" / "alpha_trajectories.png").exists()  # no α history: no such figure

    # The analysis of another model is refused: its α are not this model's.
    other = tmp_path / "other"
    tiny_model(seed=1, vocab_size=len(tokenizer)).save_pretrained(other)
    tokenizer.save_pretrained(other)
    capsys.readouterr()
    arguments = ["export", "--model", str(other), "--output", str(tmp_path / "hub2"), "--no-check_load"]
    assert main([*arguments, "--analysis", str(tmp_path / "analysis")]) == 1
    last_line = capsys.readouterr().err.splitlines()[-1]  # after the model's loading progress bar
    assert last_line.startswith("hf-entmax export: error: --analysis") and "has other encoder_self α" in last_line
    assert main([*arguments, "--analysis", str(tmp_path)]) == 1
    assert "no report.json there" in capsys.readouterr().err
