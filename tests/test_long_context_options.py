"""The position options and the query scalings of long inputs (RoPE, ALiBi, NAPE; SSMax, per-token ASEntmax) in
everything around the model: `hf-entmax train`'s flags and starting points, the length limits of training,
translation and analysis, the model card and the analysis report."""

import json
import logging
import math
import re
from pathlib import Path

import pytest
import torch
from helpers import PAIR, QUICK, SENTENCES, tiny_model
from transformers import AutoTokenizer, MarianConfig, MarianMTModel, Seq2SeqTrainingArguments

from hf_entmax import AdaptiveEntmaxMarianMTModel
from hf_entmax.analysis.collect import analyze_model, teacher_forced_attention
from hf_entmax.analysis.findings import findings
from hf_entmax.analysis.report import model_card_section, write_report
from hf_entmax.cli import main
from hf_entmax.commands.train import parse_arguments
from hf_entmax.commands.translate import source_length_limit, translate_lines
from hf_entmax.errors import HfEntmaxValueError
from hf_entmax.hub.model_card import ModelCardInfo, render_model_card, scaling_tables
from hf_entmax.training.arguments import DataArguments
from hf_entmax.training.model_loading import describe_scaling, load_model, read_starting_point
from hf_entmax.training.run import check_lengths
from hf_entmax.training.synthetic import generate_pairs
from hf_entmax.training.tokenizer import train_joint_tokenizer
from hf_entmax.training.trainer import AdaptiveEntmaxTrainer, attention_logs


FRESH = ["--model_size", "tiny", "--vocab_size", "200"]
# About twice as many tokens as the 64 positions of the tiny models' tables (and fewer than a tokenizer's 512).
LONG_LINE = " ".join(SENTENCES[0::2] * 2)


@pytest.fixture(scope="module")
def pairs():
    return generate_pairs(60, seed=5)


