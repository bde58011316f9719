"""`hf-entmax train` as users start it: from scratch, from a MarianMT checkpoint, from a converted or trained
AdaptiveEntmaxMarian folder; the recipes it fills in, the stages it runs and the files it writes."""

import json
import math
import re
from pathlib import Path

import pytest
import torch
from helpers import PAIR, QUICK
from transformers import MarianConfig, MarianMTModel, Seq2SeqTrainingArguments

from hf_entmax import AdaptiveEntmaxMarianConfig, AdaptiveEntmaxMarianMTModel
from hf_entmax.cli import main
from hf_entmax.commands.train import parse_arguments
from hf_entmax.errors import HfEntmaxValueError
from hf_entmax.hub.model_card import scaling_tables
from hf_entmax.training.arguments import DataArguments, ModelArguments
from hf_entmax.training.model_loading import describe_alpha, describe_scaling, load_model, read_starting_point
from hf_entmax.training.recipes import apply_recipe, defaults_tables
from hf_entmax.training.run import tokenize_splits, train
from hf_entmax.training.synthetic import generate_pairs
from hf_entmax.training.tokenizer import train_joint_tokenizer


@pytest.fixture(scope="module")
def pairs():
    return generate_pairs(60, seed=5)


@pytest.fixture(scope="module")
def files(tmp_path_factory, pairs):
    folder = tmp_path_factory.mktemp("data")
    paths = {}
    for split, chunk in (("train", pairs[:40]), ("valid", pairs[40:50]), ("test", pairs[50:])):
        path = folder / f"{split}.tsv"
        path.write_text("".join(f"{source}\t{target}\n" for source, target in chunk), encoding="utf-8")
        paths[split] = str(path)
    return paths


@pytest.fixture(scope="module")
def train_tokenizer(pairs):
    return train_joint_tokenizer((text for pair in pairs for text in pair), vocab_size=200)


def marian_config(vocab_size: int) -> MarianConfig:
    return MarianConfig(
        vocab_size=vocab_size, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, forced_eos_token_id=1,
        init_std=0.5,  # scores far from uniform, so that α gets gradients a step can see
    )  # fmt: skip


@pytest.fixture(scope="module")
def marian_folder(tmp_path_factory, train_tokenizer):
    folder = tmp_path_factory.mktemp("opus-mt-en-syn")
    torch.manual_seed(0)
    MarianMTModel(marian_config(len(train_tokenizer))).save_pretrained(folder)
    train_tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def converted_folder(tmp_path_factory, marian_folder):
    folder = tmp_path_factory.mktemp("converted")
    assert main(["convert", "--model", str(marian_folder), "--output", str(folder), "--no-check_load"]) == 0
    return folder


@pytest.fixture(scope="module")
def adaptive_folder(tmp_path_factory, train_tokenizer):
    """An AdaptiveEntmaxMarian folder with learned α (distinct per head) and a fixed softmax cross-attention."""
    folder = tmp_path_factory.mktemp("adaptive")
    config = AdaptiveEntmaxMarianConfig(
        **{key: value for key, value in marian_config(len(train_tokenizer)).to_dict().items() if key != "model_type"},
        alpha_init="random",
        cross_alpha_init=1.0,
        cross_learn_alpha=False,
    )
    torch.manual_seed(1)
    AdaptiveEntmaxMarianMTModel(config).save_pretrained(folder)
    train_tokenizer.save_pretrained(folder)
    return folder


def loaded(folder, tokenizer, *flags: str) -> AdaptiveEntmaxMarianMTModel:
    model_args, _, _ = parse_arguments(["--model_name_or_path", str(folder), *flags])
    return load_model(model_args, tokenizer, 32)


# --- α settings at every starting point ------------------------------------------------------------------------


