"""Translation quality at an equal budget: softmax vs 1.5-entmax vs adaptive α-entmax, through `hf-entmax train`.

    python benchmarks/bench_quality.py --data_dir ../shared/data/multi30k --directions de-en en-de \\
        --variants softmax entmax15 adaptive --seeds 0 1 2 [--max_steps 1200] [--markdown docs/benchmarks.md]

Each run is the command line a user types: `hf-entmax train` with the `small` preset, its default recipe and only the
flags that define the variant (and the seed); validation (`val`) and test (`test_2016_flickr`) are scored at the end.
Runs already finished in --output_dir are read, not repeated, so the benchmark can be extended seed by seed; a run
stopped before it finished (Ctrl-C, a closed session) resumes from its last checkpoint, saved every --save_steps steps
and removed once the run finished, when the same command runs again.

Any parallel corpus works, such as your own language pair: --data_dir holds line-aligned files `<split>.<language>`,
the split names given by --train_name, --validation_name and --test_name (Multi30k's `train`, `val` and
`test_2016_flickr` by default). Besides the table, each variant is compared with --baseline (`softmax`) seed by seed:
the mean difference and its standard error, the numbers to judge "adaptive ≥ softmax − 0.3 BLEU" by.

`--join K` trains and evaluates on a corpus of longer inputs made from the same data: every K consecutive sentences
of each split joined into one line (sources and targets alike; a last incomplete group is left out), written to
--output_dir/data/join<K>. Give `--batch_size` ÷ K to keep the tokens per step, and so the cost, of the plain runs.

Variants: `softmax` (α = 1 fixed), `entmax15` (α = 1.5 fixed), `adaptive` (learned α per head, the defaults, which
scale queries by n^(1 − α): `softmax_matched`), the paper's unscaled `entmax15-unscaled` and `adaptive-unscaled`, and
any `--variant NAME="FLAGS"` added for an experiment (e.g. `--variant adaptive-a1.1="--alpha_init 1.1"`). Choose
among variants on validation BLEU; the test columns confirm. A finished run is reused only if it was trained with the
flags the benchmark would give it now (corpus files, variant, seed, --extra: recorded in its `benchmark_command.json`);
after a change of `hf-entmax train`'s own defaults, use a new --output_dir.
"""

import argparse
import json
import math
import re
import shlex
import shutil
import statistics
import sys
from pathlib import Path

from runs import MULTI30K_SPLITS, corpus_flags, joined_corpus, run, scores
from tables import measured_command, write_tables

from hf_entmax.training.run import last_complete_checkpoint


VARIANTS = {
    "softmax": ["--alpha_init", "1", "--learn_alpha", "False"],
    "entmax15": ["--alpha_init", "1.5", "--learn_alpha", "False"],
    "adaptive": [],
    # The paper's model: no query scaling (the command's default before softmax_matched).
    "entmax15-unscaled": ["--alpha_init", "1.5", "--learn_alpha", "False", "--attention_scaling", "none"],
    "adaptive-unscaled": ["--attention_scaling", "none"],
}
# Written into each run folder once its training finished: the flags it was trained with (all but --output_dir).
RUN_RECORD = "benchmark_command.json"
# Where a run keeps its checkpoints, not what it learns: left out of the record and of the comparison with it (runs
# recorded before checkpoints were kept were trained with `--save_strategy no`).
CHECKPOINT_FLAGS = ("--save_strategy", "--save_steps", "--save_total_limit", "--resume_from_checkpoint")


def mean_and_spread(values: list[float]) -> str:
    """``mean ± sample standard deviation`` (just the value for one seed)."""
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def mean_difference(differences: list[float]) -> str:
    """``mean ± standard error of the mean``, signed (just the difference for one seed)."""
    if len(differences) == 1:
        return f"{differences[0]:+.2f}"
    standard_error = statistics.stdev(differences) / math.sqrt(len(differences))
    return f"{statistics.mean(differences):+.2f} ± {standard_error:.2f}"


def flag_values(flags: list[str]) -> dict[str, str]:
    """``{flag: value}`` of a command line's flags, ``""`` for a flag without one (a later flag wins, as in the
    command itself)."""
    values = {}
    for index, word in enumerate(flags):
        if word.startswith("--"):
            following = flags[index + 1] if index + 1 < len(flags) else "--"
            values[word] = "" if following.startswith("--") else following
    return values


def stop_if_flags_differ(folder: Path, recorded: list[str], flags: list[str], how: str) -> None:
    """Stop, naming the flags that differ, if the run in ``folder`` was ``how`` ("trained", "started") with other
    flags than ``flags`` (`CHECKPOINT_FLAGS` aside)."""
    then, now = flag_values(recorded), flag_values(flags)
    differing = sorted(
        flag for flag in then.keys() | now.keys() if flag not in CHECKPOINT_FLAGS and then.get(flag) != now.get(flag)
    )
    if differing:
        details = "; ".join(
            f"{flag}: {then.get(flag, 'not given')} then, {now.get(flag, 'not given')} now" for flag in differing
        )
        sys.exit(f"{folder} was {how} with other flags ({details}): use another --output_dir, or move that run")


