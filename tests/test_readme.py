"""Every command line and Python example of README.md, run in order at tiny sizes on data this test writes.

A README example that stops working fails here. Each `hf-entmax` command runs as written, with only flags appended
that make it tiny (later flags win); the few things that need the network are stood in for locally: the Hub id
`Helsinki-NLP/opus-mt-de-en` is a tiny MarianMT model placed in a Hugging Face cache, and the Hub API that `push`
talks to records the upload instead of sending it.
"""

import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from huggingface_hub import constants
from transformers import MarianConfig, MarianMTModel

from hf_entmax.cli import main
from hf_entmax.hub import push as push_module
from hf_entmax.training.synthetic import generate_pairs
from hf_entmax.training.tokenizer import train_joint_tokenizer


README = Path(__file__).resolve().parent.parent / "README.md"
TINY_TRAINING = [
    "--max_steps", "2",
    "--per_device_train_batch_size", "8",
    "--generation_max_length", "8",
    "--max_source_length", "32",
    "--max_target_length", "32",
    "--save_strategy", "no",
    "--report_to", "none",
    "--disable_tqdm", "True",
]  # fmt: skip
# Flags appended to each subcommand: only sizes and speed, never what the README example is about.
TINY = {
    "demo": [*TINY_TRAINING, "--synthetic_train_size", "200", "--max_eval_samples", "4", "--max_predict_samples", "4"],
    "train": TINY_TRAINING,
    "fresh-train": [*TINY_TRAINING, "--model_size", "tiny", "--vocab_size", "200"],
    "translate": ["--max_new_tokens", "6", "--no-progress"],
    "convert": [],
    "export": [],
    "push": [],
    "analyze": ["--sample_size", "4", "--no-progress"],
    "align": ["--no-progress"],
    "sparsefinder": ["--train_size", "10", "--heldout_size", "10", "--epochs", "1", "--no-progress"],
}


def readme_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)


def readme_commands() -> list[list[str]]:
    """The `hf-entmax` command lines of the README's bash blocks, in order (continuations joined, && split)."""
    commands = []
    for block in readme_blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.split("&&"):
                words = shlex.split(part, comments=True)
                if words[:1] == ["hf-entmax"]:
                    commands.append(words[1:])
    return commands


def write_data(folder: Path) -> None:
    """The files the README's examples name, German–English by their names (the synthetic pair inside)."""
    pairs = generate_pairs(120, seed=11)
    splits = {"train": pairs[:80], "valid": pairs[80:100], "test": pairs[100:]}
    for name, chunk in splits.items():
        lines = "".join(f"{source}\t{target}\n" for source, target in chunk)
        (folder / f"{name}.tsv").write_text(("de\ten\n" if name == "train" else "") + lines, encoding="utf-8")
    (folder / "test.de").write_text("".join(f"{source}\n" for source, _ in splits["test"]), encoding="utf-8")
    (folder / "test.en").write_text("".join(f"{target}\n" for _, target in splits["test"]), encoding="utf-8")


def place_opus_mt_in_cache(cache: Path, folder: Path) -> None:
    """A tiny MarianMT model as the Hugging Face cache holds a downloaded `Helsinki-NLP/opus-mt-de-en`."""
    tokenizer = train_joint_tokenizer((text for pair in generate_pairs(120, seed=11) for text in pair), vocab_size=200)
    torch.manual_seed(0)
    config = MarianConfig(
        vocab_size=len(tokenizer), d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, forced_eos_token_id=1,
    )  # fmt: skip
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = cache / "models--Helsinki-NLP--opus-mt-de-en" / "snapshots" / commit
    MarianMTModel(config).save_pretrained(snapshot)
    tokenizer.save_pretrained(snapshot)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text(commit)


class RecordingHfApi:
    """`HfApi` as `push` uses it, recording the upload instead of making it."""

    uploads: list[dict] = []

    def create_repo(self, repo_id, **kwargs):
        return f"https://huggingface.co/{repo_id}"

    def create_branch(self, repo_id, **kwargs):
        pass

    def upload_folder(self, **kwargs):
        RecordingHfApi.uploads.append(kwargs)
        return SimpleNamespace(commit_url=f"https://huggingface.co/{kwargs['repo_id']}/commit/0", pr_url=None)


@pytest.mark.slow
def test_every_readme_example_runs_as_shown(tmp_path, monkeypatch, capsys):
    commands = readme_commands()
    subcommands = [command[0] for command in commands]
    # The README shows the demo, a run on your own pair, the OPUS-MT path end to end, the analysis, word alignments
    # and Sparsefinder.
    expected = ["demo", "train", "translate", "convert", "train", "translate", "export", "push", "analyze", "align"]
    assert subcommands == [*expected, "sparsefinder", "translate"]

    monkeypatch.chdir(tmp_path)
    write_data(tmp_path)
    place_opus_mt_in_cache(tmp_path / "hub-cache", tmp_path)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setattr(push_module, "HfApi", RecordingHfApi)
    monkeypatch.setenv("HF_TOKEN", "hf_readme_test")
    RecordingHfApi.uploads = []

    for command in commands:
        name = command[0]
        if name == "train" and "--model_name_or_path" not in command:
            name = "fresh-train"
        # Offline for the commands that read the Hub's cache; `push` goes "online" to the recording API.
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", name != "push")
        monkeypatch.setenv("HF_HUB_OFFLINE", "0" if name == "push" else "1")
        assert main([*command, *TINY[name]]) == 0, f"hf-entmax {shlex.join(command)}\n{capsys.readouterr().err}"

    printed = capsys.readouterr().out
    assert "With α = 1 fixed everywhere, the converted model computes the same function as the source." in printed
    assert "encoder self-attention: α learned per head, from 1.1 (given" in printed
    assert len(Path("test.hyp.en").read_text(encoding="utf-8").splitlines()) == 20
    assert (tmp_path / "de-en-entmax-hub" / "README.md").is_file()
    assert [upload["repo_id"] for upload in RecordingHfApi.uploads] == ["me/de-en-entmax"]
    assert (tmp_path / "analysis" / "report.md").is_file()
    assert len(Path("test.align").read_text(encoding="utf-8").splitlines()) == 20
    assert (tmp_path / "sparsefinder" / "report.md").is_file()
    assert (tmp_path / "de-en-entmax" / "sparsefinder.safetensors").is_file()
    assert len(Path("test.sparse.en").read_text(encoding="utf-8").splitlines()) == 20

    # The Python examples, against the folders the commands made.
    for block in readme_blocks("python"):
        exec(compile(block, str(README), "exec"), {})


def test_commands_run_from_the_readme_are_not_hidden_in_other_shells():
    """Shell lines the parser would miss (a prompt sign, `python -m hf_entmax.cli`) would go untested."""
    for block in readme_blocks("bash"):
        for line in block.splitlines():
            assert not line.lstrip().startswith("$"), line
            assert "hf_entmax.cli" not in line or line.lstrip().startswith("#"), line
