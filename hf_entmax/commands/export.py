"""`hf-entmax export`: write an AdaptiveEntmaxMarian model (e.g. a `hf-entmax train` output) as a Hub-ready folder.

The folder gets safetensors weights (sharded above --max_shard_size), config.json with auto_map and the
translation pipeline, the flat modeling files, tokenizer, generation config, a model card and the training run's
records (training_summary.json, alpha_history.json, Trainer's *_results.json, …) and Sparsefinder's projections
(sparsefinder.safetensors) when the model folder has them;
checkpoint-* folders and pickled training state stay behind. The card takes its name, languages, data, base model,
BLEU/chrF (into the `model-index` metadata), evaluations during training, hyper-parameters and versions from the
model folder's training_summary.json when there is one, and the head analysis (summary, findings, figures) from
an `hf-entmax analyze` output given with --analysis. Only regular files of the model and analysis folders are
copied (no symbolic links, no figure that report.json names outside its folder), and the card's metadata fields
are checked (a license id, language codes, Hub ids): nothing a file or a flag holds can add lines to it.
"""

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ..analysis.collect import analyze_model
from ..analysis.findings import mean_sparsity
from ..analysis.report import REPORT_JSON, model_card_section
from ..common.hub_ids import check_language_code, check_repo_id
from ..common.model_folder import check_model_folder, load_pretrained, load_tokenizer
from ..common.records import RUN_RECORD_FILES, SUMMARY_FILE
from ..common.text_files import read_sentences
from ..errors import HfEntmaxFileNotFoundError
from ..hub.export import check_export_target, export_hub_folder
from ..hub.model_card import ModelCardInfo, check_license, read_training_summary
from ..hub.repo_files import folder_file
from ..modeling.configuration_adaptive_entmax_marian import AdaptiveEntmaxMarianConfig
from ..modeling.modeling_adaptive_entmax_marian import AdaptiveEntmaxMarianMTModel
from ..modeling.sparsefinder_attention import PREDICTOR_FILE
from .hub_folder import add_hub_folder_arguments, check_written_folder
from .parsing import CommandParser


def add_parser_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="An AdaptiveEntmaxMarian folder (e.g. from hf-entmax train).")
    parser.add_argument("--output", required=True, help="The Hub-ready folder to write.")
    parser.add_argument("--source_lang", default=None, help="Source language code (default: the training summary's).")
    parser.add_argument("--target_lang", default=None, help="Target language code (default: the training summary's).")
    parser.add_argument("--license", default="apache-2.0", help="License id for the card metadata.")
    parser.add_argument(
        "--dataset",
        action="append",
        default=None,
        help="Hub id of a training dataset (repeatable); the first also names the evaluation data in the model-index.",
    )
    parser.add_argument("--base_model", default=None, help="Hub id of the model this one was fine-tuned from.")
    parser.add_argument(
        "--sparsity_sentences",
        default=None,
        help="A text file of source sentences: measure the share of exact zeros in attention on them, for the card.",
    )
    parser.add_argument(
        "--analysis",
        default=None,
        help="An `hf-entmax analyze --output` folder of this model: the card gets its summary, findings and figures.",
    )
    add_hub_folder_arguments(parser)


def load_exportable_model(folder: Path) -> AdaptiveEntmaxMarianMTModel:
    name = f"--model {folder}"
    check_model_folder(folder, name, (AdaptiveEntmaxMarianConfig.model_type,))
    return load_pretrained(AdaptiveEntmaxMarianMTModel, folder, name, use_safetensors=True).eval()


def run(args: argparse.Namespace) -> int:
    folder = Path(args.model)
    if not folder.is_dir():
        raise HfEntmaxFileNotFoundError(f"--model {folder}: no such folder")
    overrides = {"license": check_license(args.license, "--license")}
    if args.repo_id:
        overrides["model_id"] = check_repo_id(args.repo_id, "--repo_id")
        overrides["model_name"] = args.repo_id.split("/")[-1]
    else:
        overrides["model_id"] = Path(args.output).resolve().name
    for name in ("source_lang", "target_lang"):
        if getattr(args, name) is not None:
            overrides[name] = check_language_code(getattr(args, name), f"--{name}")
    if args.base_model:
        overrides["base_model"] = check_repo_id(args.base_model, "--base_model")
    if args.dataset:
        overrides["datasets"] = [check_repo_id(dataset, "--dataset") for dataset in args.dataset]
    check_export_target(Path(args.output), args.overwrite)  # before the model loads: the folder may not be replaced
    model = load_exportable_model(folder)
    tokenizer = load_tokenizer(folder, f"--model {folder}", config=model.config)  # no remote code needed here
    summary_path = folder / SUMMARY_FILE
    if summary_path.is_file():
        summary = read_training_summary(summary_path)
        card = ModelCardInfo.from_training_summary(summary, **overrides)
    else:
        card = ModelCardInfo(**overrides, base_model_relation="fine-tuned" if args.base_model else None)
    if args.sparsity_sentences:
        sentences = read_sentences(args.sparsity_sentences, "--sparsity_sentences")
        # The analysis's measure on the model's own translations, so the card agrees with `hf-entmax analyze`.
        card.mean_sparsity = mean_sparsity(analyze_model(model, sentences, tokenizer=tokenizer, progress=False))

    # The run's records, and Sparsefinder's projections (`hf-entmax sparsefinder --save_to_model`) when there are some.
    extra_files = {
        name: folder_file(folder, name, f"--model {folder}")
        for name in (*RUN_RECORD_FILES, PREDICTOR_FILE)
        if os.path.lexists(folder / name)
    }
    if args.analysis:
        card.analysis, figures = model_card_section(
            args.analysis, model.get_alphas(), attention_scales=model.get_attention_scales()
        )
        # report.json names its figures: only files of the analysis folder itself may come from there.
        report = Path(args.analysis)
        for destination, source in figures.items():
            name = source.relative_to(report).as_posix() if source.is_relative_to(report) else str(source)
            extra_files[destination] = folder_file(report, name, f"--analysis {report / REPORT_JSON}")

    export_hub_folder(
        model,
        tokenizer,
        args.output,
        card=card,
        max_shard_size=args.max_shard_size,
        extra_files=extra_files,
        overwrite=args.overwrite,
    )
    print(f"Wrote the Hub-ready folder {args.output} (model card: {Path(args.output) / 'README.md'}).")
    check_written_folder(args)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = CommandParser(prog="hf-entmax export", description=__doc__)
    add_parser_arguments(parser)
    return run(parser.parse_args(sys.argv[1:] if argv is None else argv))
