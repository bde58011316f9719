"""The report of an analysis, in files: figures, ``report.json`` (every number) and ``report.md`` (tables and
findings), and the model card's analysis section made from a written report (`model_card_section`).

What the report says (the headline numbers, the findings and the thresholds they use) comes from `findings`; this
module lays it out and writes it.
"""

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..common.records import ALPHA_HISTORY_FILE
from ..errors import HfEntmaxFileNotFoundError, HfEntmaxValueError
from ..modeling.configuration_adaptive_entmax_marian import ATTENTION_TITLES, ATTENTION_TYPES
from . import plots
from .collect import AttentionTypeStatistics, ModelAnalysis
from .findings import (
    DEFINITIONS,
    LONG_INPUT_MULTIPLE,
    LOW_DENSITY,
    NEAR_SOFTMAX_ALPHA,
    NEAR_SPARSEMAX_ALPHA,
    ROLE_MASS,
    SCALING_DEFINITIONS,
    TOKEN_FOCUS_SHARE,
    comparison_findings,
    findings,
    inline_code,
    percent,
    summarize,
)


REPORT_JSON, REPORT_MD = "report.json", "report.md"
# Agreement between the α of a report and of the model whose card shows it.
CARD_ALPHA_TOLERANCE = 1e-4

FIGURES = {
    "alpha_histogram": ("alpha_histogram.png", "How many heads have each α, per attention type."),
    "alpha_heatmap": ("alpha_heatmap.png", "α of every head (layer × head)."),
    "density_heatmap": (
        "density_heatmap.png",
        "Attention density of every head: the mean fraction of the tokens a query may attend to that get a "
        "non-zero weight (1 = dense, as softmax).",
    ),
    "js_divergence": ("js_divergence.png", "Head diversity: mean Jensen–Shannon divergence between heads, per layer."),
    "alpha_trajectories": ("alpha_trajectories.png", "α of every head over training steps."),
    "query_scales": (
        "query_scales.png",
        "Learned query scaling: the factor δ + β·log(n + 1)^γ (SSMax: s·log(n + 1)) on each head's queries against "
        "the number of keys n a query may "
        f"attend to; the band is the range of n in the analysed sentences, the dotted line {LONG_INPUT_MULTIPLE}× "
        "its longest.",
    ),
}
# The figures a model card shows, in this order.
CARD_FIGURES = ("alpha_heatmap", "density_heatmap", "js_divergence", "alpha_trajectories", "query_scales")


def write_report(
    analyses: list[ModelAnalysis], output_dir: str | os.PathLike, *, sample_description: str | None = None
) -> Path:
    """Write the figures, ``report.json`` and ``report.md`` of one model, or several compared, into ``output_dir``.

    Args:
        analyses: What `analyze_model` returned, one per model; the first is the one the report is about.
        output_dir: The folder to write (created if needed).
        sample_description: Where the sentences came from, for the report's first lines.

    Returns:
        The path of ``report.md``.

    Raises:
        HfEntmaxValueError: If ``output_dir`` is refused by `check_report_folder`.
    """
    names = [analysis.name for analysis in analyses]
    if not analyses or len(set(names)) != len(names):
        raise HfEntmaxValueError(f"expected one or more models with distinct names, got {names}")
    output_dir = Path(output_dir)
    check_report_folder(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)

    figures = {
        "alpha_histogram": plots.plot_alpha_histograms(analyses, output_dir / FIGURES["alpha_histogram"][0]),
        "alpha_heatmap": plots.plot_heatmaps(analyses, "alpha", output_dir / FIGURES["alpha_heatmap"][0]),
        "density_heatmap": plots.plot_heatmaps(analyses, "density", output_dir / FIGURES["density_heatmap"][0]),
        "js_divergence": plots.plot_js_divergence(analyses, output_dir / FIGURES["js_divergence"][0]),
        "alpha_trajectories": plots.plot_alpha_trajectories(analyses, output_dir / FIGURES["alpha_trajectories"][0]),
        "query_scales": plots.plot_query_scales(
            analyses, output_dir / FIGURES["query_scales"][0], LONG_INPUT_MULTIPLE
        ),
    }
    attention_maps = []
    for analysis in analyses:
        for index, example in enumerate(analysis.examples):
            for kind in ATTENTION_TYPES:
                file = f"attention_{_slug(analysis.name)}_{index}_{kind}.png"
                title = f"{analysis.name}: {ATTENTION_TITLES[kind]}, sentence {index}"
                alphas = analysis.attention[kind].alpha.numpy()
                plots.plot_attention_maps(example, kind, alphas, title, output_dir / file)
                attention_maps.append({"model": analysis.name, "sentence": index, "attention": kind, "file": file})

    models = [
        {**analysis.to_dict(), "summary": summarize(analysis), "findings": findings(analysis)} for analysis in analyses
    ]
    report = {
        "sample": sample_description,
        # The scaling's definition only where a model scales its queries: other reports read as before.
        "definitions": DEFINITIONS | (SCALING_DEFINITIONS if any(map(_has_scaling, analyses)) else {}),
        "thresholds": {
            "near_sparsemax_alpha": NEAR_SPARSEMAX_ALPHA,
            "low_density": LOW_DENSITY,
            "near_softmax_alpha": NEAR_SOFTMAX_ALPHA,
            "role_mass": ROLE_MASS,
            "token_focus_share": TOKEN_FOCUS_SHARE,
        },
        "models": models,
        "comparison": comparison_findings(models) if len(models) > 1 else [],
        "figures": {name: path.name for name, path in figures.items() if path is not None},
        "attention_maps": attention_maps,
    }
    (output_dir / REPORT_JSON).write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (output_dir / REPORT_MD).write_text(render_markdown(report, analyses), encoding="utf-8")
    return output_dir / REPORT_MD


