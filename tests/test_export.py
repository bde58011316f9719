"""Hub-ready folders and model cards: contents, sharding, loading without hf_entmax, card metadata round trip."""

import json
import math
import os
import re

import pytest
import torch
from helpers import SAVED_FOLDER_FILES, SENTENCES, random_predictor, tiny_model
from huggingface_hub import ModelCard

from hf_entmax import AdaptiveEntmaxMarianMTModel, analyze_model
from hf_entmax.analysis.findings import mean_sparsity, summarize
from hf_entmax.analysis.report import write_report
from hf_entmax.cli import main
from hf_entmax.common.records import CONVERTED_TAG
from hf_entmax.errors import HfEntmaxFileNotFoundError, HfEntmaxValueError
from hf_entmax.hub import (
    ModelCardInfo,
    check_folder_loads,
    export_hub_folder,
    find_pickle_files,
    render_model_card,
    write_training_card,
)
from hf_entmax.hub.load_check import load_check_environment
from hf_entmax.hub.repo_files import folder_file, folder_path
from hf_entmax.modeling.sparsefinder_attention import PREDICTOR_FILE


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
# What `hf-entmax train` writes today (the keys above and those of /work/notes/summary_schema.md).
FULL_SUMMARY = {
    **SUMMARY,
    "model_name": "my-de-en",
    "data": {"train_file": "/home/someone/data/train.tsv", "validation_file": "/home/someone/data/valid.tsv"},
    "dataset_config_name": None,
    "base_model": None,
    "base_model_type": None,
    "did_train": True,
    "metrics": {**SUMMARY["metrics"], "eval_loss": 2.25, "test_loss": 2.5},
    "sacrebleu_signatures": {
        "bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
        "chrf_signature": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0",
    },
    "recipe": "from-scratch",
    "hyperparameters": {
        "learning_rate": 0.001,
        "alpha_learning_rate": 0.01,
        # Summaries written before enums were recorded by value hold the enum's repr: the card shows the value.
        "lr_scheduler_type": "SchedulerType.INVERSE_SQRT",
        "warmup_steps": 120,
        "optimizer": "adamw_torch (betas=(0.9, 0.98), epsilon=1e-08)",
        "per_device_train_batch_size": 32,
        "gradient_accumulation_steps": 2,
        "max_steps": 1200,
        "num_train_epochs": 3.0,  # ignored by Trainer when max_steps > 0: not on the card
        "generation_num_beams": 4,
    },
    "evaluations": [
        {"step": 600, "epoch": 1.5, "training_loss": 3.125, "validation_loss": 2.75, "bleu": 20.25, "chrf": 45.5},
        {"step": 1200, "epoch": 3.0, "training_loss": None, "validation_loss": 2.25, "bleu": 35.123, "chrf": 56.5},
    ],
    "tokenizer": "a joint SentencePiece unigram tokenizer (8,000 pieces) trained on the training data",
    "preprocessing": {"max_source_length": 128, "max_target_length": 64, "source_prefix": None},
    "framework_versions": {"hf_entmax": "0.1.0", "transformers": "5.24.0", "torch": "2.13.0+cpu"},
}


@pytest.fixture
def model(tokenizer):
    return tiny_model(vocab_size=len(tokenizer), init_std=0.5)


def card_info() -> ModelCardInfo:
    return ModelCardInfo.from_training_summary(
        SUMMARY, model_id="someone/entmax-de-en", base_model="Helsinki-NLP/opus-mt-de-en", tags=["multi30k"]
    )


@pytest.mark.slow
def test_hub_folder_holds_everything_and_loads_without_hf_entmax(model, tokenizer, tmp_path):
    folder = export_hub_folder(model, tokenizer, tmp_path / "hub", card=card_info())
    files = {path.name for path in folder.iterdir()}
    assert {*SAVED_FOLDER_FILES, "README.md"} <= files
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