@pytest.fixture(scope="module")
def train_file(tmp_path_factory, pairs):
    path = tmp_path_factory.mktemp("data") / "train.tsv"
    path.write_text("".join(f"{source}\t{target}\n" for source, target in pairs[:40]), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def train_tokenizer(pairs):
    return train_joint_tokenizer((text for pair in pairs for text in pair), vocab_size=200)


@pytest.fixture(scope="module")
def nape_folder(tmp_path_factory, train_tokenizer):
    """A trained-model folder with NAPE positions and a table of only 64 (unused) sinusoidal positions."""
    folder = tmp_path_factory.mktemp("nape")
    tiny_model(vocab_size=len(train_tokenizer), position_embedding_type="nape").save_pretrained(folder)
    train_tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def marian_folder(tmp_path_factory, train_tokenizer):
    folder = tmp_path_factory.mktemp("opus-mt")
    config = MarianConfig(
        vocab_size=len(train_tokenizer), d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, forced_eos_token_id=1,
    )  # fmt: skip
    torch.manual_seed(0)
    MarianMTModel(config).save_pretrained(folder)
    train_tokenizer.save_pretrained(folder)
    return folder


def training_docs_line(start: str) -> str:
    """The line of docs/training.md that starts with ``start``."""
    lines = (Path(__file__).resolve().parent.parent / "docs" / "training.md").read_text(encoding="utf-8").splitlines()
    return next(line for line in lines if line.startswith(start))


def fresh_model(tokenizer, *flags: str) -> AdaptiveEntmaxMarianMTModel:
    model_args, _, _ = parse_arguments(["--model_size", "tiny", *flags])
    return load_model(model_args, tokenizer, 32)


def checkpoint_model(folder, tokenizer, *flags: str) -> AdaptiveEntmaxMarianMTModel:
    model_args, _, _ = parse_arguments(["--model_name_or_path", str(folder), *flags])
    return load_model(model_args, tokenizer, 32)


# --- hf-entmax train --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_fresh_run_trains_the_positions_it_is_given_and_says_so_everywhere(tmp_path, train_file, capsys):
    output = tmp_path / "nape"
    argv = ["train", "--train_file", train_file, *PAIR, *QUICK, *FRESH, "--position_embedding_type", "nape"]
    assert main([*argv, "--layer_style", "pre_norm", "--output_dir", str(output)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert training_docs_line("Positions (given): NAPE") in printed  # docs/training.md shows the line
    config = json.loads((output / "config.json").read_text())
    assert (config["position_embedding_type"], config["layer_style"]) == ("nape", "pre_norm")
    summary = json.loads((output / "training_summary.json").read_text())
    assert summary["positions"] == {"type": "nape", "limit": None}
    # The tokenizer trained for the model truncates nowhere: the model takes inputs of any length.
    assert AutoTokenizer.from_pretrained(output).model_max_length > 10**20
    card = (output / "README.md").read_text(encoding="utf-8")
    assert "**Positions**: NAPE: " in card and "inputs may be of any length" in card
    assert "Marian's encoder–decoder, with pre-norm layers (LayerNorm before each block" in card


def test_the_layer_style_is_a_fresh_models_choice(marian_folder):
    with pytest.raises(
        HfEntmaxValueError, match="--layer_style gemma2 applies to a fresh model; --model_name_or_path"
    ):
        parse_arguments(["--model_name_or_path", str(marian_folder), "--layer_style", "gemma2"])
    with pytest.raises(HfEntmaxValueError, match="--layer_style must be one of marian, pre_norm, gemma2, got 'post'"):
        parse_arguments(["--layer_style", "post"])


@pytest.mark.parametrize(
    ("flags", "positions", "theta"),
    [
        ([], "sinusoidal", 10000.0),
        (["--position_embedding_type", "rope", "--rope_theta", "500"], "rope", 500.0),
        (["--position_embedding_type", "alibi"], "alibi", 10000.0),
        (["--position_embedding_type", "none"], "none", 10000.0),
        (["--cross_attention_positions", "rope", "--rope_theta", "500"], "sinusoidal", 500.0),
        (["--position_embedding_type", "rope", "--cross_attention_positions", "nape"], "rope", 10000.0),
    ],
)
def test_position_flags_make_a_fresh_models_config(train_tokenizer, flags, positions, theta):
    config = fresh_model(train_tokenizer, *flags).config
    assert (config.position_embedding_type, config.rope_theta) == (positions, theta)
    assert config.encoder_alibi_directions == "both"
    given = dict(zip(flags[::2], flags[1::2], strict=True))
    assert config.cross_attention_positions == given.get("--cross_attention_positions", "none")


def test_rotated_cross_attention_is_a_fresh_models_choice_and_a_checkpoints_own(
    tmp_path, marian_folder, train_tokenizer
):
    tiny_model(vocab_size=len(train_tokenizer), cross_attention_positions="rope").save_pretrained(tmp_path)
    assert checkpoint_model(tmp_path, train_tokenizer).config.cross_attention_positions == "rope"
    assert checkpoint_model(tmp_path, train_tokenizer, "--rope_theta", "10000").config.rope_theta == 10000.0
    with pytest.raises(HfEntmaxValueError, match=r"--cross_attention_positions none: .* has 'rope', which its"):
        checkpoint_model(tmp_path, train_tokenizer, "--cross_attention_positions", "none")
    with pytest.raises(HfEntmaxValueError, match=r"--cross_attention_positions rope: .* has 'none', which its"):
        checkpoint_model(marian_folder, train_tokenizer, "--cross_attention_positions", "rope")


def test_split_directions_are_a_fresh_models_choice_and_a_checkpoints_own(nape_folder, train_tokenizer):
    split = fresh_model(train_tokenizer, "--position_embedding_type", "nape", "--encoder_alibi_directions", "split")
    assert split.config.encoder_alibi_directions == "split"
    assert split.model.encoder.layers[0].self_attn.alibi_directions == (-1, 1, 0, 0)
    with pytest.raises(HfEntmaxValueError, match=r"--encoder_alibi_directions split: .* has .both., which its"):
        checkpoint_model(nape_folder, train_tokenizer, "--encoder_alibi_directions", "split")


def test_a_checkpoint_keeps_its_positions_and_refuses_others(nape_folder, marian_folder, train_tokenizer):
    assert checkpoint_model(nape_folder, train_tokenizer).config.position_embedding_type == "nape"
    same = checkpoint_model(nape_folder, train_tokenizer, "--position_embedding_type", "nape")
    assert same.config.position_embedding_type == "nape"
    with pytest.raises(HfEntmaxValueError, match=r"--position_embedding_type rope: .* has nape positions, which its"):
        checkpoint_model(nape_folder, train_tokenizer, "--position_embedding_type", "rope")
    with pytest.raises(HfEntmaxValueError, match=r"--position_embedding_type nape: .* has sinusoidal positions"):
        checkpoint_model(marian_folder, train_tokenizer, "--position_embedding_type", "nape")
    with pytest.raises(HfEntmaxValueError, match=r"--rope_theta applies to RoPE positions, but the model's are nape"):
        checkpoint_model(nape_folder, train_tokenizer, "--rope_theta", "500")


def test_a_rope_checkpoint_keeps_its_theta(tmp_path, train_tokenizer):
    tiny_model(vocab_size=len(train_tokenizer), position_embedding_type="rope", rope_theta=100.0).save_pretrained(
        tmp_path
    )
    assert checkpoint_model(tmp_path, train_tokenizer, "--rope_theta", "100").config.rope_theta == 100.0
    with pytest.raises(HfEntmaxValueError, match=r"--rope_theta 500: .* rotates with θ = 100, which its weights"):
        checkpoint_model(tmp_path, train_tokenizer, "--rope_theta", "500")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--position_embedding_type", "rotary"],
            "--position_embedding_type must be one of sinusoidal, rope, alibi, nape, none, got 'rotary'",
        ),
        (["--rope_theta", "1"], "--rope_theta must be a finite number > 1, got '1'"),
        (["--encoder_alibi_directions", "left"], "--encoder_alibi_directions must be one of both, split, got 'left'"),
        (
            ["--cross_attention_positions", "sinusoidal"],
            "--cross_attention_positions must be one of none, rope, alibi, nape, got 'sinusoidal'",
        ),
        (
            ["--encoder_alibi_directions", "split"],
            "invalid model settings: `encoder_alibi_directions`='split' splits the heads of ALiBi's distance penalty",
        ),
        (["--rope_theta", "500"], "--rope_theta applies to RoPE positions, but the model's are sinusoidal"),
        (["--attention_scaling_heads", "half"], "--attention_scaling_heads must be one of all, nope, got 'half'"),
        (
            ["--attention_scaling", "ssmax", "--attention_scaling_heads", "nope"],
            "invalid model settings: `attention_scaling_heads`='nope' scales the heads without a position bias",
        ),
    ],
)
def test_bad_position_and_scaling_flags_are_one_line(tmp_path, train_file, capsys, flags, message):
    argv = ["train", "--train_file", train_file, *PAIR, *QUICK, *FRESH, "--output_dir", str(tmp_path / "out")]
    assert main([*argv, *flags]) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1, error
    assert error.startswith("hf-entmax train: error: ")
    assert message in error, error