def test_fine_tuning_a_converted_model_trains_the_alpha_the_flags_ask_for(tmp_path, files, converted_folder, capsys):
    """The path the convert command recommends: convert (α = 1 fixed), then train with α flags."""
    output = tmp_path / "fine-tuned"
    argv = ["train", "--model_name_or_path", str(converted_folder), "--train_file", files["train"], *PAIR, *QUICK]
    argv += ["--learn_alpha", "True", "--alpha_init", "1.1", "--alpha_learning_rate", "0.5", "--warmup_steps", "0"]
    assert main([*argv, "--output_dir", str(output)]) == 0
    printed = capsys.readouterr().out
    assert "encoder self-attention: α learned per head, from 1.1 (given" in printed
    assert "α learning rate 0.5" in printed

    config = json.loads((output / "config.json").read_text())
    assert (config["learn_alpha"], config["alpha_init"]) == (True, 1.1)
    alphas = AdaptiveEntmaxMarianMTModel.from_pretrained(output).get_alphas()
    for kind, values in alphas.items():
        assert (values - 1.1).abs().min() > 1e-3, f"α of {kind} did not train: {values}"
    summary = json.loads((output / "training_summary.json").read_text())
    assert summary["alpha_settings"]["cross"] == {"init": 1.1, "learn": True, "minimum": 1.01, "maximum": 2.0}
    assert summary["base_model_type"] == "adaptive_entmax_marian" and summary["base_model_converted"] is True


def test_a_converted_softmax_model_without_alpha_flags_stays_softmax_and_says_so(converted_folder, train_tokenizer):
    model = loaded(converted_folder, train_tokenizer)
    assert all(not model.config.alpha_settings(kind).learn for kind in ("encoder_self", "decoder_self", "cross"))
    lines = describe_alpha(model, read_starting_point(str(converted_folder)), {})
    assert lines[0].startswith("encoder self-attention: α fixed at 1 (softmax) (checkpoint's)")
    assert lines[-1].startswith("Every head is softmax (α = 1, fixed): this run trains a softmax model.")


def test_a_marian_checkpoint_starts_with_learned_alpha_near_its_softmax(marian_folder, train_tokenizer):
    model = loaded(marian_folder, train_tokenizer)
    for values in model.get_alphas().values():
        torch.testing.assert_close(values, torch.full_like(values, 1.1), rtol=0, atol=1e-6)
    assert model.config.learn_alpha is True
    with torch.no_grad():  # the Marian weights came along
        source = MarianMTModel.from_pretrained(marian_folder)
        assert torch.equal(model.model.encoder.layers[0].fc1.weight, source.model.encoder.layers[0].fc1.weight)


def test_flags_not_given_keep_the_checkpoints_settings_and_learned_alpha_resumes(adaptive_folder, train_tokenizer):
    checkpoint = AdaptiveEntmaxMarianMTModel.from_pretrained(adaptive_folder)
    model = loaded(adaptive_folder, train_tokenizer)
    assert torch.equal(model.get_alphas()["encoder_self"], checkpoint.get_alphas()["encoder_self"])
    assert model.config.alpha_settings("cross").learn is False
    # A bound given keeps the learned values (clamped into the new bounds) and the checkpoint's other settings.
    narrowed = loaded(adaptive_folder, train_tokenizer, "--alpha_max", "1.6")
    expected = checkpoint.get_alphas()["encoder_self"].clamp(max=1.6)
    torch.testing.assert_close(narrowed.get_alphas()["encoder_self"], expected, rtol=0, atol=1e-6)


def test_alpha_init_given_restarts_learned_alpha_and_replaces_per_type_values(adaptive_folder, train_tokenizer):
    model = loaded(adaptive_folder, train_tokenizer, "--alpha_init", "1.3", "--learn_alpha", "True")
    for kind, values in model.get_alphas().items():
        torch.testing.assert_close(values, torch.full_like(values, 1.3), rtol=0, atol=1e-6, msg=kind)
    assert model.config.cross_learn_alpha is None and model.config.alpha_settings("cross").learn
    # A per-type flag changes only its type.
    model = loaded(adaptive_folder, train_tokenizer, "--cross_learn_alpha", "True", "--cross_alpha_init", "1.4")
    torch.testing.assert_close(model.get_alphas()["cross"], torch.full((1, 2), 1.4), rtol=0, atol=1e-6)
    assert torch.equal(
        model.get_alphas()["encoder_self"],
        AdaptiveEntmaxMarianMTModel.from_pretrained(adaptive_folder).get_alphas()["encoder_self"],
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--learn_alpha", "False"], "was learned per head in .*give --alpha_init"),
        (["--cross_learn_alpha", "True"], "fixed at 1.0 in .*give --alpha_init \\(e.g. 1.1\\)"),
    ],
)
def test_alpha_changes_that_would_invent_or_lose_values_are_refused(adaptive_folder, train_tokenizer, flags, message):
    with pytest.raises(HfEntmaxValueError, match=message):
        loaded(adaptive_folder, train_tokenizer, *flags)