def test_exporting_again_replaces_the_folder_whole_and_other_folders_are_refused(model, tokenizer, tmp_path):
    folder = export_hub_folder(model, tokenizer, tmp_path / "hub")
    assert (folder / "model.safetensors").is_file()
    other = tiny_model(seed=7, vocab_size=len(tokenizer), init_std=0.5)
    export_hub_folder(other, tokenizer, folder, max_shard_size="50KB")
    # No stale single file next to the new shards (loading would prefer it, and publish the old weights).
    assert not (folder / "model.safetensors").exists()
    loaded = AdaptiveEntmaxMarianMTModel.from_pretrained(folder)
    assert all(torch.equal(loaded.state_dict()[key], tensor) for key, tensor in other.state_dict().items())
    assert [path.name for path in tmp_path.iterdir()] == ["hub"]  # no staging folder left behind

    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("mine\n")
    with pytest.raises(HfEntmaxValueError, match=r"not from an earlier hf-entmax export \(notes.txt\)"):
        export_hub_folder(model, tokenizer, project)
    assert (project / "notes.txt").read_text() == "mine\n"


def test_an_export_edited_since_is_replaced_only_when_asked(model, tokenizer, tmp_path):
    folder = export_hub_folder(model, tokenizer, tmp_path / "hub")
    with open(folder / "README.md", "a", encoding="utf-8") as card:
        card.write("\nMy notes on this model.\n")
    (folder / "notes.txt").write_text("mine\n")
    edited = (folder / "README.md").read_text()
    with pytest.raises(
        HfEntmaxValueError, match=r"edited or added since hf-entmax export wrote it \(README.md, notes"
    ):
        export_hub_folder(model, tokenizer, folder)
    assert (folder / "README.md").read_text() == edited
    export_hub_folder(model, tokenizer, folder, overwrite=True)
    assert (folder / "README.md").read_text() != edited and not (folder / "notes.txt").exists()


def test_model_card_metadata_round_trips_and_the_body_has_the_alpha_table(model, tmp_path):
    render_model_card(model, card_info()).save(tmp_path / "README.md")
    card = ModelCard.load(tmp_path / "README.md")

    assert card.data.language == ["de", "en"]
    assert card.data.license == "apache-2.0"
    assert card.data.library_name == "transformers"
    assert card.data.pipeline_tag == "translation"
    assert {"entmax", "sparse-attention", "multi30k"} <= set(card.data.tags)
    assert card.data.base_model == "Helsinki-NLP/opus-mt-de-en"
    assert card.data.base_model_relation == "finetune"  # the summary's run trained, from that base
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
    assert (
        "It was fine-tuned from [`Helsinki-NLP/opus-mt-de-en`](https://huggingface.co/Helsinki-NLP/opus-mt-de-en)"
        in body
    )
    assert "carried over unchanged" not in body


def test_attention_sparsity_is_the_analysis_measure_and_shown(tokenizer, tmp_path):
    sparsemax = tiny_model(vocab_size=len(tokenizer), init_std=0.5, alpha_init=2.0, learn_alpha=False)
    softmax = tiny_model(vocab_size=len(tokenizer), init_std=0.5, alpha_init=1.0, learn_alpha=False)

    def analysis(model):
        return analyze_model(model, SENTENCES[:3], tokenizer=tokenizer, max_length=8, progress=False)

    assert mean_sparsity(analysis(softmax)) == {"encoder_self": 0.0, "decoder_self": 0.0, "cross": 0.0}
    sparse_analysis = analysis(sparsemax)
    sparsity = mean_sparsity(sparse_analysis)
    assert all(0.2 < value < 1 for value in sparsity.values()), sparsity
    # One definition: the card's number is 1 − the density the analysis reports (rounded there to 4 decimals)
    for kind, summary in summarize(sparse_analysis).items():
        assert sparsity[kind] == pytest.approx(1 - summary["mean_density"], abs=5e-5)

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


def make_training_output(model, tokenizer, folder, summary):
    """What `hf-entmax train` leaves behind: the model, its records, and checkpoints with pickled training state."""
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "training_summary.json").write_text(json.dumps(summary))
    for name in ("alpha_history.json", "all_results.json", "trainer_state.json"):
        (folder / name).write_text("{}")
    (folder / "training_args.bin").write_bytes(b"pickle")
    checkpoint = folder / "checkpoint-2"
    model.save_pretrained(checkpoint)
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin"):
        (checkpoint / name).write_bytes(b"pickle")
    return folder


