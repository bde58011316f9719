"""What `hf-entmax train`'s default recipes reach at a fixed budget, through the commands users type (Multi30k de→en).

    python benchmarks/bench_recipes.py --data_dir ../shared/data/multi30k [--max_steps 1200] [--fine_tune_steps 400]
        [--markdown README.md docs/benchmarks.md]

Runs, each a `hf-entmax` command line (logged with its output under --output_dir):

1. a fresh `small` model with no optimiser flags: the from-scratch recipe (adaptive α, the config's default start);
2. the same with `--recipe none`: Trainer's defaults (learning rate 5e-5, linear decay, no warm-up), as before;
3. a softmax parent (α = 1 fixed, from-scratch recipe), saved as a plain MarianMT folder, the stand-in for an
   OPUS-MT checkpoint (there is no network here);
4. the parent converted (`hf-entmax convert`), then fine-tuned with learned α from 1.1 and no optimiser flags (the
   fine-tuning recipe) for --fine_tune_steps steps; before that, the converted model with α = 1.1 untrained is
   evaluated (`--do_train False`) to show what fine-tuning recovers.

Prints (and writes with --markdown) validation and test BLEU/chrF of each, with the sacreBLEU signature.
"""

import argparse
import shlex
from pathlib import Path

from runs import corpus_flags, run, scores
from tables import measured_command, write_tables


FIXED_SOFTMAX = ["--alpha_init", "1", "--learn_alpha", "False"]


def save_as_marian(folder: Path, output: Path) -> None:
    """An AdaptiveEntmaxMarian folder with α = 1 fixed is Marian weight for weight: save it as a MarianMT folder."""
    from transformers import AutoTokenizer, MarianConfig, MarianMTModel

    from hf_entmax import AdaptiveEntmaxMarianMTModel

    model = AdaptiveEntmaxMarianMTModel.from_pretrained(folder)
    fields = {key: value for key, value in model.config.to_dict().items() if key in MarianConfig.__dataclass_fields__}
    marian = MarianMTModel(MarianConfig(**fields))
    marian.load_state_dict(model.state_dict())
    marian.generation_config = model.generation_config
    marian.save_pretrained(output)
    AutoTokenizer.from_pretrained(folder, config=model.config).save_pretrained(output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default="../shared/data/multi30k")
    parser.add_argument("--output_dir", default="benchmarks/outputs/recipes")
    parser.add_argument("--max_steps", type=int, default=1200)
    parser.add_argument("--fine_tune_steps", type=int, default=400)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--markdown",
        nargs="+",
        default=None,
        help="also put the table into these Markdown files (between their table:recipes markers)",
    )
    parser.add_argument(
        "--extra",
        default="",
        help="flags added to every hf-entmax train command, e.g. for a quick check of the script",
    )
    arguments = parser.parse_args()

    out = Path(arguments.output_dir)
    log = out / "commands.log"
    cli = ["hf-entmax"]
    data = corpus_flags(Path(arguments.data_dir), "de", "en")
    training = data["train"]
    common = [*data["pair"], *data["evaluation"], "--per_device_train_batch_size", str(arguments.batch_size)]
    common += ["--save_strategy", "no", "--report_to", "none", "--seed", str(arguments.seed), "--disable_tqdm", "True"]
    common += shlex.split(arguments.extra)
    budget = ["--max_steps", str(arguments.max_steps)]

    def train_fresh(folder_name: str, extra: list[str]) -> dict:
        folder = out / folder_name
        if not (folder / "training_summary.json").exists():
            run([*cli, "train", *training, *common, *budget, *extra, "--output_dir", str(folder)], log)
        return scores(folder)

    rows = {"fresh model, default recipe (from-scratch)": train_fresh("fresh_default", [])}
    # The fine-tuning path runs before the Trainer-defaults baseline, so that an interrupted run has the README's path.
    rows["softmax parent (α = 1 fixed), default recipe"] = train_fresh("softmax_parent", FIXED_SOFTMAX)

    marian = out / "marian_parent"
    if not (marian / "config.json").exists():
        save_as_marian(out / "softmax_parent", marian)
    converted = out / "converted"
    if not (converted / "config.json").exists():
        run([*cli, "convert", "--model", str(marian), "--output", str(converted), "--no-check_load"], log)
    alpha_start = ["--learn_alpha", "True", "--alpha_init", "1.1"]
    untrained = out / "converted_alpha_1.1_untrained"
    if not (untrained / "training_summary.json").exists():
        run(
            [
                *cli,
                "train",
                "--model_name_or_path",
                str(converted),
                *alpha_start,
                "--do_train",
                "False",
                "--do_eval",
                "True",
                "--do_predict",
                "True",
                *common,
                "--output_dir",
                str(untrained),
            ],
            log,
        )
    rows["parent converted, α learned from 1.1, before fine-tuning"] = scores(untrained)
    fine_tuned = out / "converted_fine_tuned"
    if not (fine_tuned / "training_summary.json").exists():
        run(
            [
                *cli,
                "train",
                "--model_name_or_path",
                str(converted),
                *alpha_start,
                *training,
                *common,
                "--max_steps",
                str(arguments.fine_tune_steps),
                "--output_dir",
                str(fine_tuned),
            ],
            log,
        )
    rows[f"… fine-tuned {arguments.fine_tune_steps} steps, default recipe (fine-tuning)"] = scores(fine_tuned)
    rows["fresh model, --recipe none (Trainer's defaults)"] = train_fresh("fresh_recipe_none", ["--recipe", "none"])

    rows = dict(sorted(rows.items(), key=lambda item: not item[0].startswith("fresh model")))  # fresh runs first
    lines = [
        "| run | recipe | validation BLEU | validation chrF | test BLEU | test chrF | mean α (enc, dec, cross) |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, row in rows.items():
        alphas = ", ".join(f"{value:.2f}" for value in row["mean α"].values())
        recipe = row["recipe"] or "— (not trained)"
        lines.append(
            f"| {name} | {recipe} | {row['validation BLEU']:.1f} | {row['validation chrF']:.1f} | "
            f"{row['test BLEU']:.1f} | {row['test chrF']:.1f} | {alphas} |"
        )
    signature = next(iter(rows.values()))["signature"]
    lines += [
        "",
        f"sacreBLEU {signature}; {arguments.max_steps} steps × batch {arguments.batch_size}, seed {arguments.seed}.",
    ]
    table = "\n".join(lines)
    print(table)
    if arguments.markdown:
        command = measured_command("bench_recipes.py")
        write_tables(arguments.markdown, {"recipes": f"{table}\n\nMeasured with `{command}`."})


if __name__ == "__main__":
    main()