def check_reusable(folder: Path, flags: list[str]) -> bool:
    """Whether the finished run in ``folder`` was trained with ``flags``; stops, naming the flags that differ, if it
    was not. ``False`` for a run trained before runs kept their flags (it is reused, and counted as such)."""
    record = folder / RUN_RECORD
    if not record.exists():
        return False
    stop_if_flags_differ(folder, json.loads(record.read_text())["flags"], flags, "trained")
    return True


def started_flags(folder: Path, log: Path) -> list[str] | None:
    """The flags of the last `hf-entmax train` command `run` logged for ``folder`` (None if there is none)."""
    command = "$ hf-entmax train "
    lines = [
        shlex.split(line.removeprefix(command)) for line in log.read_text().splitlines() if line.startswith(command)
    ]
    started = [words[:-2] for words in lines if words[-2:] == ["--output_dir", str(folder)]]
    return started[-1] if started else None


def train(flags: list[str], folder: Path, save_steps: int, log: Path) -> None:
    """Train one run into ``folder`` with ``flags``, from its last checkpoint if an earlier try left one; record
    the flags, and remove the checkpoints once it finished."""
    saving = ["--save_strategy", "steps", "--save_steps", str(save_steps), "--save_total_limit", "1"]
    checkpoint = last_complete_checkpoint(folder) if folder.is_dir() else None
    if checkpoint is not None:
        started = started_flags(folder, log) if log.exists() else None
        if started is None:
            sys.exit(f"{folder} holds {checkpoint.name} but {log} has no command that started it: move that run")
        stop_if_flags_differ(folder, started, flags, "started")
        print(f"resuming {folder} from {checkpoint.name}")
        saving += ["--resume_from_checkpoint", "true"]
    run(["hf-entmax", "train", *flags, *saving, "--output_dir", str(folder)], log)
    (folder / RUN_RECORD).write_text(json.dumps({"flags": flags}, indent=1))
    for finished_checkpoint in folder.glob("checkpoint-*"):
        shutil.rmtree(finished_checkpoint)


