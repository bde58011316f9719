import json

import pytest

from hf_entmax.cli import SUBCOMMANDS, main
from hf_entmax.commands import demo
from hf_entmax.commands.train import parse_arguments
from hf_entmax.common.text_files import read_sentences


@pytest.mark.parametrize("command", list(SUBCOMMANDS))
def test_every_command_prints_its_help(command, capsys):
    """argparse formats help with %: a stray percent sign in any flag's help breaks --help alone."""
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    printed = capsys.readouterr()
    assert f"hf-entmax {command}" in printed.out and printed.err == ""


def test_without_a_command_usage_is_printed(capsys):
    assert main([]) == 2
    assert "commands:" in capsys.readouterr().out
    assert main(["--help"]) == 0
    assert main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_train_arguments_from_flags_and_from_a_json_file(tmp_path):
    model_args, data_args, training_args = parse_arguments(["--alpha_init", "1.5", "--max_steps", "7"])
    assert model_args.attention_options_given() == {"alpha_init": 1.5}
    assert training_args.max_steps == 7
    assert training_args.output_dir == "outputs/train"
    assert data_args.uses_synthetic_data()

    config = tmp_path / "run.json"
    config.write_text(json.dumps({"output_dir": str(tmp_path / "out"), "cross_alpha_init": "2", "max_steps": 3}))
    model_args, _, training_args = parse_arguments([str(config)])
    assert model_args.attention_options_given() == {"cross_alpha_init": 2.0}
    assert training_args.max_steps == 3


def test_demo_flags_override_its_defaults():
    _, data_args, training_args = parse_arguments([*demo.DEMO_DEFAULTS, "--max_steps", "5"])
    assert training_args.max_steps == 5
    assert training_args.output_dir == "outputs/demo"
    assert data_args.uses_synthetic_data()


@pytest.mark.slow
def test_demo_trains_evaluates_and_translates_through_the_remote_code_pipeline(tmp_path, capsys):
    output = tmp_path / "demo"
    quick = ["--max_steps", "2", "--synthetic_train_size", "200", "--max_eval_samples", "4"]
    quick += ["--max_predict_samples", "4", "--generation_max_length", "6", "--output_dir", str(output)]
    assert main(["demo", *quick]) == 0
    printed = capsys.readouterr().out
    assert "validation BLEU" in printed and "test       BLEU" in printed
    assert "encoder_self layer 1:" in printed
    assert printed.count("(reference: ") == 3
    assert json.loads((output / "training_summary.json").read_text())["global_step"] == 2


def test_sentence_files_are_read_and_their_errors_name_the_flag(tmp_path):
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("ein hund\n\n  zwei katzen  \n")
    assert read_sentences(str(sentences), "--sparsity_sentences") == ["ein hund", "zwei katzen"]
    assert read_sentences(None, "--sparsity_sentences") is None
    (tmp_path / "empty.txt").write_text("\n \n")
    with pytest.raises(ValueError, match=r"--sparsity_sentences .*empty\.txt: the file has no sentences"):
        read_sentences(str(tmp_path / "empty.txt"), "--sparsity_sentences")
    with pytest.raises(FileNotFoundError, match=r"--sparsity_sentences .*missing\.txt: no such file"):
        read_sentences(str(tmp_path / "missing.txt"), "--sparsity_sentences")
