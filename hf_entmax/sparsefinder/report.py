"""Sparsefinder's report: ``report.json`` (every number), ``report.md`` (tables, chosen operating points, how to
translate with them) and the figures, written into one folder."""

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..analysis.report import REPORT_JSON, REPORT_MD, check_report_folder
from ..modeling.configuration_adaptive_entmax_marian import ATTENTION_TITLES
from ..modeling.sparsefinder_attention import METHODS
from . import plots
from .evaluate import GraphScores, head_recall_at


WRITTEN_BY = "hf-entmax sparsefinder"
# report.json keys that tell an earlier Sparsefinder report (whose folder may be written again).
REPORT_KEYS = ("sparsefinder", "attention")
DEFINITIONS = {
    "allowed pairs": "the (query, key) pairs full attention computes: real tokens, and in decoder self-attention no "
    "key after the query.",
    "sparsity": "mean over real queries (and over the heads) of the share of the query's allowed keys that the graph "
    "leaves out: 1 − the graph's density, as `hf-entmax analyze` defines density. The model's own sparsity is that of "
    "its true α-entmax graph (the pairs with p > 0).",
    "recall": "mean over real queries (and over the heads) of the share of the query's true non-zero pairs (p > 0) "
    "that the graph keeps.",
    "mass kept": "mean over real queries (and over the heads) of the share of the query's attention probability on "
    "the pairs the graph keeps: recall counts a key of p = 0.001 like one of p = 0.9, the mass says how much of the "
    "attention restricted attention loses.",
    "cost": "query–key pairs the graph computes, summed over the held-out sentences, layers and heads, as a share of "
    "the allowed pairs (the cost of full attention).",
    "fallback": "share of (query, head) rows whose predicted set holds none of their allowed keys: restricted "
    "attention gives them their full row (exact attention), and the numbers above count it.",
    "random baseline": "a random graph of sparsity s keeps a share 1 − s of any query's support in expectation: "
    "the line recall = 1 − sparsity.",
}


@dataclass
class AttentionTypeResult:
    """Everything measured on one attention type.

    Attributes:
        own: The model's own graph on the held-out sentences.
        scores: Every operating point swept.
        chosen: Per method, the sparsest point reaching the target recall (or the best recall).
    """

    own: GraphScores
    scores: list[GraphScores]
    chosen: dict[str, GraphScores] = field(default_factory=dict)


def write_report(
    output_dir: str | os.PathLike,
    results: dict[str, AttentionTypeResult],
    *,
    settings: dict[str, Any],
    sample: dict[str, Any],
    head_sparsity: float,
    translation: dict[str, Any] | None,
    model: str,
    predictor: str,
    position_weights: dict[str, list[list[float]]] | None = None,
) -> Path:
    """Write the figures, ``report.json`` and ``report.md`` into ``output_dir`` (created if needed).

    Args:
        results: Per attention type, what was measured.
        settings: How the predictor was trained and the points chosen (recorded as given).
        sample: Where the sentences came from and how many trained and judged the predictor.
        head_sparsity: The sparsity at which each head's recall is read for the per-head figure.
        translation: BLEU/chrF of the full model and each operating point (``{"full": …, "points": [...]}``), or
            None when not measured.
        model: The model folder, as given.
        predictor: Where the predictor was saved.
        position_weights: Per attention type, the learned position term of each layer's heads (``[[c_h per head]
            per layer]``), where the predictor has one.

    Returns:
        The path of ``report.md``.
    """
    output_dir = Path(output_dir)
    check_report_folder(output_dir, WRITTEN_BY, REPORT_KEYS)
    output_dir.mkdir(parents=True, exist_ok=True)
    figures = {}
    for kind, result in results.items():
        file = f"pareto_{kind}.png"
        plots.plot_pareto(kind, result.own, result.scores, result.chosen, output_dir / file)
        figures[f"pareto_{kind}"] = file
    head_recall = {
        kind: {
            method: head_recall_at(result.scores, method, head_sparsity).numpy()
            for method in METHODS
            if any(score.point.method == method for score in result.scores)
        }
        for kind, result in results.items()
    }
    plots.plot_head_recall(head_recall, head_sparsity, output_dir / "head_recall.png")
    figures["head_recall"] = "head_recall.png"

    report = {
        "sparsefinder": "Treviso et al. (2022), Predicting Attention Sparsity in Transformers",
        "model": model,
        "sample": sample,
        "settings": settings,
        "definitions": DEFINITIONS,
        "predictor": predictor,
        "attention": {
            kind: {
                "model_sparsity": round(result.own.mean_sparsity, 4),
                "model_sparsity_per_head": [[round(v, 4) for v in row] for row in result.own.sparsity.tolist()],
                "chosen": {method: score.point.spec() for method, score in result.chosen.items()},
                "position_weight_per_head": (position_weights or {}).get(kind),
                "points": [score.to_dict() for score in result.scores],
                "head_recall_at_sparsity": {
                    "sparsity": head_sparsity,
                    **{
                        method: [[round(float(v), 4) for v in row] for row in values]
                        for method, values in head_recall[kind].items()
                    },
                },
            }
            for kind, result in results.items()
        },
        "translation": translation,
        "figures": figures,
    }
    (output_dir / REPORT_JSON).write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (output_dir / REPORT_MD).write_text(render_markdown(report, results), encoding="utf-8")
    return output_dir / REPORT_MD


