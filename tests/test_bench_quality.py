"""The quality benchmark on a corpus of the user's own, with the command docs/benchmarks.md gives for it.

`benchmarks/bench_quality.py` runs `hf-entmax train` once per variant and seed; here the documented command runs as
written on a tiny corpus this test writes, with flags appended that only make it tiny (later flags win).
"""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from hf_entmax.cli import EXIT_INTERRUPTED
from hf_entmax.training.synthetic import generate_pairs


ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from bench_quality import RUN_RECORD  # noqa: E402


TINY = (
    "--model_size tiny --vocab_size 200 --generation_max_length 8 --max_source_length 32 --max_target_length 32 "
    "--max_eval_samples 4 --max_predict_samples 4"
)


def documented_command() -> list[str]:
    """The arguments of the own-pair command in docs/benchmarks.md."""
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    section = text[text.index("### Repeating the comparison on your own pair") :]
    command = shlex.split(re.search(r"```\n(python benchmarks/bench_quality.py .*?)\n```", section).group(1))
    return command[2:]


def bench_quality(*arguments: str, cwd: Path) -> subprocess.CompletedProcess:
    environment = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    command = [sys.executable, str(BENCHMARKS / "bench_quality.py"), *arguments]
    return subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True)


def write_corpus(folder: Path, source: str = "ja", target: str = "en") -> Path:
    """A synthetic corpus named as the documented command expects: train.*, dev.*, test.*."""
    folder.mkdir()
    pairs = generate_pairs(140, seed=3)
    for name, rows in (("train", pairs[:120]), ("dev", pairs[120:130]), ("test", pairs[130:])):
        (folder / f"{name}.{source}").write_text("".join(f"{line}\n" for line, _ in rows), encoding="utf-8")
        (folder / f"{name}.{target}").write_text("".join(f"{line}\n" for _, line in rows), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """The documented command (softmax and the adaptive defaults, seed 0 only) on the user's corpus; its output."""
    root = tmp_path_factory.mktemp("bench")
    write_corpus(root / "my-corpus")
    arguments = [*documented_command(), "--seeds", "0", "--max_steps", "2", "--batch_size", "8"]
    arguments += ["--output_dir", "out", "--extra", TINY]
    completed = bench_quality(*arguments, cwd=root)
    assert completed.returncode == 0, completed.stderr + completed.stdout
    return root, arguments, completed.stdout


def test_trains_and_reports_each_variant_and_the_paired_difference(finished):
    root, _, output = finished
    rows = [line for line in output.splitlines() if line.startswith("| ja-en |")]
    assert [row.split(" | ")[1] for row in rows] == ["softmax", "adaptive", "adaptive"]
    assert "`(defaults)`" in rows[1] and "`--alpha_init 1 --learn_alpha False`" in rows[0]
    results = json.loads((root / "out" / "results-quality.json").read_text())
    softmax, adaptive = results["ja-en softmax"][0], results["ja-en adaptive"][0]
    difference = adaptive["validation BLEU"] - softmax["validation BLEU"]
    assert rows[2].split(" | ")[2:4] == ["1", f"{difference:+.2f}"]  # one paired seed: its difference
    for variant in ("softmax", "adaptive"):
        run = root / "out" / "2-steps" / "ja-en" / variant / "seed0"
        summary = json.loads((run / "training_summary.json").read_text())
        assert (
            summary["data"]["validation_source_file"] == "dev.ja" and summary["data"]["test_target_file"] == "test.en"
        )
        assert summary["global_step"] == 2


def test_reuses_finished_runs_and_refuses_runs_trained_with_other_flags(finished):
    root, arguments, _ = finished
    log = root / "out" / "commands.log"
    trained = log.read_text()
    again = bench_quality(*arguments, "--finished_only", cwd=root)
    assert again.returncode == 0, again.stderr
    assert log.read_text() == trained  # nothing trained again

    changed = [*arguments[:-1], TINY + " --learning_rate 3e-4"]
    refused = bench_quality(*changed, cwd=root)
    assert refused.returncode == 1
    assert "softmax/seed0 was trained with other flags (--learning_rate: not given then, 3e-4 now)" in refused.stderr
    assert log.read_text() == trained


def test_missing_corpus_files_are_named_before_anything_trains(tmp_path):
    write_corpus(tmp_path / "corpus", "xx", "yy")
    (tmp_path / "corpus" / "dev.yy").unlink()
    completed = bench_quality(
        "--data_dir",
        "corpus",
        "--directions",
        "xx-yy",
        "--validation_name",
        "dev",
        "--output_dir",
        "out",
        cwd=tmp_path,
    )
    assert completed.returncode == 1
    assert "missing corpus files:" in completed.stderr
    missing = completed.stderr.split(" (expected")[0]
    corpus = tmp_path / "corpus"
    # dev.yy was removed; test_2016_flickr.* is Multi30k's test name, the default where --test_name is not given.
    named = [corpus / "dev.yy", corpus / "test_2016_flickr.xx", corpus / "test_2016_flickr.yy"]
    assert missing == f"missing corpus files: {', '.join(map(str, named))}"
    assert "validation dev.{xx,yy}" in completed.stderr
    assert not (tmp_path / "out").exists()


def test_malformed_directions_are_refused(tmp_path):
    completed = bench_quality("--directions", "deen", "--output_dir", "out", cwd=tmp_path)
    assert completed.returncode == 1
    assert "--directions: ['deen'] are not SOURCE-TARGET language pairs" in completed.stderr


def test_paired_table_gives_the_mean_difference_and_its_standard_error(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from bench_quality import paired_table

    def runs(*validation_and_test):
        return [
            {"seed": seed, "validation BLEU": v, "test BLEU": t} for seed, (v, t) in enumerate(validation_and_test)
        ]

    results = {
        ("de-en", "softmax"): runs((30.0, 31.0), (32.0, 31.0), (31.0, 30.0)),
        ("de-en", "adaptive"): runs((30.5, 31.0), (31.5, 32.0), (32.0, 30.0)),
    }
    lines = paired_table(results, "softmax")
    # Differences +0.5, −0.5, +1.0: mean 0.33, standard deviation 0.76, standard error 0.76 / √3 = 0.44.
    assert (
        "| de-en | adaptive | 3 | +0.33 ± 0.44 | +0.50, -0.50, +1.00 | +0.33 ± 0.33 | +0.00, +1.00, +0.00 |" in lines
    )
    assert paired_table({("de-en", "adaptive"): results[("de-en", "adaptive")]}, "softmax") == []


def stop_after_first_checkpoint(arguments: list[str], cwd: Path, run: Path) -> subprocess.CompletedProcess:
    """Start the benchmark and press Ctrl-C (SIGINT to its process group) once ``run`` holds a complete checkpoint."""
    environment = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    command = [sys.executable, str(BENCHMARKS / "bench_quality.py"), *arguments]
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # SIGINT as in a terminal: a shell without job control starts a background command (`pytest … &`) with
        # SIGINT ignored, the benchmark would inherit that, and Python then never raises KeyboardInterrupt.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    while process.poll() is None and not list(run.glob("checkpoint-*/trainer_state.json")):
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def test_a_stopped_run_resumes_from_its_checkpoint_and_learns_what_an_unstopped_one_does(tmp_path):
    write_corpus(tmp_path / "my-corpus")
    arguments = [*documented_command(), "--variants", "adaptive", "--seeds", "0", "--max_steps", "20"]
    arguments += ["--batch_size", "8", "--save_steps", "2", "--extra", TINY]
    run = tmp_path / "out" / "20-steps" / "ja-en" / "adaptive" / "seed0"

    stopped = stop_after_first_checkpoint([*arguments, "--output_dir", "out"], tmp_path, run)
    assert stopped.returncode == EXIT_INTERRUPTED, stopped.stderr
    assert stopped.stderr.strip().splitlines()[-1].startswith("stopped (Ctrl-C): hf-entmax train ")
    assert not (run / "training_summary.json").exists()

    changed = [*arguments[:-1], TINY + " --learning_rate 3e-4", "--output_dir", "out"]
    refused = bench_quality(*changed, cwd=tmp_path)
    assert refused.returncode == 1
    assert "seed0 was started with other flags (--learning_rate: not given then, 3e-4 now)" in refused.stderr

    resumed = bench_quality(*arguments, "--output_dir", "out", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout
    assert "resuming out/20-steps/ja-en/adaptive/seed0 from checkpoint-" in resumed.stdout
    commands = [line for line in (tmp_path / "out" / "commands.log").read_text().splitlines() if line.startswith("$")]
    assert commands[-1].endswith("--resume_from_checkpoint true --output_dir out/20-steps/ja-en/adaptive/seed0")
    assert json.loads((run / "training_summary.json").read_text())["global_step"] == 20
    assert not list(run.glob("checkpoint-*"))

    unstopped = bench_quality(*arguments, "--output_dir", "unstopped", cwd=tmp_path)
    assert unstopped.returncode == 0, unstopped.stderr
    other = tmp_path / "unstopped" / "20-steps" / "ja-en" / "adaptive" / "seed0"
    assert json.loads((other / RUN_RECORD).read_text()) == json.loads((run / RUN_RECORD).read_text())
    weights, other_weights = load_file(run / "model.safetensors"), load_file(other / "model.safetensors")
    assert weights.keys() == other_weights.keys()
    for name, tensor in weights.items():
        assert torch.equal(tensor, other_weights[name]), name


def test_a_checkpoint_that_no_logged_command_started_is_not_resumed(tmp_path):
    write_corpus(tmp_path / "my-corpus")
    run = tmp_path / "out" / "20-steps" / "ja-en" / "softmax" / "seed0"
    (run / "checkpoint-2").mkdir(parents=True)
    (run / "checkpoint-2" / "trainer_state.json").write_text("{}")
    arguments = [*documented_command(), "--variants", "softmax", "--seeds", "0", "--max_steps", "20"]
    completed = bench_quality(*arguments, "--output_dir", "out", "--extra", TINY, cwd=tmp_path)
    assert completed.returncode == 1
    assert completed.stderr.strip() == (
        "out/20-steps/ja-en/softmax/seed0 holds checkpoint-2 but out/commands.log has no command that started it: "
        "move that run"
    )