def test_a_missing_or_foreign_model_is_one_line(tmp_path, files, capsys):
    argv = ["train", "--train_file", files["train"], *PAIR, *QUICK, "--output_dir", str(tmp_path / "out")]
    assert main([*argv, "--model_name_or_path", str(tmp_path / "nowhere")]) == 1
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text('{"model_type": "marian", ')
    assert main([*argv, "--model_name_or_path", str(tmp_path / "broken")]) == 1
    error = capsys.readouterr().err
    assert "config.json is not valid JSON" in error and len(error.strip().splitlines()) == 1


# --- recipes --------------------------------------------------------------------------------------------------


def test_a_fresh_model_gets_the_from_scratch_recipe():
    model_args, _, training_args = parse_arguments([])
    assert model_args.recipe == "from-scratch"
    assert training_args.learning_rate == 1e-3
    assert training_args.lr_scheduler_type.value == "inverse_sqrt"
    assert (training_args.warmup_steps, training_args.adam_beta2, training_args.weight_decay) == (0.1, 0.98, 0.0)
    assert model_args.alpha_learning_rate == pytest.approx(1e-2)


def test_a_checkpoint_gets_the_fine_tuning_recipe_and_given_flags_win(tmp_path):
    model_args, _, training_args = parse_arguments(["--model_name_or_path", "some/model", "--warmup_steps", "7"])
    assert model_args.recipe == "fine-tuning"
    assert (training_args.learning_rate, training_args.lr_scheduler_type.value) == (1e-4, "linear")
    assert training_args.warmup_steps == 7
    # α's rate follows a learning rate the user gives, at the recipe's ratio; a given α rate wins.
    model_args, _, training_args = parse_arguments(["--learning_rate", "2e-3"])
    assert (training_args.learning_rate, model_args.alpha_learning_rate) == (2e-3, pytest.approx(2e-2))
    model_args, _, _ = parse_arguments(["--alpha_learning_rate", "0"])
    assert model_args.alpha_learning_rate == 0.0  # 0 freezes α; it never means "the default"
    config = tmp_path / "run.yaml"
    config.write_text("model_name_or_path: some/model\nlearning_rate: 3.0e-4\n")
    model_args, _, training_args = parse_arguments([str(config)])
    assert (model_args.recipe, training_args.learning_rate, training_args.adam_beta2) == ("fine-tuning", 3e-4, 0.98)


def test_recipe_none_is_trainers_defaults():
    model_args, _, training_args = parse_arguments(["--recipe", "none"])
    assert (training_args.learning_rate, training_args.lr_scheduler_type.value) == (5e-5, "linear")
    assert training_args.adam_beta2 == 0.999
    assert model_args.alpha_learning_rate == 5e-5


def test_a_flag_equal_to_trainers_default_is_still_given():
    # The command line knows which flags were given: --learning_rate 5e-5 is the user's, not "not given".
    model_args, _, training_args = parse_arguments(["--learning_rate", "5e-5"])
    assert (model_args.recipe, training_args.learning_rate) == ("from-scratch", 5e-5)


def test_python_gets_the_recipe_the_command_gets():
    model_args, training_args = ModelArguments(), Seq2SeqTrainingArguments(output_dir="unused", warmup_steps=7)
    training_args = apply_recipe(model_args, training_args)
    assert (model_args.recipe, training_args.learning_rate, training_args.adam_beta2) == ("from-scratch", 1e-3, 0.98)
    assert training_args.warmup_steps == 7  # a setting given (not Trainer's default) wins
    assert model_args.alpha_learning_rate == pytest.approx(1e-2) and model_args.recipe_applied
    assert apply_recipe(ModelArguments(recipe="none"), Seq2SeqTrainingArguments(output_dir="x")).learning_rate == 5e-5