@pytest.mark.slow
def test_export_command_builds_the_card_from_the_training_summary(model, tokenizer, tmp_path, capsys):
    trained = make_training_output(model, tokenizer, tmp_path / "trained", {**SUMMARY, "base_model": None})
    random_predictor(model).save(trained / PREDICTOR_FILE)  # as `hf-entmax sparsefinder --save_to_model` leaves it
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("\n".join(SENTENCES[:3]))

    output = tmp_path / "hub"
    arguments = ["export", "--model", str(trained), "--output", str(output), "--repo_id", "someone/entmax-de-en"]
    assert main([*arguments, "--sparsity_sentences", str(sentences)]) == 0  # with the load check
    assert "Wrote the Hub-ready folder" in capsys.readouterr().out
    assert find_pickle_files(output) == []
    assert not (output / "checkpoint-2").exists()
    records = ("training_summary.json", "alpha_history.json", "all_results.json", "trainer_state.json")
    for name in (*records, PREDICTOR_FILE):
        assert (output / name).read_bytes() == (trained / name).read_bytes(), name
    card = ModelCard.load(output / "README.md")
    assert card.data.language == ["de", "en"]
    assert card.data.model_name == "entmax-de-en"
    assert {result.metric_value for result in card.data.eval_results} == {35.12, 56.5, 34.2, 54.25}
    assert "### Attention sparsity" in card.text
    exported = AdaptiveEntmaxMarianMTModel.from_pretrained(trained)
    sparsity = mean_sparsity(analyze_model(exported, SENTENCES[:3], tokenizer=tokenizer, progress=False))
    assert f"| Cross-attention | {100 * sparsity['cross']:.1f}% |" in card.text  # what `analyze` measures
    capsys.readouterr()  # loading's progress bars
    assert "(29,000 pairs" not in card.text and "train: 29,000 pairs" in card.text
    assert "It was trained from scratch" in card.text

    (tmp_path / "marian").mkdir()
    (tmp_path / "marian" / "config.json").write_text(json.dumps({"model_type": "marian"}))
    assert main(["export", "--model", str(tmp_path / "marian"), "--output", str(tmp_path / "out")]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "convert it with `hf-entmax convert`" in error


def test_export_names_the_card_after_the_run_and_the_dataset_reaches_the_model_index(model, tokenizer, tmp_path):
    trained = make_training_output(model, tokenizer, tmp_path / "trained", FULL_SUMMARY)
    output = tmp_path / "hub"
    arguments = ["export", "--model", str(trained), "--output", str(output), "--no-check_load"]
    assert main([*arguments, "--dataset", "wmt/wmt16", "--dataset", "other/corpus"]) == 0
    card = ModelCard.load(output / "README.md")
    assert card.data.model_name == "my-de-en"  # the run's name, not "this-model" nor the export folder's
    assert card.text.startswith("\n# my-de-en\n")
    assert card.data.datasets == ["wmt/wmt16", "other/corpus"]
    assert {(result.dataset_type, result.dataset_name) for result in card.data.eval_results} == {
        ("wmt/wmt16", "wmt/wmt16")
    }
    assert "| wmt/wmt16 | test | 2.5000 | 34.20 | 54.25 |" in card.text
    assert "local files (`train.tsv`, `valid.tsv`)" in card.text and "/home/someone" not in card.text


@pytest.mark.parametrize(
    ("flag", "value"), [("--repo_id", "someone/my model"), ("--dataset", "a/b/c"), ("--base_model", "someone/name-")]
)
def test_export_refuses_a_bad_hub_id_in_one_line(model, tokenizer, tmp_path, capsys, flag, value):
    model.save_pretrained(tmp_path / "trained")
    tokenizer.save_pretrained(tmp_path / "trained")
    capsys.readouterr()  # the saving's progress bars
    arguments = ["export", "--model", str(tmp_path / "trained"), "--output", str(tmp_path / "hub"), flag, value]
    assert main(arguments) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"{flag} {value!r} is not a Hub repo id" in error
    assert not (tmp_path / "hub").exists()


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


def test_a_training_output_card_has_its_results_evaluations_and_settings(model, tmp_path):
    render_model_card(model, ModelCardInfo.from_training_summary(FULL_SUMMARY)).save(tmp_path / "README.md")
    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.model_name == "my-de-en"
    assert card.data.base_model is None and getattr(card.data, "base_model_relation", None) is None
    assert card.data.datasets is None  # local files are no Hub dataset

    body = card.text
    assert body.startswith("\n# my-de-en\n")
    assert 'from_pretrained("path/to/my-de-en", trust_remote_code=True)' in body
    assert "It was trained from scratch: randomly initialised, no pre-trained checkpoint." in body
    assert "carried over unchanged" not in body
    # Final results with their loss, the signatures that define them, and every evaluation during training.
    assert "| local files | validation | 2.2500 | 35.12 | 56.50 |" in body
    assert "- BLEU: `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`" in body
    assert "- chrF: `nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0`" in body
    assert "| step | epoch | training loss | validation loss | BLEU | chrF |" in body
    assert "| 600 | 1.50 | 3.1250 | 2.7500 | 20.25 | 45.50 |" in body
    assert "| 1200 | 3.00 | – | 2.2500 | 35.12 | 56.50 |" in body
    # Hyper-parameters as plain values: the recipe, only the step budget that governed, the total batch size.
    for line in (
        "- `recipe`: from-scratch",
        "- `lr_scheduler_type`: inverse_sqrt",
        "- `optimizer`: adamw_torch (betas=(0.9, 0.98), epsilon=1e-08)",
        "- `learning_rate`: 0.001",
        "- `max_steps`: 1200",
        "- `total_train_batch_size`: 64",  # 32 per device × 2 accumulation steps × 1 device
    ):
        assert line in body, line
    assert "num_train_epochs" not in body and "SchedulerType" not in body
    assert "- Tokenizer: a joint SentencePiece unigram tokenizer (8,000 pieces) trained on the training data" in body
    assert "- Preprocessing: sources truncated to 128 tokens; targets truncated to 64 tokens; no source prefix" in body
    assert "Trained with:\n\n- hf_entmax 0.1.0\n- transformers 5.24.0\n- torch 2.13.0+cpu" in body
    assert "## Intended uses & limitations\n\nTranslation from de to en of text like the training data" in body


def test_the_training_card_is_written_from_the_folder_as_from_the_trained_model(model, tokenizer, tmp_path):
    """`write_training_card` (what `hf-entmax train` calls after `train()`) reads the model back from the folder:
    its card says what the trained model in memory would, α table and size included."""
    folder = make_training_output(model, tokenizer, tmp_path / "trained", FULL_SUMMARY)
    assert write_training_card(folder) == folder / "README.md"
    written = ModelCard.load(folder / "README.md")
    render_model_card(model, ModelCardInfo.from_training_summary(FULL_SUMMARY)).save(tmp_path / "expected.md")
    expected = ModelCard.load(tmp_path / "expected.md")
    assert written.content == expected.content
    assert f"({model.num_parameters():,} parameters" in written.text

    (folder / "training_summary.json").unlink()
    with pytest.raises(HfEntmaxFileNotFoundError, match=r"no training_summary\.json there"):
        write_training_card(folder)


def test_the_epochs_appear_when_they_governed_training(model):
    hyperparameters = {**FULL_SUMMARY["hyperparameters"], "max_steps": -1}
    body = render_model_card(
        model, ModelCardInfo.from_training_summary({**FULL_SUMMARY, "hyperparameters": hyperparameters})
    ).text
    assert "- `num_train_epochs`: 3.0" in body and "max_steps" not in body


def test_the_card_tells_how_the_model_relates_to_its_base(model, tmp_path):
    def card_of(info: ModelCardInfo) -> ModelCard:
        render_model_card(model, info).save(tmp_path / "README.md")
        return ModelCard.load(tmp_path / "README.md")

    # Fine-tuned from a Marian checkpoint on the Hub: the Hub's model tree lists it as a finetune.
    hub_base = {**FULL_SUMMARY, "base_model": "Helsinki-NLP/opus-mt-de-en", "base_model_type": "marian"}
    card = card_of(ModelCardInfo.from_training_summary(hub_base))
    assert (card.data.base_model, card.data.base_model_relation) == ("Helsinki-NLP/opus-mt-de-en", "finetune")
    assert (
        "fine-tuned from [`Helsinki-NLP/opus-mt-de-en`](https://huggingface.co/Helsinki-NLP/opus-mt-de-en)"
        in card.text
    )
    assert "a MarianMT model whose softmax attention became α-entmax" in card.text
    assert "carried over unchanged" not in card.text and CONVERTED_TAG not in card.data.tags

    # Fine-tuned from a local folder: named in the text only (a local path means nothing on the Hub).
    local = tmp_path / "runs" / "converted-base"
    local.mkdir(parents=True)
    local_base = {
        **FULL_SUMMARY,
        "base_model": str(local),
        "base_model_type": "adaptive_entmax_marian",
        "base_model_converted": True,
    }
    card = card_of(ModelCardInfo.from_training_summary(local_base))
    assert card.data.base_model is None and getattr(card.data, "base_model_relation", None) is None
    assert (
        "It was fine-tuned from a local checkpoint (`converted-base`), an AdaptiveEntmaxMarian model converted "
        "from MarianMT" in card.text
    )
    assert str(tmp_path) not in card.text

    # Converted (what `hf-entmax convert` writes): no weight changed, which no Hub relation describes.
    converted = ModelCardInfo(
        model_id="someone/opus-mt-de-en-entmax",
        base_model="Helsinki-NLP/opus-mt-de-en",
        base_model_relation="converted",
        hyperparameters={"alpha_init": 1.0},
    )
    card = card_of(converted)
    assert card.data.base_model == "Helsinki-NLP/opus-mt-de-en"
    assert getattr(card.data, "base_model_relation", None) is None and CONVERTED_TAG in card.data.tags
    assert "every weight is carried over unchanged, only the attention changed from softmax to α-entmax" in card.text
    assert "### Conversion settings" in card.text and "- `alpha_init`: 1.0" in card.text
    assert "hf-entmax train --model_name_or_path someone/opus-mt-de-en-entmax" in card.text

    # An evaluation-only run of a Marian checkpoint: the weights are the base's, converted on loading.
    evaluated = {**hub_base, "did_train": False, "evaluations": []}
    card = card_of(ModelCardInfo.from_training_summary(evaluated))
    assert "every weight is carried over unchanged" in card.text
    assert "This run evaluated the checkpoint without training it" in card.text
    assert "Training hyper-parameters" not in card.text

    with pytest.raises(HfEntmaxValueError, match="base_model_relation 'finetune': expected one of converted"):
        ModelCardInfo(base_model_relation="finetune")


@pytest.mark.slow
def test_the_load_check_child_gets_no_secrets(model, tokenizer, tmp_path, monkeypatch):
    folder = export_hub_folder(model, tokenizer, tmp_path / "hub")
    report = tmp_path / "child.json"
    payload = f"""
import json as _json, os as _os
from huggingface_hub import get_token as _get_token
with open({str(report)!r}, "w") as _report:
    _json.dump({{"environ": dict(_os.environ), "token": _get_token()}}, _report)
"""
    with open(folder / "configuration_adaptive_entmax_marian.py", "a", encoding="utf-8") as code:
        code.write(payload)  # runs when the child loads the folder's code, and only there
    secrets = {
        "HF_TOKEN": "hf_secret_from_the_environment",
        "HUGGING_FACE_HUB_TOKEN": "hf_secret_legacy",
        "GITHUB_TOKEN": "ghp_secret",
        "AWS_SECRET_ACCESS_KEY": "aws_secret",
        "OPENAI_API_KEY": "sk_secret",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    hf_home = tmp_path / "hf_home"  # a stored login, where huggingface_hub would find it
    hf_home.mkdir()
    (hf_home / "token").write_text("hf_secret_stored_login")
    monkeypatch.setenv("HF_HOME", str(hf_home))
    home = tmp_path / "home"  # and the default places, under HOME
    (home / ".cache" / "huggingface").mkdir(parents=True)
    (home / ".cache" / "huggingface" / "token").write_text("hf_secret_stored_login")
    (home / ".netrc").write_text("machine huggingface.co password hf_secret_stored_login")
    monkeypatch.setenv("HOME", str(home))

    assert check_folder_loads(folder) <= 1e-4
    seen = json.loads(report.read_text())
    assert seen["token"] is None
    assert not [name for name in seen["environ"] if any(word in name for word in ("TOKEN", "SECRET", "KEY"))]
    text = report.read_text()
    assert not [value for value in [*secrets.values(), "hf_secret_stored_login"] if value in text]
    assert seen["environ"]["HF_HUB_OFFLINE"] == "1" and seen["environ"]["HF_HOME"] != str(hf_home)
    assert seen["environ"]["HOME"] != str(home)


def test_the_load_check_environment_is_an_allow_list_with_a_home_of_its_own(tmp_path, monkeypatch):
    for name, value in {
        "HOME": "/home/someone",
        "XDG_CONFIG_HOME": "/home/someone/.config",
        "NETRC": "/home/someone/.netrc",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "GITHUB_TOKEN": "secret",
        "GIT_ASKPASS": "/usr/bin/askpass",
        "SSH_AUTH_SOCK": "/tmp/agent.sock",
        "PATH": "/usr/bin",
    }.items():
        monkeypatch.setenv(name, value)
    environment = load_check_environment(tmp_path / "home")
    assert environment["HOME"] == environment["USERPROFILE"] == str(tmp_path / "home")
    assert environment["HF_HOME"] == str(tmp_path / "home" / ".cache" / "huggingface")
    assert os.listdir(tmp_path / "home") == [".cache"] and environment["PATH"] == "/usr/bin"
    dropped = {"XDG_CONFIG_HOME", "NETRC", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "GIT_ASKPASS", "SSH_AUTH_SOCK"}
    assert not dropped & set(environment)
    assert "secret" not in json.dumps(environment) and "/home/someone" not in json.dumps(environment)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("analysis/alpha.png", "analysis/alpha.png"),
        ("./a//b/../c.png", "a/c.png"),
        ("heads[1].png", "heads[1].png"),
        ("", None),
        ("/etc/passwd", None),
        ("../x.png", None),
        ("a/../../x.png", None),
        ("..", None),
        (".", None),
        ("..\\x.png", None),
        ("C:/Windows/x.png", None),
    ],
)
def test_folder_paths_stay_inside_the_folder(text, expected):
    assert folder_path(text) == expected


