"""`hf-entmax analyze`: what each attention head learned, as in the paper's Section 5 and Appendix A.

On a sample of sentence pairs it measures, per attention type, layer and head: α (and α over training when the
folder has `alpha_history.json`), attention density, head diversity (Jensen–Shannon divergence between heads) and
head roles (previous/next-token heads, subword-merging heads, the most attended tokens); for attention types that
scale their queries (ASEntmax), β and γ of each head and the factor δ + β·log(n + 1)^γ against the number of keys
n, at the sample's lengths and 8× the longest. It writes PNG figures, report.json with every number and report.md
with tables and findings. `--compare` adds other models (for example softmax and 1.5-entmax baselines, or a plain
Marian model) to the same figures and tables.
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ..analysis.collect import analyze_model
from ..analysis.findings import summarize
from ..analysis.inputs import ANALYSABLE_MODEL_TYPES, read_sample
from ..analysis.report import check_report_folder, summary_table, write_report
from ..common.model_folder import check_model_folder
from ..errors import HfEntmaxValueError
from .parsing import CommandParser


def add_parser_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="An AdaptiveEntmaxMarian or Marian model folder.")
    parser.add_argument("--source_file", required=True, help="Source sentences, one a line (UTF-8).")
    parser.add_argument(
        "--target_file",
        default=None,
        help="Their reference translations, line-aligned; without it the decoder reads each model's greedy output.",
    )
    parser.add_argument("--output", required=True, help="The folder to write the figures, report.md and report.json.")
    parser.add_argument(
        "--compare", nargs="+", default=[], metavar="MODEL", help="Other model folders to put side by side."
    )
    parser.add_argument(
        "--names",
        nargs="+",
        default=None,
        help="Names of the model and the compared models in the report (default: their folder names).",
    )
    parser.add_argument("--sample_size", type=int, default=200, help="Analyse the first N sentences (pairs).")
    parser.add_argument("--batch_size", type=int, default=16, help="Sentences per forward pass.")
    parser.add_argument("--max_length", type=int, default=128, help="Longest sentence or translation, in tokens.")
    parser.add_argument(
        "--num_examples_to_plot", type=int, default=3, help="Attention maps for this many of the first sentences."
    )
    parser.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=True, help="Show a progress bar over the sample."
    )


def run(args: argparse.Namespace) -> int:
    folders = [Path(args.model), *map(Path, args.compare)]
    flags = ["model", *(["--compare"] * len(args.compare))]
    names = args.names or _folder_names(folders)
    if len(names) != len(folders):
        raise HfEntmaxValueError(f"--names gives {len(names)} names for {len(folders)} models; give one per model")
    if len(set(names)) != len(names):
        raise HfEntmaxValueError(f"the models need distinct names, got {names}: give them with --names")
    for flag, value in (("--batch_size", args.batch_size), ("--max_length", args.max_length)):
        if value < 1:
            raise HfEntmaxValueError(f"{flag} must be a positive number, got {value}")
    if args.num_examples_to_plot < 0:
        raise HfEntmaxValueError(f"--num_examples_to_plot must be 0 or more, got {args.num_examples_to_plot}")

    # Bad folders and files are reported before anything slow starts.
    check_report_folder(Path(args.output))
    for folder, flag in zip(folders, flags, strict=True):
        check_model_folder(Path(folder), f"{flag} {folder}", ANALYSABLE_MODEL_TYPES)
    sources, targets = read_sample(args.source_file, args.target_file, args.sample_size)

    analyses = [
        analyze_model(
            folder,
            sources,
            targets,
            name=name,
            batch_size=args.batch_size,
            max_length=args.max_length,
            num_examples=args.num_examples_to_plot,
            progress=args.progress,
        )
        for folder, name in zip(folders, names, strict=True)
    ]

    # File names only: the description ends up in model cards, where local paths mean nothing.
    files = " / ".join(Path(file).name for file in (args.source_file, args.target_file) if file)
    report = write_report(analyses, args.output, sample_description=f"the first lines of {files}")
    print(summary_table([{"name": analysis.name, "summary": summarize(analysis)} for analysis in analyses]))
    print(f"Analysed {len(sources)} sentences; figures, report.json and the report with findings: {report}")
    return 0


def _folder_names(folders: list[Path]) -> list[str]:
    """Each folder's name; the parent's too where two folders share a name."""
    names = [folder.resolve().name for folder in folders]
    return [
        f"{folder.resolve().parent.name}/{name}" if names.count(name) > 1 else name
        for folder, name in zip(folders, names, strict=True)
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = CommandParser(prog="hf-entmax analyze", description=__doc__)
    add_parser_arguments(parser)
    return run(parser.parse_args(sys.argv[1:] if argv is None else argv))