@pytest.mark.slow
def test_train_from_python_applies_the_recipe(tmp_path, files):
    model_args = ModelArguments(model_size="tiny", vocab_size=200)
    data_args = DataArguments(train_file=files["train"], source_lang="en", target_lang="syn")
    training_args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path / "run"), max_steps=2, save_strategy="no", report_to="none", use_cpu=True
    )
    summary = train(model_args, data_args, training_args)
    assert summary["recipe"] == "from-scratch"
    hyperparameters = summary["hyperparameters"]
    assert (hyperparameters["learning_rate"], hyperparameters["lr_scheduler_type"]) == (1e-3, "inverse_sqrt")
    assert hyperparameters["alpha_learning_rate"] == pytest.approx(1e-2)


def test_the_docs_show_the_defaults_table():
    training_docs = (Path(__file__).resolve().parent.parent / "docs" / "training.md").read_text(encoding="utf-8")
    regenerate = (
        'python -c "from benchmarks.tables import write_tables; from hf_entmax.training.recipes import '
        "defaults_tables; write_tables(['docs/training.md'], {'defaults': defaults_tables()})\""
    )
    assert f"<!-- table:defaults -->\n{defaults_tables()}\n<!-- /table:defaults -->" in training_docs, regenerate


@pytest.mark.slow
def test_alpha_learning_rate_zero_freezes_alpha(tmp_path, files):
    output = tmp_path / "frozen"
    argv = ["train", "--train_file", files["train"], *PAIR, *QUICK, "--model_size", "tiny", "--vocab_size", "200"]
    assert main([*argv, "--alpha_init", "1.4", "--alpha_learning_rate", "0", "--output_dir", str(output)]) == 0
    for values in AdaptiveEntmaxMarianMTModel.from_pretrained(output).get_alphas().values():
        torch.testing.assert_close(values, torch.full_like(values, 1.4), rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--alpha_learning_rate", "-1"], "--alpha_learning_rate must be a finite number ≥ 0"),
        (["--alpha_learning_rate", "nan"], "--alpha_learning_rate must be a finite number ≥ 0"),
        (["--recipe", "fast"], "--recipe must be one of auto, from-scratch, fine-tuning, none"),
        (["--dropout", "1.5"], "--dropout must be in \\[0, 1\\)"),
        (["--attention_dropout", "1"], "--attention_dropout must be in \\[0, 1\\), got 1.0"),
        (["--max_source_length", "0"], "--max_source_length must be a positive whole number"),
        (["--vocab_size", "5"], "--vocab_size must be at least 8"),
        (["--num_beam", "4"], "unknown argument: --num_beam \\(did you mean --num_beams\\?\\)"),
        (["--learning_rat", "1e-3"], "unknown argument: --learning_rat \\(did you mean --learning_rate\\?\\)"),
        (["--do_train", "False", "--do_eval", "False", "--do_predict", "False"], "there is nothing to do"),
        (["--num_beams", "2", "--generation_num_beams", "3"], "--num_beams 2 and --generation_num_beams 3 disagree"),
        (["--learning_rate", "-1"], "--learning_rate must be a finite number ≥ 0, got -1.0"),
        (["--per_device_train_batch_size", "0"], "--per_device_train_batch_size must be a positive whole number"),
        (
            ["--max_steps", "abc"],
            "argument --max_steps/--max-steps: invalid int value: 'abc'; see hf-entmax train --help",
        ),
        (["--learn_alpha", "maybe"], "argument --learn_alpha/--learn-alpha: Truthy value expected"),
        (
            ["--attention_scaling", "asentmx"],
            "--attention_scaling must be one of none, asentmax, asentmax_per_token, ssmax, softmax_matched, got "
            "'asentmx'",
        ),
        (["--attention_scaling_offset", "-1"], "--attention_scaling_offset must be a finite number >= 0, got '-1'"),
    ],
)
def test_bad_flags_are_one_line(tmp_path, files, capsys, flags, message):
    argv = ["train", "--train_file", files["train"], *PAIR, *QUICK, "--output_dir", str(tmp_path / "out")]
    assert main([*argv, "--model_size", "tiny", *flags]) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1, error
    assert error.startswith("hf-entmax train: error: ")
    assert re.search(message, error), error


