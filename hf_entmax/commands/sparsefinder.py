"""`hf-entmax sparsefinder`: learn to predict each head's α-entmax graph (Sparsefinder, Treviso et al. 2022), measure
the sparsity–recall trade-off of the predicted graphs per head, and what each operating point costs in translation.

The first sentence pairs of --source_file/--target_file train the per-head projections (the rest, up to
--heldout_size, are held out); on the held-out pairs every method's knob is swept (distance threshold, nearest
keys, quantization buckets, k-means clusters, window size) and each graph is scored by sparsity, recall of the true
non-zero pairs and cost in query–key pairs. With --bleu (the default) the held-out sentences are translated with
each chosen operating point and scored against the references, next to the full model. It writes report.json,
report.md, the figures and sparsefinder.safetensors (the projections) into --output; --save_to_model also puts the
projections in the model folder, where `hf-entmax translate --sparsefinder` and `model.set_predicted_sparsity` find
them.
"""

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from ..analysis.inputs import load_analysable_model, read_sample
from ..analysis.report import check_report_folder
from ..common.model_folder import check_model_folder
from ..errors import HfEntmaxValueError
from ..modeling.configuration_adaptive_entmax_marian import (
    ATTENTION_TITLES,
    ATTENTION_TYPES,
    AdaptiveEntmaxMarianConfig,
)
from ..modeling.modeling_adaptive_entmax_marian import AdaptiveEntmaxMarianMTModel
from ..modeling.sparsefinder_attention import METHODS, PREDICTOR_FILE, PROJECTION_METHODS, SparsefinderPredictor
from ..sparsefinder.collect import collect_attention
from ..sparsefinder.evaluate import choose_points, evaluate_points, sweep_points
from ..sparsefinder.report import REPORT_KEYS, WRITTEN_BY, AttentionTypeResult, write_report
from ..sparsefinder.train import TrainingSettings, train_predictor
from ..training.metrics import corpus_scores
from .parsing import CommandParser
from .translate import translate_lines


