"""Translation quality at an equal budget: softmax vs 1.5-entmax vs adaptive α-entmax, through `hf-entmax train`.

    python benchmarks/bench_quality.py --data_dir ../shared/data/multi30k --directions de-en en-de \\
        --variants softmax entmax15 adaptive --seeds 0 1 2 [--max_steps 1200] [--markdown docs/benchmarks.md]

Each run is the command line a user types: `hf-entmax train` with the `small` preset, its default recipe and only the
flags that define the variant (and the seed); validation (`val`) and test (`test_2016_flickr`) are scored at the end.
Runs already finished in --output_dir are read, not repeated, so the benchmark can be extended seed by seed.

`--join K` trains and evaluates on a corpus of longer inputs made from the same data: every K consecutive sentences
of each split joined into one line (sources and targets alike; a last incomplete group is left out), written to
--output_dir/data/join<K>. Give `--batch_size` ÷ K to keep the tokens per step, and so the cost, of the plain runs.

Variants: `softmax` (α = 1 fixed), `entmax15` (α = 1.5 fixed), `adaptive` (learned α per head, the defaults, which
scale queries by n^(1 − α): `softmax_matched`), the paper's unscaled `entmax15-unscaled` and `adaptive-unscaled`, and
any `--variant NAME="FLAGS"` added for an experiment (e.g. `--variant adaptive-a1.1="--alpha_init 1.1"`). Choose
among variants on validation BLEU; the test columns confirm. A finished run is reused as it is: after a change of the
command's defaults, use a new --output_dir (or move the runs whose meaning changed).
"""

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path

from runs import joined_multi30k, multi30k_flags, run, scores
from tables import write_tables


VARIANTS = {
    "softmax": ["--alpha_init", "1", "--learn_alpha", "False"],
    "entmax15": ["--alpha_init", "1.5", "--learn_alpha", "False"],
    "adaptive": [],
    # The paper's model: no query scaling (the command's default before softmax_matched).
    "entmax15-unscaled": ["--alpha_init", "1.5", "--learn_alpha", "False", "--attention_scaling", "none"],
    "adaptive-unscaled": ["--attention_scaling", "none"],
}


def mean_and_spread(values: list[float]) -> str:
    """``mean ± sample standard deviation`` (just the value for one seed)."""
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default="../shared/data/multi30k")
    parser.add_argument("--output_dir", default="benchmarks/outputs/quality")
    parser.add_argument("--directions", nargs="+", default=["de-en"], help="source-target pairs, e.g. de-en en-de")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument(
        "--variant", action="append", default=[], metavar='NAME="FLAGS"', help="an extra variant: its train flags"
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--max_steps", type=int, default=1200)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--join", type=int, default=1, help="sentences joined into one input line (1: the corpus)")
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
    out = Path(arguments.output_dir)
    data_dir = Path(arguments.data_dir)
    results = {}
    for direction in arguments.directions:
        source, target = direction.split("-")
        corpus = direction
        if arguments.join > 1:
            data_dir = joined_multi30k(
                Path(arguments.data_dir), arguments.join, [source, target], out / "data" / f"join{arguments.join}"
            )
            corpus = f"{direction}-join{arguments.join}"
        data = multi30k_flags(data_dir, source, target)
        for name in arguments.variants:
            for seed in arguments.seeds:
                folder = out / f"{arguments.max_steps}-steps" / corpus / name / f"seed{seed}"
                if not (folder / "training_summary.json").exists():
                    if arguments.finished_only:
                        print(f"not finished, left out: {folder}")
                        continue
                    command = ["hf-entmax", "train", *data["pair"], *data["train"], *data["evaluation"]]
                    command += ["--max_steps", str(arguments.max_steps), "--per_device_train_batch_size"]
                    command += [str(arguments.batch_size), "--seed", str(seed), "--save_strategy", "no"]
                    command += ["--report_to", "none", "--disable_tqdm", "True", "--output_dir", str(folder)]
                    run([*command, *variants[name], *shlex.split(arguments.extra)], out / "commands.log")
                results.setdefault((corpus, name), []).append(scores(folder))

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
    ]
    table = "\n".join(lines)
    print(table)
    (out / f"results-{arguments.table}.json").write_text(
        json.dumps({f"{direction} {name}": runs for (direction, name), runs in results.items()}, indent=1)
    )
    if arguments.markdown:
        command = shlex.join(["python", "benchmarks/bench_quality.py", *sys.argv[1:]])
        write_tables(arguments.markdown, {arguments.table: f"{table}\n\nMeasured with `{command}`."})


if __name__ == "__main__":
    main()