def test_attention_dropout_overrides_dropout_for_the_attention_probabilities(adaptive_folder, train_tokenizer):
    model_args, _, _ = parse_arguments(["--attention_dropout", "0"])
    fresh = load_model(model_args, train_tokenizer, 32)
    assert (fresh.config.dropout, fresh.config.attention_dropout) == (0.1, 0.0)
    fine_tuned = loaded(adaptive_folder, train_tokenizer, "--dropout", "0.2", "--attention_dropout", "0.05")
    assert (fine_tuned.config.dropout, fine_tuned.config.attention_dropout) == (0.2, 0.05)
    assert fine_tuned.model.encoder.layers[0].self_attn.dropout == 0.05  # what the attention modules apply
    kept = loaded(adaptive_folder, train_tokenizer, "--dropout", "0.2")
    assert kept.config.attention_dropout == 0.2


def test_a_fresh_model_scales_queries_softmax_matched_unless_told_otherwise(train_tokenizer):
    """The default that keeps a random-α start from failing on long inputs; `--attention_scaling none` is the paper's
    model, and a flag for one attention type leaves the default on the others."""
    fresh = read_starting_point(None)
    model_args, _, _ = parse_arguments([])
    model = load_model(model_args, train_tokenizer, 32)
    assert all(
        model.config.scaling_method(kind) == "softmax_matched" for kind in ("encoder_self", "decoder_self", "cross")
    )
    lines = describe_scaling(model, fresh, model_args.attention_options_given())
    assert lines[0] == "encoder self-attention: queries scaled by n^(1 − α) for n keys (softmax_matched, default)"
    model_args, _, _ = parse_arguments(["--attention_scaling", "none"])
    assert load_model(model_args, train_tokenizer, 32).config.scaling_method("cross") == "none"
    model_args, _, _ = parse_arguments(["--cross_attention_scaling", "asentmax"])
    mixed = load_model(model_args, train_tokenizer, 32).config
    assert (mixed.scaling_method("encoder_self"), mixed.scaling_method("cross")) == ("softmax_matched", "asentmax")


def test_a_softmax_run_is_not_told_its_queries_are_scaled(train_tokenizer):
    """The softmax twin (`--alpha_init 1 --learn_alpha False`) keeps the default softmax_matched in its config, but
    n^(1 − 1) = 1: neither the training printout nor the model card may say its queries are scaled."""
    model_args, _, _ = parse_arguments(["--alpha_init", "1", "--learn_alpha", "False"])
    model = load_model(model_args, train_tokenizer, 32)
    assert model.config.attention_scaling == "softmax_matched"
    assert describe_scaling(model, read_starting_point(None), model_args.attention_options_given()) == []
    assert scaling_tables(model) is None


# --- query scaling (ASEntmax) at every starting point ---------------------------------------------------------