def test_only_regular_files_of_the_folder_itself_are_published(tmp_path):
    folder, outside = tmp_path / "folder", tmp_path / "outside"
    (folder / "figures").mkdir(parents=True)
    outside.mkdir()
    (folder / "figures" / "a.png").write_bytes(b"png")
    (outside / "b.png").write_bytes(b"private")
    (folder / "linked").symlink_to(outside, target_is_directory=True)
    (folder / "b.png").symlink_to(outside / "b.png")
    (folder / "c.png").symlink_to("figures/a.png")
    linked_root = tmp_path / "link-to-folder"
    linked_root.symlink_to(folder, target_is_directory=True)

    assert folder_file(folder, "figures/a.png", "--x") == folder / "figures" / "a.png"
    assert folder_file(linked_root, "figures/a.png", "--x") == linked_root / "figures" / "a.png"  # the folder itself
    for name, reason in [
        ("linked/b.png", "linked is a symbolic link"),
        ("b.png", "b.png is a symbolic link"),
        ("c.png", "c.png is a symbolic link"),
        ("../outside/b.png", "is not a path inside"),
        ("figures", "figures is not a regular file"),
    ]:
        with pytest.raises(HfEntmaxValueError, match=f"--x: .*{reason}"):
            folder_file(folder, name, "--x")
    with pytest.raises(HfEntmaxFileNotFoundError, match=r"--x: figures/missing\.png is not in"):
        folder_file(folder, "figures/missing.png", "--x")