def test_a_checkpoint_start_with_other_positions_is_one_line(tmp_path, train_file, nape_folder, capsys):
    argv = ["train", "--model_name_or_path", str(nape_folder), "--train_file", train_file, *PAIR, *QUICK]
    assert main([*argv, "--position_embedding_type", "sinusoidal", "--output_dir", str(tmp_path / "out")]) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1, error
    assert re.search(r"--position_embedding_type sinusoidal: .* has nape positions, which its weights were", error)


# --- length limits ----------------------------------------------------------------------------------------------


def test_relative_positions_do_not_limit_training_lengths(nape_folder, marian_folder, train_tokenizer):
    data_args = DataArguments(max_source_length=100, max_target_length=100)
    check_lengths(checkpoint_model(nape_folder, train_tokenizer), data_args, 100)  # 64 positions in its table
    with pytest.raises(HfEntmaxValueError, match="--max_source_length 100 is longer than the model's 64 positions"):
        check_lengths(checkpoint_model(marian_folder, train_tokenizer), data_args, 100)
    # Lengths not given default to 128 tokens, not to the unused table's 64.
    defaults = DataArguments()
    defaults.resolve_lengths(None)
    assert defaults.max_source_length == 128


@pytest.mark.slow
def test_a_relative_position_checkpoint_trains_on_inputs_longer_than_its_table(tmp_path, train_file, nape_folder):
    argv = ["train", "--model_name_or_path", str(nape_folder), "--train_file", train_file, *PAIR, *QUICK]
    assert main([*argv, "--max_source_length", "100", "--output_dir", str(tmp_path / "out")]) == 0