def add_parser_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="An AdaptiveEntmaxMarian model folder.")
    parser.add_argument("--source_file", required=True, help="Source sentences, one a line (UTF-8).")
    parser.add_argument("--target_file", required=True, help="Their reference translations, line-aligned.")
    parser.add_argument("--output", required=True, help="The folder for report.json, report.md, figures, predictor.")
    parser.add_argument(
        "--methods", nargs="+", choices=METHODS, default=list(METHODS), help="Graph methods to sweep (default: all)."
    )
    parser.add_argument(
        "--attention_types",
        nargs="+",
        choices=ATTENTION_TYPES,
        default=list(ATTENTION_TYPES),
        help="Attention types to predict (default: all).",
    )
    defaults = TrainingSettings()
    parser.add_argument(
        "--projection_dim", type=int, default=defaults.projection_dim, help="r, the projected dimension (default: 4)."
    )
    parser.add_argument(
        "--epochs", type=int, default=defaults.epochs, help="Training passes over the sample (default: 10)."
    )
    parser.add_argument(
        "--position_term",
        action=argparse.BooleanOptionalAction,
        default=defaults.position_term,
        help="Learn a weight per head on the query–key distance |i − j| for the distance method (default: on).",
    )
    parser.add_argument(
        "--window",
        type=int,
        default=None,
        help="Add a local window of this size to the projection methods in self-attention (default: none).",
    )
    parser.add_argument("--train_size", type=int, default=500, help="Sentence pairs to train on (the first ones).")
    parser.add_argument("--heldout_size", type=int, default=200, help="Held-out pairs to judge on (the next ones).")
    parser.add_argument("--batch_size", type=int, default=16, help="Sentences per forward pass.")
    parser.add_argument("--max_length", type=int, default=128, help="Longest sentence, in tokens.")
    parser.add_argument(
        "--target_recall",
        type=float,
        default=0.95,
        help="Per method, the chosen point is the sparsest with mean recall at least this (default: 0.95; 0: any).",
    )
    parser.add_argument(
        "--target_mass",
        type=float,
        default=0.0,
        help="...and with mean attention mass kept at least this (default: 0, any; e.g. --target_recall 0 "
        "--target_mass 0.99 chooses by the mass alone).",
    )
    parser.add_argument(
        "--head_sparsity",
        type=float,
        default=0.5,
        help="The sparsity at which each head's recall is drawn in head_recall.png (default: 0.5).",
    )
    parser.add_argument(
        "--bleu",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Translate the held-out sentences with each chosen point and the full model (BLEU, chrF).",
    )
    parser.add_argument("--num_beams", type=int, default=None, help="Beam size (default: the generation config's).")
    parser.add_argument(
        "--save_to_model",
        action="store_true",
        help=f"Also write {PREDICTOR_FILE} into the model folder (replacing one that is there).",
    )
    parser.add_argument("--seed", type=int, default=defaults.seed, help="Seed of the training (default: 0).")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True, help="Show progress bars.")


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse numbers out of range before anything loads."""
    for flag in ("projection_dim", "epochs", "train_size", "heldout_size", "batch_size", "max_length"):
        if getattr(args, flag) < 1:
            raise HfEntmaxValueError(f"--{flag} must be a positive integer, got {getattr(args, flag)}")
    if args.num_beams is not None and args.num_beams < 1:
        raise HfEntmaxValueError(f"--num_beams must be a positive integer, got {args.num_beams}")
    if args.window is not None and args.window < 0:
        raise HfEntmaxValueError(f"--window must be 0 or more, got {args.window}")
    for flag in ("target_recall", "target_mass"):
        if not 0.0 <= getattr(args, flag) <= 1.0:
            raise HfEntmaxValueError(f"--{flag} must be in [0, 1], got {getattr(args, flag)}")
    if not 0.0 <= args.head_sparsity <= 1.0:
        raise HfEntmaxValueError(f"--head_sparsity must be in [0, 1], got {args.head_sparsity}")
    if args.attention_types == ["cross"] and args.methods == ["window"]:
        raise HfEntmaxValueError("--methods window: windows exist in self-attention only, not in cross-attention")


def translation_runs(results: dict[str, AttentionTypeResult]) -> list[list[str]]:
    """The restricted-attention settings to translate with: per method, every attention type at its chosen point,
    then (with several types) each type alone; as ``TYPE=SPEC`` lists, as `hf-entmax translate --sparsefinder`
    takes them."""
    runs: list[list[str]] = []
    for method in METHODS:
        chosen = {kind: result.chosen[method] for kind, result in results.items() if method in result.chosen}
        together = [f"{kind}={score.point.spec()}" for kind, score in chosen.items()]
        runs += [together] if together else []
        runs += [[item] for item in together] if len(together) > 1 else []
    return runs


def translation_scores(
    model: AdaptiveEntmaxMarianMTModel,
    tokenizer: PreTrainedTokenizerBase,
    sources: list[str],
    references: list[str],
    runs: list[list[str]],
    predictor: SparsefinderPredictor | None,
    *,
    num_beams: int | None,
    progress: bool,
) -> dict[str, Any]:
    """BLEU and chrF (against ``references``) of the full model and of each restricted-attention run."""

    def score(settings: list[str] | None) -> dict[str, Any]:
        model.set_predicted_sparsity(settings, predictor=predictor)
        translations = translate_lines(model, tokenizer, sources, num_beams=num_beams, progress=False)
        return corpus_scores(translations, references)

    points = []
    try:
        with tqdm(total=len(runs) + 1, desc="Translating", unit="setting", disable=not progress) as bar:
            full = score(None)
            bar.update(1)
            for settings in runs:
                scores = score(settings)
                points.append(
                    {
                        "sparsefinder": settings,
                        "bleu": scores["bleu"],
                        "chrf": scores["chrf"],
                        "delta_bleu": round(scores["bleu"] - full["bleu"], 4),
                        "delta_chrf": round(scores["chrf"] - full["chrf"], 4),
                    }
                )
                bar.update(1)
    finally:
        model.set_predicted_sparsity(None)
    return {
        "sentences": len(sources),
        "num_beams": num_beams or model.generation_config.num_beams,
        "full": full,
        "points": points,
    }


def run(args: argparse.Namespace) -> int:
    check_arguments(args)
    folder, output = Path(args.model), Path(args.output)
    check_report_folder(output, WRITTEN_BY, REPORT_KEYS)
    check_model_folder(folder, f"model {folder}", (AdaptiveEntmaxMarianConfig.model_type,))
    sources, targets = read_sample(args.source_file, args.target_file, args.train_size + args.heldout_size)
    if len(sources) < 2:
        raise HfEntmaxValueError(
            f"{args.source_file} / {args.target_file}: {len(sources)} sentence pair; need at least 2 (to train and to "
            "hold out)"
        )
    # Held-out pairs are the last of the sample (at most half of it when the files are short).
    heldout = min(args.heldout_size, len(sources) // 2)
    train_sources, train_targets = sources[:-heldout], targets[:-heldout]
    heldout_sources, heldout_targets = sources[-heldout:], targets[-heldout:]
    model, tokenizer = load_analysable_model(folder)

    kinds = tuple(args.attention_types)
    methods = [method for method in METHODS if method in args.methods]
    collect = dict(batch_size=args.batch_size, max_length=args.max_length, progress=args.progress)
    predictor = None
    if any(method in PROJECTION_METHODS for method in methods):
        training = collect_attention(
            model, tokenizer, train_sources, train_targets, kinds, description="Collecting (training)", **collect
        )
        settings = TrainingSettings(
            projection_dim=args.projection_dim, epochs=args.epochs, position_term=args.position_term, seed=args.seed
        )
        predictor = train_predictor(training, settings, progress=args.progress)
        del training
    heldout_sample = collect_attention(
        model, tokenizer, heldout_sources, heldout_targets, kinds, description="Collecting (held out)", **collect
    )
    points = {kind: sweep_points(predictor, kind, methods, args.window) for kind in kinds}
    points = {kind: kind_points for kind, kind_points in points.items() if kind_points}
    own, scores = evaluate_points(heldout_sample, predictor, points, progress=args.progress)
    results = {
        kind: AttentionTypeResult(
            own[kind], scores[kind], choose_points(scores[kind], args.target_recall, args.target_mass)
        )
        for kind in points
    }

    predictor_path = output / PREDICTOR_FILE
    translation = None
    if args.bleu:
        translation = translation_scores(
            model, tokenizer, heldout_sources, heldout_targets, translation_runs(results), predictor,
            num_beams=args.num_beams, progress=args.progress,
        )  # fmt: skip
    report = write_report(
        output,
        results,
        settings={
            "methods": methods,
            "attention_types": list(points),
            "window": args.window,
            "target_recall": args.target_recall,
            "target_mass": args.target_mass,
            **(predictor.metadata if predictor else {"projection_dim": None}),
        },
        sample={
            "description": " / ".join(Path(file).name for file in (args.source_file, args.target_file)),
            "training_sentences": len(train_sources),
            "heldout_sentences": len(heldout_sources),
        },
        head_sparsity=args.head_sparsity,
        translation=translation,
        model=str(folder),
        predictor=str(folder / PREDICTOR_FILE if args.save_to_model else predictor_path),
        position_weights=None if predictor is None else predictor.position_weights(),
    )
    if predictor is not None:  # after the report: its folder check accepts a folder holding an earlier report only
        predictor.metadata["operating_points"] = {
            kind: {method: score.point.spec() for method, score in result.chosen.items()}
            for kind, result in results.items()
        }
        predictor.save(predictor_path)
        if args.save_to_model:
            shutil.copyfile(predictor_path, folder / PREDICTOR_FILE)
    for kind, result in results.items():
        chosen = ", ".join(
            f"{score.point.spec()} (sparsity {score.mean_sparsity:.0%}, recall {score.mean_recall:.1%}, "
            f"mass kept {score.mean_mass:.1%})"
            for score in result.chosen.values()
        )
        print(f"{ATTENTION_TITLES[kind]}: model's own sparsity {result.own.mean_sparsity:.0%}; chosen: {chosen}")
    if translation is not None:
        best = max(translation["points"], key=lambda point: point["delta_bleu"], default=None)
        summary = f"full model BLEU {translation['full']['bleu']:.2f}"
        if best is not None:
            summary += f"; best restricted {' '.join(best['sparsefinder'])}: BLEU {best['bleu']:.2f}"
        print(summary)
    print(f"Report, figures and the predictor: {report}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = CommandParser(prog="hf-entmax sparsefinder", description=__doc__)
    add_parser_arguments(parser)
    return run(parser.parse_args(sys.argv[1:] if argv is None else argv))
