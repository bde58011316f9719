"""What the benchmarks share: running an `hf-entmax` command line with its output logged, reading what a run reached
from its `training_summary.json`, the log of a benchmark, the `--threads` option, and the one line a benchmark ends
with on Ctrl-C."""

import argparse
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from hf_entmax.cli import EXIT_INTERRUPTED


MULTI30K_TEST = "test_2016_flickr"
# The file names (before `.<language>`) of Multi30k's training, validation and test splits.
MULTI30K_SPLITS = {"train": "train", "validation": "val", "test": MULTI30K_TEST}


def stop_in_one_line(main: Callable[[], None]) -> None:
    """Run a benchmark's ``main()``; Ctrl-C ends it with one line, which says what the interruption left (its message,
    where it has one), and exit code 130, as `hf-entmax` does. HF_ENTMAX_DEBUG=1 shows the traceback instead."""
    try:
        main()
    except KeyboardInterrupt as stop:
        if os.environ.get("HF_ENTMAX_DEBUG"):
            raise
        print(f"interrupted: {stop}" if str(stop) else "interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)


def add_threads_option(parser: argparse.ArgumentParser) -> None:
    """``--threads N``: torch's CPU threads; `use_threads` applies it once the arguments are parsed."""

    def positive(text: str) -> int:
        if not text.isdigit() or int(text) < 1:
            raise argparse.ArgumentTypeError(f"a positive number of threads, got {text!r}")
        return int(text)

    parser.add_argument(
        "--threads",
        type=positive,
        help="torch's CPU threads (default: torch's own); 1 gives steadier ratios on a busy machine.",
    )


def use_threads(arguments: argparse.Namespace) -> None:
    """Set torch's CPU threads to ``--threads``, where it was given."""
    if arguments.threads is not None:
        torch.set_num_threads(arguments.threads)


@contextmanager
def benchmark_log(folder: Path, command: str, settings: dict, machine: str) -> Iterator[Callable[[str], None]]:
    """A ``log(line)`` that prints and appends to ``folder/log.txt``, which starts with the command line, the settings
    and the machine of this invocation."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "log.txt").open("a") as log_file:

        def log(line: str) -> None:
            print(line, flush=True)
            log_file.write(line + "\n")
            log_file.flush()

        log(f"$ {command}")
        log(f"settings: {json.dumps(settings, default=str)}")
        log(f"machine: {machine}")
        yield log


def run(command: list[str], log: Path) -> None:
    """Run one command line, its output appended to ``log``; stop the benchmark if it fails."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as handle:
        handle.write(f"$ {shlex.join(command)}\n")
        handle.flush()
        try:
            completed = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT)
        except KeyboardInterrupt:
            print(f"stopped (Ctrl-C): {shlex.join(command)}; see {log}", file=sys.stderr)
            sys.exit(EXIT_INTERRUPTED)
    if completed.returncode != 0:
        sys.exit(f"failed ({completed.returncode}): {shlex.join(command)}; see {log}")


def corpus_flags(
    data_dir: Path, source: str, target: str, split_files: dict[str, str] = MULTI30K_SPLITS
) -> dict[str, list[str]]:
    """`hf-entmax train` data flags for a parallel corpus in one direction: training, and validation + test.

    Each split is a pair of line-aligned files ``<name>.<language>`` in ``data_dir``, the name given by
    ``split_files`` (``{"train": …, "validation": …, "test": …}``; Multi30k's by default). Stops, naming every missing
    file, before anything is trained."""
    paths = {
        split: [data_dir / f"{name}.{source}", data_dir / f"{name}.{target}"] for split, name in split_files.items()
    }
    missing = [str(path) for pair in paths.values() for path in pair if not path.is_file()]
    if missing:
        expected = ", ".join(f"{split} {name}.{{{source},{target}}}" for split, name in split_files.items())
        sys.exit(f"missing corpus files: {', '.join(missing)} (expected in {data_dir}: {expected})")
    flags = {"pair": ["--source_lang", source, "--target_lang", target], "train": [], "evaluation": []}
    for split, (source_path, target_path) in paths.items():
        group = "train" if split == "train" else "evaluation"
        flags[group] += [f"--{split}_source_file", str(source_path), f"--{split}_target_file", str(target_path)]
    return flags


def joined_lines(lines: list[str], k: int) -> list[str]:
    """Each group of ``k`` consecutive lines joined with a space into one line; a last incomplete group is left out."""
    return [" ".join(lines[start : start + k]) for start in range(0, len(lines) - k + 1, k)]


def joined_corpus(
    data_dir: Path, k: int, languages: list[str], folder: Path, split_files: dict[str, str] = MULTI30K_SPLITS
) -> Path:
    """A copy of the corpus's split files (``split_files``, for ``languages``) in ``folder`` with every ``k``
    consecutive sentences joined into one line: a corpus of inputs ``k`` times as long. Returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in split_files.values():
        for language in languages:
            lines = (data_dir / f"{name}.{language}").read_text(encoding="utf-8").splitlines()
            target = folder / f"{name}.{language}"
            text = "".join(line + "\n" for line in joined_lines(lines, k))
            if not target.exists() or target.read_text(encoding="utf-8") != text:
                target.write_text(text, encoding="utf-8")
    return folder


def scores(folder: Path) -> dict:
    """Validation and test BLEU/chrF, the mean training loss, the recipe, and α of a finished run."""
    summary = json.loads((folder / "training_summary.json").read_text())
    metrics = summary["metrics"]
    alphas = [alpha for rows in summary["alphas"].values() for row in rows for alpha in row]
    mean_alpha = {kind: sum(map(sum, rows)) / sum(map(len, rows)) for kind, rows in summary["alphas"].items()}
    return {
        "validation BLEU": metrics.get("eval_bleu"),
        "validation chrF": metrics.get("eval_chrf"),
        "test BLEU": metrics.get("test_bleu"),
        "test chrF": metrics.get("test_chrf"),
        "train loss": metrics.get("train_loss"),
        "signature": summary["sacrebleu_signatures"]["bleu_signature"],
        "recipe": summary["recipe"],
        "mean α": mean_alpha,
        "sparse heads": sum(alpha >= 1.5 for alpha in alphas),
        "heads": len(alphas),
    }