def test_translate_does_not_cap_inputs_or_outputs_of_relative_positions(tokenizer, caplog):
    model = tiny_model(seed=2, vocab_size=len(tokenizer), init_std=2.0, position_embedding_type="nape")
    assert source_length_limit(model, tokenizer) == tokenizer.model_max_length  # the tokenizer's own, not 64
    assert len(tokenizer(LONG_LINE)["input_ids"]) > model.config.max_position_embeddings
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_entmax.commands.translate"):
        # An output limit past the 64 positions of the table: no positions are needed for it.
        translation = translate_lines(model, tokenizer, [LONG_LINE], num_beams=1, max_new_tokens=80, progress=False)
    assert len(tokenizer(translation[0])["input_ids"]) > 64
    assert [record for record in caplog.records if record.name.startswith("hf_entmax")] == []
    with torch.inference_mode():
        output_ids = model.generate(**tokenizer(LONG_LINE, return_tensors="pt"), num_beams=1, max_length=81)
    assert translation == [tokenizer.decode(output_ids[0], skip_special_tokens=True).strip()]


def test_analysis_reads_sentences_longer_than_the_table_of_a_relative_position_model(tokenizer):
    model = tiny_model(vocab_size=len(tokenizer), position_embedding_type="rope")
    forced = teacher_forced_attention(model, tokenizer, [LONG_LINE], [LONG_LINE], max_length=200)
    assert forced.inputs["input_ids"].shape[1] == len(tokenizer(LONG_LINE)["input_ids"]) > 64
    sinusoidal = teacher_forced_attention(tiny_model(vocab_size=len(tokenizer)), tokenizer, [LONG_LINE], None, 200)
    assert sinusoidal.inputs["input_ids"].shape[1] == 63  # the start token takes the 64th position


# --- what the card and the report say ---------------------------------------------------------------------------


def test_the_card_and_the_analysis_report_say_which_positions_the_model_uses(tmp_path, tokenizer):
    model = tiny_model(vocab_size=len(tokenizer), position_embedding_type="rope", rope_theta=500.0)
    card = str(render_model_card(model, ModelCardInfo(model_id="org/rope")))
    assert "**Positions**: RoPE (θ = 500): self-attention rotates queries and keys by their position;" in card
    sinusoidal = str(render_model_card(tiny_model(vocab_size=len(tokenizer)), ModelCardInfo(model_id="org/plain")))
    assert "**Positions**: sinusoidal (Marian's): fixed vectors added to the token embeddings; inputs of up to 64" in (
        sinusoidal
    )

    analysis = analyze_model(model, SENTENCES[0::2], SENTENCES[1::2], tokenizer=tokenizer, progress=False)
    report_md = write_report([analysis], tmp_path / "report").read_text(encoding="utf-8")
    assert "- Positions: RoPE (θ = 500): " in report_md
    report = json.loads((tmp_path / "report" / "report.json").read_text(encoding="utf-8"))
    assert report["models"][0]["positions"].startswith("RoPE (θ = 500)")


# --- the new query scalings -------------------------------------------------------------------------------------