def paired_table(results: dict[tuple[str, str], list[dict]], baseline: str) -> list[str]:
    """Markdown lines: each variant minus ``baseline`` on the same corpus, seed by seed (the seeds both have)."""
    lines = [
        f"| direction | attention − {baseline} | paired seeds | validation BLEU | … per seed | test BLEU "
        "| … per seed |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (corpus, name), runs in results.items():
        baseline_runs = {run["seed"]: run for run in results.get((corpus, baseline), [])}
        pairs = [(run, baseline_runs[run["seed"]]) for run in runs if run["seed"] in baseline_runs]
        if name == baseline or not pairs:
            continue
        cells = []
        for metric in ("validation BLEU", "test BLEU"):
            differences = [run[metric] - other[metric] for run, other in pairs]
            cells += [mean_difference(differences), ", ".join(f"{difference:+.2f}" for difference in differences)]
        lines.append(f"| {corpus} | {name} | {len(pairs)} | {' | '.join(cells)} |")
    if len(lines) == 2:
        return []
    return [
        "",
        *lines,
        "",
        f"Paired by seed (the same tokenizer, seed and data order): the mean difference from {baseline} ± its "
        "standard error over seeds; positive is ahead.",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default="../shared/data/multi30k")
    parser.add_argument("--train_name", default=MULTI30K_SPLITS["train"], help="training files: NAME.<language>")
    parser.add_argument("--validation_name", default=MULTI30K_SPLITS["validation"], help="validation files")
    parser.add_argument("--test_name", default=MULTI30K_SPLITS["test"], help="test files")
    parser.add_argument("--output_dir", default="benchmarks/outputs/quality")
    parser.add_argument("--directions", nargs="+", default=["de-en"], help="source-target pairs, e.g. de-en en-de")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument(
        "--variant", action="append", default=[], metavar='NAME="FLAGS"', help="an extra variant: its train flags"
    )
    parser.add_argument("--baseline", default="softmax", help="the variant the others are compared with, per seed")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--max_steps", type=int, default=1200)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--join", type=int, default=1, help="sentences joined into one input line (1: the corpus)")
    parser.add_argument(
        "--save_steps", type=int, default=500, help="steps between the checkpoints a stopped run resumes from"
    )
    parser.add_argument("--extra", default="", help="flags added to every run (e.g. for a quick check of the script)")
    parser.add_argument(
        "--finished_only",
        action="store_true",
        help="train nothing: report the runs already finished (seeds may differ)",
    )
    parser.add_argument("--markdown", nargs="+", default=None, help="put the table into these Markdown files")
    parser.add_argument("--table", default="quality", help="the name of the table's markers in the --markdown files")
    arguments = parser.parse_args()

    variants = dict(VARIANTS)
    for definition in arguments.variant:
        name, _, flags = definition.partition("=")
        variants[name] = shlex.split(flags)
    unknown = [name for name in arguments.variants if name not in variants]
    if unknown:
        sys.exit(f"unknown variants {unknown}: define them with --variant NAME=FLAGS")
    if arguments.join < 1:
        sys.exit(f"--join must be 1 or more sentences per line, got {arguments.join}")
    if arguments.save_steps < 1:
        sys.exit(f"--save_steps must be 1 or more steps, got {arguments.save_steps}")
    malformed = [direction for direction in arguments.directions if not re.fullmatch(r"[^-]+-[^-]+", direction)]
    if malformed:
        sys.exit(f"--directions: {malformed} are not SOURCE-TARGET language pairs (e.g. de-en)")

    split_files = {
        "train": arguments.train_name,
        "validation": arguments.validation_name,
        "test": arguments.test_name,
    }
    out = Path(arguments.output_dir)
    for direction in arguments.directions:  # every direction's files, before hours of training on the first
        corpus_flags(Path(arguments.data_dir).resolve(), *direction.split("-"), split_files)
    results = {}
    unrecorded = []
    for direction in arguments.directions:
        source, target = direction.split("-")
        data_dir, corpus = Path(arguments.data_dir).resolve(), direction
        if arguments.join > 1:
            joined = out / "data" / f"join{arguments.join}"
            data_dir = joined_corpus(data_dir, arguments.join, [source, target], joined.resolve(), split_files)
            corpus = f"{direction}-join{arguments.join}"
        data = corpus_flags(data_dir, source, target, split_files)
        for name in arguments.variants:
            for seed in arguments.seeds:
                folder = out / f"{arguments.max_steps}-steps" / corpus / name / f"seed{seed}"
                flags = [*data["pair"], *data["train"], *data["evaluation"], "--max_steps", str(arguments.max_steps)]
                flags += ["--per_device_train_batch_size", str(arguments.batch_size), "--seed", str(seed)]
                flags += ["--report_to", "none", "--disable_tqdm", "True"]
                flags += [*variants[name], *shlex.split(arguments.extra)]
                if (folder / "training_summary.json").exists():
                    if not check_reusable(folder, flags):
                        unrecorded.append(str(folder))
                elif arguments.finished_only:
                    print(f"not finished, left out: {folder}")
                    continue
                else:
                    train(flags, folder, arguments.save_steps, out / "commands.log")
                results.setdefault((corpus, name), []).append({"seed": seed, **scores(folder)})
    if unrecorded:
        print(f"reused without a record of their flags (trained before runs kept one): {', '.join(unrecorded)}")

    if not results:
        sys.exit("no finished run to report")
    lines = [
        "| direction | attention | flags | seeds | validation BLEU | … per seed | test BLEU | test chrF | train loss "
        "| mean α (enc, dec, cross) | heads with α ≥ 1.5 |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for (direction, name), runs in results.items():
        alphas = ", ".join(f"{statistics.mean(run['mean α'][kind] for run in runs):.2f}" for kind in runs[0]["mean α"])
        sparse = statistics.mean(run["sparse heads"] for run in runs)
        per_seed = ", ".join(f"{run['validation BLEU']:.1f}" for run in runs)  # shows runs that failed to learn
        lines.append(
            f"| {direction} | {name} | `{shlex.join(variants[name]) or '(defaults)'}` | {len(runs)} "
            f"| {mean_and_spread([run['validation BLEU'] for run in runs])} "
            f"| {per_seed} "
            f"| {mean_and_spread([run['test BLEU'] for run in runs])} "
            f"| {mean_and_spread([run['test chrF'] for run in runs])} "
            f"| {mean_and_spread([run['train loss'] for run in runs])} | {alphas} | {sparse:.1f}/{runs[0]['heads']} |"
        )
    signature = next(iter(results.values()))[0]["signature"]
    lines += [
        "",
        f"sacreBLEU {signature}; `small` preset, {arguments.max_steps} steps × batch {arguments.batch_size}, "
        "default recipe; mean ± standard deviation over seeds."
        + (f" `-join{arguments.join}`: {arguments.join} sentences joined per line." if arguments.join > 1 else ""),
        *paired_table(results, arguments.baseline),
    ]
    table = "\n".join(lines)
    print(table)
    (out / f"results-{arguments.table}.json").write_text(
        json.dumps({f"{direction} {name}": runs for (direction, name), runs in results.items()}, indent=1)
    )
    if arguments.markdown:
        command = measured_command("bench_quality.py")
        write_tables(arguments.markdown, {arguments.table: f"{table}\n\nMeasured with `{command}`."})


if __name__ == "__main__":
    main()
