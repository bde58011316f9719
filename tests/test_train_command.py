"""`hf-entmax train` end to end on tiny data the tests write themselves."""

import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
from huggingface_hub import ModelCard
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, MarianConfig, MarianMTModel

from hf_entmax import AdaptiveEntmaxMarianMTModel, TranslationPipeline
from hf_entmax.cli import main
from hf_entmax.training.synthetic import generate_pairs


FAST = [
    "--model_size", "tiny",
    "--vocab_size", "300",
    "--max_steps", "4",
    "--per_device_train_batch_size", "8",
    "--logging_steps", "2",
    "--learning_rate", "1e-3",
    "--generation_max_length", "8",
    "--max_source_length", "32",
    "--max_target_length", "32",
    "--save_strategy", "no",
    "--report_to", "none",
    "--seed", "0",
]  # fmt: skip


def write_tsv(path, pairs):
    path.write_text("".join(f"{source}\t{target}\n" for source, target in pairs), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def pairs():
    return generate_pairs(80, seed=3)


@pytest.fixture
def data_files(tmp_path, pairs):
    return {
        "--train_file": write_tsv(tmp_path / "train.tsv", pairs[:64]),
        "--validation_file": write_tsv(tmp_path / "valid.tsv", pairs[64:72]),
        "--test_file": write_tsv(tmp_path / "test.tsv", pairs[72:]),
    }


def flags(options: dict[str, str]) -> list[str]:
    return [item for pair in options.items() for item in pair]


@pytest.mark.slow
def test_train_on_local_files_writes_a_complete_self_contained_folder(tmp_path, data_files):
    output = tmp_path / "model"
    argv = ["train", *flags(data_files), "--source_lang", "en", "--target_lang", "syn", "--output_dir", str(output)]
    assert main([*argv, *FAST]) == 0

    files = {path.name for path in output.iterdir()}
    for name in (
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "modeling_adaptive_entmax_marian.py",
        "pipeline_translation.py",
        "training_summary.json",
        "alpha_history.json",
        "README.md",
    ):
        assert name in files
    assert not [name for name in files if name.endswith((".bin", ".pt", ".pkl"))], files
    # Whoever can read the folder can read the weights (safetensors 0.8 alone writes them private).
    assert (output / "model.safetensors").stat().st_mode == (output / "config.json").stat().st_mode
    card = ModelCard.load(output / "README.md")
    assert card.data.language == ["en", "syn"]
    assert card.data.pipeline_tag == "translation"
    scores = {(result.dataset_split, result.metric_type): result.metric_value for result in card.data.eval_results}
    assert scores[("test", "bleu")] == pytest.approx(
        json.loads((output / "training_summary.json").read_text())["metrics"]["test_bleu"]
    )
    summary = json.loads((output / "training_summary.json").read_text())
    assert summary["num_examples"] == {"train": 64, "validation": 8, "test": 8}
    assert summary["global_step"] == 4
    for key in ("eval_bleu", "eval_chrf", "test_bleu", "test_chrf", "train_loss"):
        assert key in summary["metrics"]
    assert summary["sacrebleu_signatures"]["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert set(summary["alphas"]) == {"encoder_self", "decoder_self", "cross"}

    history = json.loads((output / "alpha_history.json").read_text())
    assert [record["step"] for record in history] == [2, 4]
    assert len(history[0]["cross"]) == 2 and len(history[0]["cross"][0]) == 4
    torch.testing.assert_close(
        torch.tensor(history[-1]["encoder_self"]), torch.tensor(summary["alphas"]["encoder_self"]), atol=1e-5, rtol=0
    )

    model = AutoModelForSeq2SeqLM.from_pretrained(output)
    assert isinstance(model, AdaptiveEntmaxMarianMTModel)
    assert model.generation_config.num_beams == 4
    translator = TranslationPipeline(model=model, tokenizer=AutoTokenizer.from_pretrained(output))
    assert set(translator("the dog sleeps", max_new_tokens=4)[0]) == {"translation_text"}


@pytest.mark.slow
def test_text_file_pairs_and_jsonl_are_accepted(tmp_path, pairs):
    (tmp_path / "train.en").write_text("\n".join(source for source, _ in pairs[:40]) + "\n")
    (tmp_path / "train.syn").write_text("\n".join(target for _, target in pairs[:40]) + "\n")
    validation = tmp_path / "valid.jsonl"
    validation.write_text("".join(json.dumps({"translation": {"en": s, "syn": t}}) + "\n" for s, t in pairs[40:48]))
    output = tmp_path / "model"
    argv = [
        "train",
        "--train_source_file", str(tmp_path / "train.en"),
        "--train_target_file", str(tmp_path / "train.syn"),
        "--validation_file", str(validation),
        "--source_lang", "en",
        "--target_lang", "syn",
        "--output_dir", str(output),
    ]  # fmt: skip
    assert main([*argv, *FAST, "--max_steps", "2"]) == 0
    summary = json.loads((output / "training_summary.json").read_text())
    assert summary["num_examples"] == {"train": 40, "validation": 8}


@pytest.mark.slow
def test_fixed_alpha_and_alpha_learning_rate_flags(tmp_path, data_files, capsys):
    output = tmp_path / "model"
    argv = ["train", "--train_file", data_files["--train_file"], "--source_lang", "en", "--target_lang", "syn"]
    argv += ["--output_dir", str(output), "--alpha_init", "1.5", "--learn_alpha", "False", "--cross_alpha_init", "2"]
    assert main([*argv, *FAST]) == 0
    recipe_line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("Recipe "))
    assert recipe_line.endswith("α fixed"), recipe_line  # no α learning rate for an α nothing learns
    summary = json.loads((output / "training_summary.json").read_text())
    assert summary["alphas"]["encoder_self"] == [[1.5] * 4] * 2
    assert summary["alphas"]["cross"] == [[2.0] * 4] * 2
    assert not [name for name in load_file(output / "model.safetensors") if "alpha" in name]


def test_fine_tuning_starts_from_a_marian_checkpoint(tmp_path, data_files, pairs):
    from hf_entmax.training.tokenizer import train_joint_tokenizer

    tokenizer = train_joint_tokenizer((text for pair in pairs for text in pair), vocab_size=300)
    marian_config = MarianConfig(
        vocab_size=len(tokenizer), d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, forced_eos_token_id=1,
    )  # fmt: skip
    marian_folder = tmp_path / "marian"
    MarianMTModel(marian_config).save_pretrained(marian_folder)
    tokenizer.save_pretrained(marian_folder)
    output = tmp_path / "model"
    argv = ["train", "--train_file", data_files["--train_file"], "--source_lang", "en", "--target_lang", "syn"]
    argv += ["--model_name_or_path", str(marian_folder), "--output_dir", str(output), "--alpha_init", "1.3"]
    fast = [flag for flag in FAST if flag not in ("--model_size", "tiny", "--vocab_size", "300")]  # the checkpoint's
    assert main([*argv, *fast, "--max_steps", "1"]) == 0
    model = AdaptiveEntmaxMarianMTModel.from_pretrained(output)
    assert model.config.d_model == 32
    assert model.get_alphas()["encoder_self"].shape == (1, 2)
    assert torch.allclose(model.get_alphas()["encoder_self"], torch.full((1, 2), 1.3), atol=0.01)


@pytest.mark.parametrize(
    ("make_argv", "message"),
    [
        (lambda d, t: ["--train_source_file", d["src"], "--train_target_file", d["short"]], "has 5 lines but"),
        (lambda d, t: ["--train_file", d["bad_jsonl"]], r"line 1: .*no 'syn' key \(keys present: 'en', 'de'\)"),
        (lambda d, t: ["--train_file", d["tsv"], "--model_size", "huge"], "--model_size must be one of"),
        (lambda d, t: ["--train_file", d["tsv"], "--alpha_init", "3"], "--alpha_init must be a number in"),
        (lambda d, t: ["--train_file", d["tsv"], "--eval_strategy", "steps"], "needs validation data"),
        (lambda d, t: ["--train_file", d["tsv"], "--alpha_init", "1.0"], "invalid model settings: a learned α of "),
        (lambda d, t: ["--train_file", d["tsv"], "--learn_alpha", "False"], "`alpha_init`='random' needs a learned α"),
        (
            lambda d, t: ["--train_file", d["tsv"], "--resume_from_checkpoint", "true"],
            "no complete checkpoint-\\* folder",
        ),
    ],
    ids=[
        "line-counts",
        "jsonl-keys",
        "model-size",
        "alpha-init",
        "eval-without-validation",
        "alpha-below-bounds",
        "random-alpha-fixed",
        "resume-nothing",
    ],
)
def test_bad_input_fails_early_with_one_line(tmp_path, capsys, make_argv, message):
    files = {
        "src": tmp_path / "a.en",
        "short": tmp_path / "a.syn",
        "bad_jsonl": tmp_path / "bad.jsonl",
        "tsv": tmp_path / "ok.tsv",
    }
    files["src"].write_text("one\ntwo\nthree\nfour\nfive\n")
    files["short"].write_text("eins\nzwei\n")
    files["bad_jsonl"].write_text(json.dumps({"translation": {"en": "a", "de": "b"}}) + "\n")
    write_tsv(files["tsv"], [("a b", "c d")] * 4)
    paths = {name: str(path) for name, path in files.items()}
    argv = ["train", *FAST, "--output_dir", str(tmp_path / "out"), "--source_lang", "en", "--target_lang", "syn"]
    assert main([*argv, *make_argv(paths, tmp_path)]) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert error.startswith("hf-entmax train: error: ")
    assert re.search(message, error), error


# --- interruption and distributed runs (subprocesses) ----------------------------------------------

CLI = [sys.executable, "-m", "hf_entmax.cli"]


def fixed_length_pairs(count: int, seed: int) -> list[tuple[str, str]]:
    """Four one-letter words, reversed: every sentence has the same number of tokens on each side."""
    rng = random.Random(seed)
    letters = "bcdfghjklmnpqrstvwxz"
    pairs = []
    for _ in range(count):
        words = [rng.choice(letters) for _ in range(4)]
        pairs.append((" ".join(words), " ".join(reversed(words))))
    return pairs


def run_cli(argv, **kwargs):
    environment = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    return subprocess.run(argv, env=environment, capture_output=True, text=True, timeout=600, **kwargs)


@pytest.mark.slow
def test_killed_run_resumes_from_its_last_checkpoint_without_losing_data(tmp_path):
    train_file = write_tsv(tmp_path / "train.tsv", fixed_length_pairs(400, seed=0))
    common = ["train", "--train_file", train_file, "--source_lang", "xx", "--target_lang", "yy", *FAST]
    common += ["--max_steps", "40", "--save_strategy", "steps", "--save_steps", "10", "--logging_steps", "10"]

    reference = tmp_path / "reference"
    completed = run_cli([*CLI, *common, "--output_dir", str(reference)])
    assert completed.returncode == 0, completed.stderr[-2000:]

    interrupted = tmp_path / "interrupted"
    environment = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [*CLI, *common, "--output_dir", str(interrupted)],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while not (interrupted / "checkpoint-20").is_dir() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (interrupted / "model.safetensors").exists(), "the run finished before it could be killed"

    resumed = run_cli([*CLI, *common, "--output_dir", str(interrupted), "--resume_from_checkpoint", "true"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads((interrupted / "training_summary.json").read_text())
    assert summary["global_step"] == 40
    expected = load_file(reference / "model.safetensors")
    actual = load_file(interrupted / "model.safetensors")
    for name, tensor in expected.items():
        torch.testing.assert_close(actual[name], tensor, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.slow
def test_two_process_ddp_matches_one_process_at_equal_global_batch(tmp_path):
    train_file = write_tsv(tmp_path / "train.tsv", fixed_length_pairs(64, seed=1))
    common = ["train", "--train_file", train_file, "--source_lang", "xx", "--target_lang", "yy", *FAST]
    common += ["--max_steps", "3", "--dropout", "0", "--logging_steps", "1"]

    single = tmp_path / "single"
    completed = run_cli([*CLI, *common, "--output_dir", str(single), "--per_device_train_batch_size", "8"])
    assert completed.returncode == 0, completed.stderr[-2000:]

    distributed = tmp_path / "ddp"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29517"]
    completed = run_cli(
        [
            *torchrun,
            "-m",
            "hf_entmax.cli",
            *common,
            "--output_dir",
            str(distributed),
            "--per_device_train_batch_size",
            "4",
        ]
    )
    assert completed.returncode == 0, completed.stderr[-3000:]

    single_summary = json.loads((single / "training_summary.json").read_text())
    ddp_summary = json.loads((distributed / "training_summary.json").read_text())
    assert (single_summary["world_size"], ddp_summary["world_size"]) == (1, 2)
    assert ddp_summary["global_step"] == 3
    assert ddp_summary["metrics"]["train_loss"] == pytest.approx(single_summary["metrics"]["train_loss"], rel=1e-4)
    expected = load_file(single / "model.safetensors")
    actual = load_file(distributed / "model.safetensors")
    for name, tensor in expected.items():
        torch.testing.assert_close(actual[name], tensor, rtol=1e-4, atol=1e-5, msg=name)


def test_resuming_skips_a_checkpoint_that_was_cut_off_while_saving(tmp_path):
    from hf_entmax.training.run import last_complete_checkpoint

    for step, state in ((10, '{"global_step": 10}'), (20, '{"global_step": 20}'), (30, '{"global_st')):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(state)
    (tmp_path / "checkpoint-40").mkdir()  # killed before anything was written
    assert last_complete_checkpoint(tmp_path) == tmp_path / "checkpoint-20"
    assert last_complete_checkpoint(tmp_path / "empty") is None


def test_a_dataset_folder_with_a_translation_column_trains_like_a_hub_dataset(tmp_path, pairs):
    dataset = tmp_path / "my_dataset"
    dataset.mkdir()
    for split, rows in (("train", pairs[:48]), ("validation", pairs[48:56])):
        lines = "".join(json.dumps({"translation": {"en": source, "syn": target}}) + "\n" for source, target in rows)
        (dataset / f"{split}.jsonl").write_text(lines)
    output = tmp_path / "model"
    argv = ["train", *FAST, "--dataset_name", str(dataset), "--source_lang", "en", "--target_lang", "syn"]
    assert main([*argv, "--output_dir", str(output), "--max_steps", "1", "--max_train_samples", "20"]) == 0
    summary = json.loads((output / "training_summary.json").read_text())
    assert summary["num_examples"] == {"train": 20, "validation": 8}


def test_an_unreachable_hub_dataset_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    import datasets
    import huggingface_hub

    # As on a machine without network (the libraries read these settings when they are imported).
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    argv = ["train", *FAST, "--dataset_name", "no-such-user/no-such-dataset", "--source_lang", "de"]
    assert main([*argv, "--target_lang", "en", "--output_dir", str(tmp_path / "out")]) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "could not load --dataset_name 'no-such-user/no-such-dataset'" in error
    assert "Offline, use local files instead" in error