def test_export_writes_nothing_outside_its_folder(model, tokenizer, tmp_path):
    figure = tmp_path / "figure.png"
    figure.write_bytes(b"png")
    for destination in ("../x.png", "/tmp/x.png", "analysis/../../x.png", ""):
        with pytest.raises(HfEntmaxValueError, match="is not a path inside the output folder"):
            export_hub_folder(model, tokenizer, tmp_path / "hub", extra_files={destination: figure})
    assert sorted(path.name for path in tmp_path.iterdir()) == ["figure.png"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"license": "mit\nfoo: bar"}, r"license 'mit\nfoo: bar' is not a license id"),
        ({"license": "Apache-2.0"}, "expected a lower-case id"),
        ({"source_lang": "de\n- xx"}, r"source_lang 'de\n- xx' is not a language code"),
        ({"target_lang": ""}, "target_lang '' is not a language code"),
        ({"model_name": "run\n---"}, "model_name must be one line of printable text"),
        ({"tags": ["ok", "a\tb"]}, "tags must be one line"),
        ({"datasets": ["org/data\nfoo: bar"]}, r"datasets 'org/data\nfoo: bar' is not a Hub repo id"),
        ({"base_model": "../model"}, "base_model '../model' is not a Hub repo id"),
        ({"model_id": 'me/x"); import os; ("'}, "model_id must not hold a quote or a backslash"),
    ],
)
def test_card_fields_that_reach_the_metadata_are_checked(fields, message):
    with pytest.raises(HfEntmaxValueError, match=re.escape(message)):
        ModelCardInfo(**fields)