@pytest.mark.slow
def test_a_fresh_run_with_attention_scaling_learns_and_records_the_scales(tmp_path, files, capsys):
    output = tmp_path / "scaled"
    argv = ["train", "--train_file", files["train"], *PAIR, *QUICK, "--model_size", "tiny"]
    argv += ["--attention_scaling", "asentmax", "--cross_attention_scaling", "softmax_matched", "--warmup_steps", "0"]
    argv += ["--logging_steps", "1"]
    assert main([*argv, "--output_dir", str(output)]) == 0
    printed = capsys.readouterr().out
    assert "Query scaling per attention type:" in printed
    assert "encoder self-attention: queries scaled by δ + β·log(n + 1)^γ per head (ASEntmax, new; given)" in printed
    assert "cross-attention:        queries scaled by n^(1 − α) for n keys (softmax_matched, given)" in printed

    config = json.loads((output / "config.json").read_text())
    assert (config["attention_scaling"], config["cross_attention_scaling"]) == ("asentmax", "softmax_matched")
    summary = json.loads((output / "training_summary.json").read_text())
    assert set(summary["attention_scales"]) == {"encoder_self", "decoder_self"}
    trained = AdaptiveEntmaxMarianMTModel.from_pretrained(output).get_attention_scales()
    assert summary["attention_scales"]["encoder_self"]["beta"] == trained["encoder_self"]["beta"].tolist()
    history = json.loads((output / "scale_history.json").read_text())
    assert [record["step"] for record in history["beta"]] == [record["step"] for record in history["gamma"]]
    last_gamma = history["gamma"][-1]
    assert set(last_gamma) == {"step", "encoder_self", "decoder_self"} and last_gamma["step"] == 2
    torch.testing.assert_close(  # the last logged step is the saved model's (logs round to 5 decimals)
        torch.tensor(last_gamma["decoder_self"]), trained["decoder_self"]["gamma"], rtol=0, atol=1e-5
    )
    card = (output / "README.md").read_text()
    assert "### Query scaling" in card and "**Decoder self-attention**: a query that may attend" in card
    assert (
        "**Cross-attention** (softmax_matched): a query that may attend to n tokens is multiplied by n^(1 − α)" in card
    )


def test_scaling_turned_on_for_a_checkpoint_starts_new_parameters_and_keeps_the_weights(
    adaptive_folder, train_tokenizer
):
    checkpoint = AdaptiveEntmaxMarianMTModel.from_pretrained(adaptive_folder)
    model = loaded(adaptive_folder, train_tokenizer, "--cross_attention_scaling", "asentmax")
    assert set(model.get_attention_scales()) == {"cross"}
    beta = model.get_attention_scales()["cross"]["beta"]
    assert ((beta >= 0.1) & (beta <= 1.0)).all()  # the config's start, not zeros or garbage
    assert torch.equal(model.get_alphas()["encoder_self"], checkpoint.get_alphas()["encoder_self"])
    lines = describe_scaling(model, read_starting_point(str(adaptive_folder)), {"cross_attention_scaling": "asentmax"})
    assert len(lines) == 1 and lines[0].startswith("cross-attention:        queries scaled")
    assert "(ASEntmax, new; given)" in lines[0]


def test_scaling_of_a_checkpoint_resumes_and_can_be_turned_off(tmp_path, adaptive_folder, train_tokenizer):
    scaled = loaded(adaptive_folder, train_tokenizer, "--attention_scaling", "asentmax")
    scaled.save_pretrained(tmp_path / "scaled")
    resumed = loaded(tmp_path / "scaled", train_tokenizer)
    for kind, scales in scaled.get_attention_scales().items():
        assert torch.equal(resumed.get_attention_scales()[kind]["gamma"], scales["gamma"])
    lines = describe_scaling(resumed, read_starting_point(str(tmp_path / "scaled")), {})
    assert all("resumed from the checkpoint; checkpoint's" in line for line in lines) and len(lines) == 3
    # A global flag replaces the checkpoint's per-type values, as --alpha_init does.
    plain = loaded(tmp_path / "scaled", train_tokenizer, "--attention_scaling", "none")
    assert plain.get_attention_scales() == {} and plain.config.cross_attention_scaling is None


def test_a_marian_checkpoint_with_attention_scaling(marian_folder, train_tokenizer):
    model = loaded(marian_folder, train_tokenizer, "--attention_scaling", "asentmax")
    assert set(model.get_attention_scales()) == {"encoder_self", "decoder_self", "cross"}
    assert model.config.learn_alpha is True  # the MarianMT start's α, as without scaling


def test_convert_with_attention_scaling_reports_another_function(tmp_path, marian_folder, capsys):
    output = tmp_path / "converted-scaled"
    argv = ["convert", "--model", str(marian_folder), "--output", str(output), "--no-check_load"]
    assert main([*argv, "--decoder_self_attention_scaling", "asentmax"]) == 0
    printed = capsys.readouterr().out
    assert "queries are scaled (ASEntmax) in decoder_self, so the converted model is not expected" in printed
    assert set(AdaptiveEntmaxMarianMTModel.from_pretrained(output).get_attention_scales()) == {"decoder_self"}