def test_per_token_scaling_under_nape_is_described_trained_without_decay_and_analysed(tmp_path, tokenizer):
    settings = {"position_embedding_type": "nape", "attention_scaling": "asentmax_per_token"}
    model = tiny_model(vocab_size=len(tokenizer), **settings)
    assert model.get_attention_scales() == {}  # no per-head parameter: β and γ come from each token
    lines = describe_scaling(model, read_starting_point(None), {"attention_scaling": "asentmax_per_token"})
    assert lines[0] == (
        "encoder self-attention: queries scaled by δ + β·log(n + 1)^γ with β = softplus(W_β h), γ = 2·tanh(W_γ h) "
        "per token (ASEntmax per token, new; given; the heads without a position bias only (heads 2, 3)): δ 1"
    )
    assert lines[2].startswith("cross-attention:        queries scaled by")
    assert lines[2].endswith("(ASEntmax per token, new; given): δ 1")  # all of cross-attention's heads scale
    card = scaling_tables(model)
    assert "per token (ASEntmax per token), in the heads without a position bias only (heads 2, 3)" in card
    assert "β:" not in card  # no table of values per head: there are none

    trainer = AdaptiveEntmaxTrainer(model=model, args=Seq2SeqTrainingArguments(str(tmp_path), report_to="none"))
    decayed = trainer.get_decay_parameter_names(model)
    assert not [name for name in decayed if "scale_" in name]
    assert any(name.endswith("q_proj.weight") for name in decayed)
    assert not [key for key in attention_logs(model) if key.startswith("scale_")]

    analysis = analyze_model(model, SENTENCES[0::2], SENTENCES[1::2], tokenizer=tokenizer, progress=False)
    scaling = analysis.attention["decoder_self"].scaling
    assert scaling.method == "asentmax_per_token" and scaling.scaled_heads.tolist() == [False, False, True, True]
    # β = softplus(W_β h) > 0 and γ = 2·tanh(W_γ h) in (−2, 2): means of what the maps gave the analysed tokens.
    assert (scaling.beta > 0).all() and (scaling.gamma.abs() < 2).all() and scaling.beta.shape == (2, 4)
    factor = scaling.factor([10, 100])  # (layers, heads, 2): the ALiBi heads keep 1
    assert (factor[:, :2] == 1).all() and (factor[:, 2:] != 1).all()
    sentence = next(text for text in findings(analysis) if text.startswith("Decoder self-attention scales"))
    assert "in 2 heads of each layer by 1 + β·log(n + 1)^γ with β = softplus" in sentence
    assert "(each head's mean over the analysed tokens)" in sentence
    write_report([analysis], tmp_path / "report")
    section, _ = model_card_section(
        tmp_path / "report", model.get_alphas(), "figures", attention_scales=model.get_attention_scales()
    )
    assert "ASEntmax per token" in section


def test_per_token_scaling_of_a_checkpoint_loads_and_converts(tmp_path, marian_folder, train_tokenizer, capsys):
    model = checkpoint_model(marian_folder, train_tokenizer, "--attention_scaling", "asentmax_per_token")
    assert model.model.encoder.layers[0].self_attn.scale_beta_proj is not None
    model.save_pretrained(tmp_path / "scaled")
    train_tokenizer.save_pretrained(tmp_path / "scaled")
    resumed = checkpoint_model(tmp_path / "scaled", train_tokenizer)
    weight = resumed.model.encoder.layers[0].self_attn.scale_gamma_proj.weight
    assert torch.equal(weight, model.model.encoder.layers[0].self_attn.scale_gamma_proj.weight)
    plain = checkpoint_model(tmp_path / "scaled", train_tokenizer, "--attention_scaling", "none")
    assert plain.model.encoder.layers[0].self_attn.scale_beta_proj is None
    # Maps that gain a bias keep their weights and start it at 0; a run that stops scaling per token drops it.
    biased = checkpoint_model(tmp_path / "scaled", train_tokenizer, "--attention_scaling_projection_bias", "True")
    projection = biased.model.encoder.layers[0].self_attn.scale_gamma_proj
    assert torch.equal(projection.weight, weight) and torch.equal(projection.bias, torch.zeros_like(projection.bias))
    with torch.no_grad():
        projection.bias.fill_(0.25)
    biased.save_pretrained(tmp_path / "biased")
    train_tokenizer.save_pretrained(tmp_path / "biased")
    resumed = checkpoint_model(tmp_path / "biased", train_tokenizer)
    assert (resumed.model.encoder.layers[0].self_attn.scale_gamma_proj.bias == 0.25).all()
    unbiased = checkpoint_model(tmp_path / "biased", train_tokenizer, "--attention_scaling_projection_bias", "False")
    assert unbiased.model.encoder.layers[0].self_attn.scale_gamma_proj.bias is None
    per_head = checkpoint_model(tmp_path / "biased", train_tokenizer, "--attention_scaling", "asentmax")
    assert not per_head.config.attention_scaling_projection_bias
    argv = ["convert", "--model", str(marian_folder), "--output", str(tmp_path / "converted"), "--no-check_load"]
    assert main([*argv, "--attention_scaling", "asentmax_per_token", "--attention_scaling_projection_bias"]) == 0
    converted = AdaptiveEntmaxMarianMTModel.from_pretrained(tmp_path / "converted")
    assert converted.model.decoder.layers[0].encoder_attn.scale_beta_proj.bias is not None
    capsys.readouterr()
    argv[argv.index("--output") + 1] = str(tmp_path / "unused")
    assert main([*argv, "--attention_scaling", "asentmax", "--attention_scaling_projection_bias"]) != 0
    error = capsys.readouterr().err.strip().splitlines()[-1]  # after the loading's progress bar
    assert "`attention_scaling_projection_bias`=True adds a bias to per-token ASEntmax's maps" in error
    assert not (tmp_path / "unused").exists()