def render_markdown(report: dict[str, Any], results: dict[str, AttentionTypeResult]) -> str:
    """``report.md``: what was measured, the definitions, a Pareto table per attention type, the translations."""
    settings, sample = report["settings"], report["sample"]
    head_sparsity = next(iter(report["attention"].values()))["head_recall_at_sparsity"]["sparsity"]
    lines = [
        f"# Sparsefinder: {report['model']}",
        "",
        f"Predicting each head's α-entmax graph ({report['sparsefinder']}). Projections of dimension "
        f"{settings['projection_dim']} trained on {sample['training_sentences']} sentence pairs, judged on "
        f"{sample['heldout_sentences']} held-out pairs ({sample['description']}), teacher-forced on the references. "
        f"Chosen point: {chosen_rule(settings)}.",
        "",
        "## Definitions",
        "",
        *[f"- **{name}**: {text}" for name, text in report["definitions"].items()],
    ]
    for kind, result in results.items():
        title = ATTENTION_TITLES[kind]
        lines += [
            "",
            f"## {title}",
            "",
            f"The model's own sparsity: {result.own.mean_sparsity:.1%} (the true graph; recall 1).",
            "",
            *_position_lines(report["attention"][kind]["position_weight_per_head"]),
            f"![{title}]({report['figures'][f'pareto_{kind}']})",
            "",
            "| operating point | sparsity | recall | mass kept | cost | fallback | chosen |",
            "| --- | ---: | ---: | ---: | ---: | ---: | :---: |",
        ]
        chosen = {score.point for score in result.chosen.values()}
        for score in result.scores:
            mark = "✓" if score.point in chosen else ""
            lines.append(
                f"| `{score.point.spec()}` | {score.mean_sparsity:.1%} | {score.mean_recall:.1%} | "
                f"{score.mean_mass:.1%} | {score.cost:.1%} | {score.fallback:.1%} | {mark} |"
            )
    lines += [
        "",
        f"## Per head, at sparsity {head_sparsity:.0%}",
        "",
        "Each head's recall, interpolated along each method's points.",
        "",
        f"![per-head recall]({report['figures']['head_recall']})",
    ]
    translation = report["translation"]
    lines += ["", "## Translation", ""]
    if translation is None:
        lines.append("Not measured (run with `--bleu` to translate the held-out sentences at each chosen point).")
    else:
        full = translation["full"]
        lines += [
            f"{translation['sentences']} held-out sentences, beam {translation['num_beams']}; BLEU and chrF against "
            f"the references (full model: BLEU {full['bleu']:.2f}, chrF {full['chrf']:.2f}).",
            "",
            "| restricted attention | BLEU | Δ BLEU | chrF | Δ chrF |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for point in translation["points"]:
            settings_text = " ".join(f"`{item}`" for item in point["sparsefinder"])
            lines.append(
                f"| {settings_text} | {point['bleu']:.2f} | {point['delta_bleu']:+.2f} | {point['chrf']:.2f} | "
                f"{point['delta_chrf']:+.2f} |"
            )
    lines += [
        "",
        "## Translate with an operating point",
        "",
        f"The projections are in `{report['predictor']}` (with `--save_to_model`, in the model folder too, where "
        "`set_predicted_sparsity` and `hf-entmax translate` find them without `--sparsefinder_predictor`):",
        "",
        "```",
        f"hf-entmax translate --model {report['model']} --input SOURCE.txt --sparsefinder "
        + " ".join(_example_settings(report))
        + f" --sparsefinder_predictor {report['predictor']}",
        "```",
        "",
        "or in Python: `model.set_predicted_sparsity({...}, predictor=...)` with the same specs "
        "(`model.set_predicted_sparsity(None)` turns it off).",
        "",
    ]
    return "\n".join(lines)


def chosen_rule(settings: dict[str, Any]) -> str:
    """How the chosen points were chosen, in words, from the report's settings."""
    recall, mass = settings["target_recall"], settings.get("target_mass", 0.0)
    targets = [f"mean recall ≥ {recall}"] * (recall > 0) + [f"mean mass kept ≥ {mass}"] * (mass > 0)
    if not targets:
        return "per method, the sparsest point"
    fallback = "mass kept" if mass > 0 else "recall"
    return (
        f"per method, the sparsest with {' and '.join(targets)} (where none reaches it, the one of highest {fallback})"
    )


def _position_lines(weights: list[list[float]] | None) -> list[str]:
    """The learned position term per head (a weight near 0: the head's graph does not depend on distance), or
    nothing without one."""
    if weights is None:
        return []
    layers = "; ".join(
        f"layer {layer}: " + ", ".join(f"{weight:.2f}" for weight in heads) for layer, heads in enumerate(weights)
    )
    return [f"The distance method's position term, the weight of |i − j| per head: {layers}.", ""]


def _example_settings(report: dict[str, Any]) -> list[str]:
    """``TYPE=SPEC`` of the distance method's chosen point per attention type (else the first chosen method's)."""
    items = []
    for kind, attention in report["attention"].items():
        chosen = attention["chosen"]
        spec = chosen.get("distance") or next(iter(chosen.values()), None)
        if spec:
            items.append(f"{kind}={spec}")
    return items


__all__ = ["DEFINITIONS", "AttentionTypeResult", "render_markdown", "write_report"]