# --- stages and the files of a run ----------------------------------------------------------------------------


def test_a_run_writes_the_files_run_translation_users_expect(tmp_path, files, capsys):
    output = tmp_path / "run"
    argv = ["train", "--train_file", files["train"], "--validation_file", files["valid"], "--test_file", files["test"]]
    argv += [*PAIR, *QUICK, "--model_size", "tiny", "--vocab_size", "200", "--output_dir", str(output)]
    argv += ["--eval_strategy", "steps", "--eval_steps", "1", "--logging_steps", "1", "--num_beams", "2"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "Recipe from-scratch (flags given win): learning rate 0.001, inverse_sqrt schedule" in printed

    for name in ("train_results.json", "eval_results.json", "test_results.json", "all_results.json"):
        assert (output / name).is_file(), name
    assert json.loads((output / "trainer_state.json").read_text())["global_step"] == 2
    assert {"eval_bleu", "test_bleu", "train_loss"} <= set(json.loads((output / "all_results.json").read_text()))
    predictions = (output / "generated_predictions.txt").read_text(encoding="utf-8").splitlines()
    assert len(predictions) == 10

    summary = json.loads((output / "training_summary.json").read_text())
    hyperparameters = summary["hyperparameters"]
    assert hyperparameters["lr_scheduler_type"] == "inverse_sqrt"
    assert hyperparameters["max_steps"] == 2 and "num_train_epochs" not in hyperparameters
    assert hyperparameters["generation_num_beams"] == 2 and hyperparameters["total_train_batch_size"] == 8
    assert summary["recipe"] == "from-scratch" and summary["model_name"] == "run"
    assert [row["step"] for row in summary["evaluations"]] == [1, 2]
    assert all(math.isfinite(row["bleu"]) and row["training_loss"] is not None for row in summary["evaluations"])
    assert set(summary["framework_versions"]) >= {"transformers", "torch", "sacrebleu"}


def test_do_train_false_evaluates_a_checkpoint_without_training_it(tmp_path, files, adaptive_folder):
    output = tmp_path / "evaluation"
    argv = ["train", "--model_name_or_path", str(adaptive_folder), "--validation_file", files["valid"]]
    argv += ["--test_file", files["test"], *PAIR, *QUICK, "--do_train", "False", "--output_dir", str(output)]
    assert main(argv) == 0
    assert (output / "eval_results.json").is_file() and (output / "test_results.json").is_file()
    assert not (output / "model.safetensors").exists() and not (output / "train_results.json").exists()
    summary = json.loads((output / "training_summary.json").read_text())
    assert summary["did_train"] is False and summary["global_step"] == 0 and summary["recipe"] is None


def test_a_stage_asked_for_needs_its_data(tmp_path, files, capsys):
    argv = ["train", "--train_file", files["train"], *PAIR, *QUICK, "--model_size", "tiny"]
    assert main([*argv, "--do_train", "--do_predict", "--output_dir", str(tmp_path / "out")]) == 1
    assert "--do_predict needs test data" in capsys.readouterr().err


def test_run_translation_preprocessing_flags(train_tokenizer, pairs):
    import datasets

    rows = [{"en": source, "syn": target} for source, target in pairs[:6]]
    raw = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"translation": rows}),
            "validation": datasets.Dataset.from_dict({"translation": rows}),
        }
    )
    _, _, training_args = parse_arguments([])
    data_args = DataArguments(source_prefix="under under ", val_max_target_length=4, max_target_length=20)
    data_args.resolve_lengths(None)
    tokenized = tokenize_splits(raw, train_tokenizer, data_args, "en", "syn", training_args)
    decoded = train_tokenizer.decode(tokenized["train"][0]["input_ids"], skip_special_tokens=True)
    assert decoded.startswith("under under ") and not pairs[0][0].startswith("under")
    assert max(len(labels) for labels in tokenized["validation"]["labels"]) == 4
    assert max(len(labels) for labels in tokenized["train"]["labels"]) > 4

    padded = DataArguments(pad_to_max_length=True, max_source_length=24, max_target_length=24)
    tokenized = tokenize_splits(raw, train_tokenizer, padded, "en", "syn", training_args)
    assert {len(ids) for ids in tokenized["train"]["input_ids"]} == {24}
    labels = tokenized["train"]["labels"]
    assert {len(row) for row in labels} == {24}
    assert any(-100 in row for row in labels) and not any(train_tokenizer.pad_token_id in row for row in labels)
    kept = DataArguments(
        pad_to_max_length=True, max_source_length=24, max_target_length=24, ignore_pad_token_for_loss=False
    )
    tokenized = tokenize_splits(raw, train_tokenizer, kept, "en", "syn", training_args)
    labels = tokenized["train"]["labels"]
    assert any(train_tokenizer.pad_token_id in row for row in labels) and not any(-100 in row for row in labels)