def test_a_run_that_changes_a_checkpoints_learned_scaling_starts_the_new_one_afresh(
    tmp_path, marian_folder, train_tokenizer
):
    ssmax = checkpoint_model(marian_folder, train_tokenizer, "--attention_scaling", "ssmax")
    ssmax.save_pretrained(tmp_path / "ssmax")
    train_tokenizer.save_pretrained(tmp_path / "ssmax")
    s = ssmax.get_attention_scales()["encoder_self"]["beta"]
    # SSMax's s and ASEntmax's β share a parameter's name: β starts from U(0.1, 1), not from s ~ N(1, 0.01²).
    asentmax = checkpoint_model(tmp_path / "ssmax", train_tokenizer, "--attention_scaling", "asentmax")
    scales = asentmax.get_attention_scales()["encoder_self"]
    assert not torch.equal(scales["beta"], s) and ((scales["beta"] >= 0.1) & (scales["beta"] <= 1.0)).all()
    assert torch.isfinite(scales["gamma"]).all() and scales["gamma"].abs().max() < 1.0
    per_token = checkpoint_model(tmp_path / "ssmax", train_tokenizer, "--attention_scaling", "asentmax_per_token")
    assert per_token.get_attention_scales() == {} and per_token.model.encoder.layers[0].self_attn.scale_beta is None


def test_per_token_scaling_with_a_projection_bias_says_so_everywhere(tmp_path, tokenizer):
    settings = {"attention_scaling": "asentmax_per_token", "attention_scaling_projection_bias": True}
    model = tiny_model(vocab_size=len(tokenizer), **settings)
    formula = "β = softplus(W_β h + b_β), γ = 2·tanh(W_γ h + b_γ) per token"
    lines = describe_scaling(model, read_starting_point(None), settings)
    assert formula in lines[0] and "(ASEntmax per token, new; given)" in lines[0]
    assert formula in scaling_tables(model)
    analysis = analyze_model(model, SENTENCES[0::2], SENTENCES[1::2], tokenizer=tokenizer, progress=False)
    assert analysis.attention["cross"].scaling.to_dict()["projection_bias"] is True
    assert any(formula in text for text in findings(analysis))


def test_ssmax_is_described_logged_carded_and_analysed(tmp_path, tokenizer):
    model = tiny_model(vocab_size=len(tokenizer), attention_scaling="ssmax", cross_attention_scaling="asentmax")
    scales = model.get_attention_scales()
    lines = describe_scaling(model, read_starting_point(None), {"attention_scaling": "ssmax"})
    assert lines[0].startswith(
        "encoder self-attention: queries scaled by s·log(n + 1) per head (SSMax, scalable softmax, new; given): s 0."
    )
    assert "γ" not in lines[0] and "δ + β·log(n + 1)^γ per head (ASEntmax, new; given): δ 1, β" in lines[2]
    card = scaling_tables(model)
    assert "multiplied by s·log(n + 1) per head (SSMax, scalable softmax)\n\ns:\n" in card
    logs = attention_logs(model)
    assert "scale_beta/encoder_self/mean" in logs and "scale_gamma/encoder_self/mean" not in logs
    assert "scale_gamma/cross/mean" in logs

    analysis = analyze_model(model, SENTENCES[0::2], SENTENCES[1::2], tokenizer=tokenizer, progress=False)
    scaling = analysis.attention["encoder_self"].scaling
    assert (scaling.method, scaling.offset) == ("ssmax", 0.0) and (scaling.gamma == 1).all()
    torch.testing.assert_close(scaling.factor(9)[..., 0], scales["encoder_self"]["beta"].double() * math.log(10))
    assert any("by s·log(n + 1) per head (SSMax, scalable softmax): " in text for text in findings(analysis))
    write_report([analysis], tmp_path / "report")
    model_card_section(tmp_path / "report", model.get_alphas(), "figures", attention_scales=scales)  # they agree