def test_card_fields_from_a_summary_are_named_after_it():
    for summary, message in [
        ({**SUMMARY, "target_lang": "en\nlicense: other"}, "training_summary.json target_lang 'en"),
        ({**SUMMARY, "metrics": {"eval_bleu": "35"}}, "training_summary.json metrics.eval_bleu must be a finite"),
        ({**SUMMARY, "metrics": {"test_chrf": math.inf}}, "training_summary.json metrics.test_chrf must be a finite"),
        ({**SUMMARY, "evaluations": {"step": 1}}, "training_summary.json: evaluations holds a JSON dict, not a JSON"),
    ]:
        with pytest.raises(HfEntmaxValueError, match=re.escape(message)):
            ModelCardInfo.from_training_summary(summary)
    # A diverged run's loss is a number too: shown, not refused.
    info = ModelCardInfo.from_training_summary({**SUMMARY, "metrics": {**SUMMARY["metrics"], "eval_loss": math.nan}})
    assert math.isnan(info.eval_results[0].loss)
    # What the flags override is not the summary's to answer for.
    info = ModelCardInfo.from_training_summary({**SUMMARY, "source_lang": "de\nx"}, source_lang="de")
    assert info.source_lang == "de"


@pytest.mark.slow
def test_the_load_check_loads_only_the_files_it_is_given(model, tokenizer, tmp_path):
    folder = export_hub_folder(model, tokenizer, tmp_path / "hub")
    # Everything but a code file the model needs: the check must fail although the folder itself is complete
    # (that the selected files of a complete folder pass is tested by pushing a training output).
    without_code = sorted(path.name for path in folder.iterdir() if path.name != "entmax.py")
    with pytest.raises(HfEntmaxValueError, match=f"{folder} does not load without hf_entmax installed"):
        check_folder_loads(folder, files=without_code)


def test_a_model_trained_on_the_synthetic_pair_says_it_is_a_demonstration(model):
    summary = {**FULL_SUMMARY, "data": "built-in synthetic pair", "source_lang": "en", "target_lang": "syn"}
    card = render_model_card(model, ModelCardInfo.from_training_summary(summary))
    assert "## Intended uses & limitations\n\nA demonstration: it was trained on hf_entmax's synthetic" in card.text
    assert {result.dataset_name for result in card.data.eval_results} == {"hf_entmax synthetic pair"}
    assert card.data.datasets is None