def check_report_folder(
    output_dir: Path, written_by: str = "hf-entmax analyze", required_keys: tuple[str, ...] = ("models", "figures")
) -> None:
    """Refuse to write a report where it would replace files it did not write: ``output_dir`` must be new, empty,
    or an earlier report's folder (it has a ``report.json`` with the ``required_keys`` that ``written_by`` writes).

    Raises:
        HfEntmaxValueError: naming ``--output`` and the folder.
    """
    if output_dir.exists() and not output_dir.is_dir():
        raise HfEntmaxValueError(f"--output {output_dir} is a file; give a folder for the figures and the report")
    if not output_dir.is_dir() or not any(output_dir.iterdir()):
        return
    try:
        earlier = json.loads((output_dir / REPORT_JSON).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        earlier = None
    if not (isinstance(earlier, dict) and all(key in earlier for key in required_keys)):
        raise HfEntmaxValueError(
            f"--output {output_dir} holds files that are not from an earlier `{written_by}` (its report.md and "
            "figures would replace files of the same names): give a new or empty folder"
        )


def render_markdown(report: dict[str, Any], analyses: list[ModelAnalysis]) -> str:
    """``report.md``: summary, findings, figures, per-head tables and attention maps of a `write_report` report."""
    first = analyses[0]
    names = ", ".join(f"**{analysis.name}**" for analysis in analyses)
    lines = [f"# Attention heads of {names}", ""]
    sample = f" from {report['sample']}" if report["sample"] else ""
    inputs = (
        "the reference translations" if first.decoder_inputs == "references" else "each model's greedy translations"
    )
    lines += [
        f"{first.num_sentences} sentences{sample}; the decoder reads {inputs} (teacher forcing). "
        "Definitions and thresholds are at the end.",
        "",
        "## Summary",
        "",
        summary_table(report["models"]),
        "",
    ]
    if report["comparison"]:
        lines += ["## Comparison", "", *[f"- {sentence}" for sentence in report["comparison"]], ""]
    for model in report["models"]:
        # Where the heads get positions from shapes what they can do with them (a positional head under NAPE may be
        # an ALiBi head): said before the findings. The model card says it in its own introduction.
        sentences = ([f"Positions: {model['positions']}."] if model.get("positions") else []) + model["findings"]
        lines += [f"## Findings: {model['name']}", "", *[f"- {sentence}" for sentence in sentences], ""]
    lines += ["## Figures", ""]
    for name, file in report["figures"].items():
        lines += [f"![{FIGURES[name][1]}]({file})", "", f"*{FIGURES[name][1]}*", ""]
    for analysis in analyses:
        lines += [f"## Per head: {analysis.name}", ""]
        for kind, statistics in analysis.attention.items():
            lines += [f"### {ATTENTION_TITLES[kind]}", "", head_table(statistics), ""]
    if report["attention_maps"]:
        lines += ["## Attention maps", "", "Rows are queries, columns keys; blank cells are exact zeros.", ""]
        for analysis in analyses:
            for index, example in enumerate(analysis.examples):
                lines += [f"### {analysis.name}, sentence {index}", "", f"Source: `{' '.join(example.source_tokens)}`"]
                lines += ["", f"Decoder input: `{' '.join(example.target_tokens)}`", ""]
                for entry in report["attention_maps"]:
                    if entry["model"] == analysis.name and entry["sentence"] == index:
                        lines += [f"![{ATTENTION_TITLES[entry['attention']]}]({entry['file']})", ""]
    lines += ["## Definitions", ""]
    lines += [f"- `{name}`: {text}" for name, text in report["definitions"].items()]
    thresholds = report["thresholds"]
    lines += [
        f"- Near sparsemax: α > {thresholds['near_sparsemax_alpha']}; nearly dense: α < "
        f"{thresholds['near_softmax_alpha']}; exact zeros to most keys: density ≤ "
        f"{percent(thresholds['low_density'])}; "
        f"positional / subword-merging head: at least {percent(thresholds['role_mass'])} of its mass on the "
        f"previous or next token / the other pieces of the word; focused on one token: at least "
        f"{percent(thresholds['token_focus_share'])} of its attention to one token type.",
        "",
    ]
    for analysis in analyses:
        # A softmax Marian model has no α to learn, and a model object has no folder to look in.
        if not analysis.alpha_history and analysis.model_type != "marian" and analysis.source:
            lines += [f"`{analysis.source}` has no `{ALPHA_HISTORY_FILE}`, so α over training is not shown.", ""]
    return "\n".join(lines)


def summary_table(models: list[dict[str, Any]]) -> str:
    """Markdown table of ``report.json``'s per-model ``summary``: a row per model and attention type (a report written
    before the largest weight was measured shows "–" for it)."""
    lines = [
        f"| model | attention | mean α (range) | density | largest weight | JS divergence (bits) "
        f"| heads α > {NEAR_SPARSEMAX_ALPHA} | heads density ≤ {percent(LOW_DENSITY)} | positional heads "
        "| subword heads |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for model in models:
        for kind in ATTENTION_TYPES:
            summary = model["summary"][kind]
            lines.append(
                f"| {model['name']} | {ATTENTION_TITLES[kind]} | {summary['mean_alpha']:.2f} "
                f"({summary['min_alpha']:.2f}–{summary['max_alpha']:.2f}) | {percent(summary['mean_density'])} "
                f"| {_two_decimals(summary.get('mean_largest_weight'))} | {summary['mean_js_divergence']:.3f} "
                f"| {summary['near_sparsemax_heads']}/{summary['heads']} "
                f"| {summary['low_density_heads']}/{summary['heads']} "
                f"| {summary['positional_heads']} | {summary['subword_heads']} |"
            )
    return "\n".join(lines)


def _two_decimals(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def head_table(statistics: AttentionTypeStatistics) -> str:
    """Markdown table of one attention type: a row per head with α, density, largest weight, role masses and top
    tokens, and ASEntmax's β, γ and factor at the most keys of the sample and `LONG_INPUT_MULTIPLE` times that, when
    scaled."""
    roles = [(name, label) for name, label in (("previous_token_mass", "previous"), ("next_token_mass", "next"),
             ("same_word_mass", "same word")) if getattr(statistics, name) is not None]  # fmt: skip
    scaling = statistics.scaling
    scaling_header, factors = [], None
    if scaling is not None:
        key_counts = [scaling.key_counts[1], LONG_INPUT_MULTIPLE * scaling.key_counts[1]]
        scaling_header = ["β", "γ", *(f"factor at n = {num_keys}" for num_keys in key_counts)]
        factors = scaling.factor(key_counts)  # (layers, heads, 2)
    header = ["layer", "head", "α", *scaling_header, "density", "largest weight", *(label for _, label in roles)]
    header.append("most attended tokens")
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    num_layers, num_heads = statistics.alpha.shape
    for layer in range(num_layers):
        for head in range(num_heads):
            cells = [str(layer), str(head), f"{statistics.alpha[layer, head]:.3f}"]
            if scaling is not None:
                cells += [f"{scaling.beta[layer, head]:.3f}", f"{scaling.gamma[layer, head]:.3f}"]
                cells += [f"{factor:.3f}" for factor in factors[layer, head].tolist()]
            cells += [percent(statistics.density[layer, head]), f"{statistics.largest_weight[layer, head]:.2f}"]
            cells += [percent(getattr(statistics, name)[layer, head]) for name, _ in roles]
            cells.append(
                ", ".join(
                    f"{inline_code(token)} {percent(share)}" for token, share in statistics.top_tokens[layer][head]
                )
            )
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def model_card_section(
    report_dir: str | os.PathLike,
    alphas: dict[str, torch.Tensor],
    figures_folder: str = "analysis",
    attention_scales: dict[str, dict[str, torch.Tensor | float]] | None = None,
) -> tuple[str, dict[str, Path]]:
    """The model card's analysis section from an `hf-entmax analyze` output folder, and the figures it shows (with
    ASEntmax's factor against n when the model scales its queries).

    Args:
        report_dir: The folder `write_report` wrote.
        alphas: α of the model the card is for (``get_alphas()``): the report's first model must have these.
        figures_folder: Where the card expects the figures, relative to the card.
        attention_scales: ASEntmax's β, γ and δ of that model (``get_attention_scales()``), if it should be checked
            too: the report's first model must scale the same attention types with these.

    Returns:
        ``(markdown, files)``: ``files`` maps a path relative to the card to the figure to copy there.

    Raises:
        HfEntmaxFileNotFoundError: If the folder has no ``report.json``.
        HfEntmaxValueError: If the report is unreadable or its α (or β, γ, δ) are not those of the model.
    """
    report_dir = Path(report_dir)
    path = report_dir / REPORT_JSON
    if not path.is_file():
        raise HfEntmaxFileNotFoundError(
            f"--analysis {report_dir}: no {REPORT_JSON} there (write one with `hf-entmax analyze --output`)"
        )
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
        model = report["models"][0]
        reported = {kind: np.array(model["attention"][kind]["alpha"], dtype=float) for kind in ATTENTION_TYPES}
        reported_scales = {
            kind: model["attention"][kind]["scaling"]
            for kind in ATTENTION_TYPES
            if "scaling" in model["attention"][kind]
        }
        scales_agree = attention_scales is None or _same_scales(reported_scales, attention_scales)
        # Figures are named by text (where a name leads is checked by whoever copies the file: `folder_file`).
        figures = report.get("figures", {})
        if not isinstance(figures, dict) or not all(isinstance(file, str) for file in figures.values()):
            raise ValueError(f"its figures are not named by file names: {figures!r:.200}")
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, IndexError, TypeError, ValueError) as error:
        raise HfEntmaxValueError(
            f"--analysis {path}: not a report written by `hf-entmax analyze` ({error!r})"
        ) from None
    for kind in ATTENTION_TYPES:
        expected = alphas[kind].numpy()
        if reported[kind].shape != expected.shape or not np.allclose(
            reported[kind], expected, atol=CARD_ALPHA_TOLERANCE, rtol=0
        ):
            raise HfEntmaxValueError(
                f"--analysis {report_dir}: the report's model {model['name']!r} has other {kind} α than this model; "
                "analyse this model with `hf-entmax analyze`"
            )
    if not scales_agree:
        raise HfEntmaxValueError(
            f"--analysis {report_dir}: the report's model {model['name']!r} scales its queries otherwise than this "
            f"model (ASEntmax β, γ, δ of {sorted(reported_scales)} in the report, of {sorted(attention_scales)} in "
            "the model); analyse this model with `hf-entmax analyze`"
        )

    lines = [
        f"Measured with `hf-entmax analyze` on {model['num_sentences']} sentences"
        + (f" from {report['sample']}" if report.get("sample") else "")
        + ". Density is the mean fraction of the tokens a query may attend to that get a non-zero weight "
        "(softmax: 100%); the largest weight is the mean over queries of the largest weight a query gives (1: all "
        "on one key); head diversity is the mean Jensen–Shannon divergence between a layer's heads (bits).",
        "",
        summary_table(report["models"]),
        "",
        *[f"- {sentence}" for sentence in model["findings"]],
    ]
    files = {}
    for name in CARD_FIGURES:
        file = figures.get(name)
        if file and (report_dir / file).is_file():
            files[f"{figures_folder}/{file}"] = report_dir / file
            lines += ["", f"![{FIGURES[name][1]}]({figures_folder}/{file})"]
    return "\n".join(lines), files


def _same_scales(reported: dict[str, dict], scales: dict[str, dict[str, torch.Tensor | float]]) -> bool:
    """Whether a report's ``"scaling"`` entries hold the per-head parameters of ``get_attention_scales()`` (per-token
    scaling has none: the report's β and γ of it are measured means, not parameters)."""
    per_head = {kind: entry for kind, entry in reported.items() if entry.get("method") != "asentmax_per_token"}
    if set(per_head) != set(scales):
        return False
    for kind, expected in scales.items():
        for name in ("beta", "gamma"):
            values = np.array(per_head[kind][name], dtype=float)
            if values.shape != tuple(expected[name].shape) or not np.allclose(
                values, expected[name].numpy(), atol=CARD_ALPHA_TOLERANCE, rtol=0
            ):
                return False
        if not np.isclose(per_head[kind]["offset"], expected["offset"], atol=CARD_ALPHA_TOLERANCE, rtol=0):
            return False
    return True


def _has_scaling(analysis: ModelAnalysis) -> bool:
    return any(statistics.scaling is not None for statistics in analysis.attention.values())


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "model"


__all__ = [
    "REPORT_JSON",
    "REPORT_MD",
    "check_report_folder",
    "head_table",
    "model_card_section",
    "render_markdown",
    "summary_table",
    "write_report",
]