def test_lengths_beyond_the_models_positions_are_refused(tmp_path, files, marian_folder, capsys):
    argv = ["train", "--model_name_or_path", str(marian_folder), "--train_file", files["train"], *PAIR, *QUICK]
    assert main([*argv, "--max_source_length", "100", "--output_dir", str(tmp_path / "out")]) == 1
    assert "--max_source_length 100 is longer than the model's 64 positions" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--model_name_or_path", "org/model", "--model_size", "tiny"], "--model_size tiny applies to a fresh model"),
        (["--model_name_or_path", "org/model", "--vocab_size", "500"], "--vocab_size applies to a tokenizer trained"),
        (["--tokenizer_name", "org/tokenizer", "--vocab_size", "500"], "--vocab_size applies to a tokenizer trained"),
    ],
)
def test_flags_that_would_be_ignored_are_refused(flags, message):
    with pytest.raises(HfEntmaxValueError, match=message):
        parse_arguments(flags)


@pytest.mark.slow
def test_a_run_never_replaces_files_it_did_not_write(tmp_path, files, adaptive_folder, capsys):
    argv = ["train", "--train_file", files["train"], *PAIR, *QUICK, "--model_size", "tiny", "--vocab_size", "200"]
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("my project\n")
    assert main([*argv, "--output_dir", str(project)]) == 1
    assert "holds files that are not from an earlier hf-entmax train (README.md)" in capsys.readouterr().err
    assert (project / "README.md").read_text() == "my project\n"
    # The model being fine-tuned is never the output.
    fine_tune = ["train", "--model_name_or_path", str(adaptive_folder), "--train_file", files["train"], *PAIR, *QUICK]
    assert main([*fine_tune, "--output_dir", str(adaptive_folder), "--overwrite_output_dir", "True"]) == 1
    assert "is the model being trained from" in capsys.readouterr().err
    assert main([*argv, "--output_dir", files["train"]]) == 1
    assert "is a file; give a folder" in capsys.readouterr().err
    # An earlier run's folder is written again; a foreign one only when asked.
    run = tmp_path / "run"
    assert main([*argv, "--output_dir", str(run)]) == 0
    assert main([*argv, "--output_dir", str(run)]) == 0
    assert main([*argv, "--output_dir", str(project), "--overwrite_output_dir", "True"]) == 0
    assert (project / "README.md").read_text() != "my project\n" and (project / "model.safetensors").is_file()


def test_a_diverging_run_stops_with_one_line_instead_of_saving_a_broken_model(tmp_path, files, capsys):
    output = tmp_path / "diverged"
    argv = ["train", "--train_file", files["train"], *PAIR, *QUICK, "--model_size", "tiny", "--vocab_size", "200"]
    argv += ["--learning_rate", "1e6", "--warmup_steps", "0", "--max_steps", "8", "--output_dir", str(output)]
    assert main(argv) == 1
    assert re.search(r"training diverged at step \d: the loss is nan", capsys.readouterr().err)
    assert not (output / "model.safetensors").exists()
