"""The report of an analysis: figures, ``report.json`` (every number) and ``report.md`` (tables and findings).

Findings are plain sentences derived from the numbers with the thresholds below, e.g. "2 of 4 encoder
self-attention heads in layer 0 attend to the previous token: head 1 with 96% of its mass (α 1.93, near sparsemax)".
Attention types that scale their queries (ASEntmax) add their β, γ and the factor δ + β·log(n + 1)^γ to the tables,
the findings and a figure; a report without such types reads exactly as one of a model without the option.
`model_card_section` turns a written report into the model card's analysis section.
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
from .collect import AttentionTypeStatistics, ModelAnalysis, QueryScaling


REPORT_JSON, REPORT_MD = "report.json", "report.md"
# A head with α above this is called near sparsemax (sparsemax is 2), below NEAR_SOFTMAX_ALPHA nearly dense (softmax
# is 1). α alone does not say how many weights are zero: with softmax-matched queries a head of α 1.9 can keep 80% of
# its keys. What a head does is its density: at most LOW_DENSITY means most of its keys get exact zeros.
NEAR_SPARSEMAX_ALPHA = 1.8
NEAR_SOFTMAX_ALPHA = 1.1
LOW_DENSITY = 0.5
# A head is positional / subword-merging when at least this much of its attention goes to the previous or next
# token / to the other pieces of the query's word, on average over queries.
ROLE_MASS = 0.5
# A head "sends most of its attention to one token" when one token type gets at least this share of it.
TOKEN_FOCUS_SHARE = 0.5
# Agreement between the α of a report and of the model whose card shows it.
CARD_ALPHA_TOLERANCE = 1e-4
# ASEntmax's factor is also reported for inputs this many times longer than the longest analysed one.
LONG_INPUT_MULTIPLE = 8

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
        "ASEntmax: the factor δ + β·log(n + 1)^γ on each head's queries against the number of keys n a query may "
        f"attend to; the band is the range of n in the analysed sentences, the dotted line {LONG_INPUT_MULTIPLE}× "
        "its longest.",
    ),
}
# The figures a model card shows, in this order.
CARD_FIGURES = ("alpha_heatmap", "density_heatmap", "js_divergence", "alpha_trajectories", "query_scales")
# (statistic, what one head does, what several heads do)
ROLES = (
    ("previous_token_mass", "attends to the previous token", "attend to the previous token"),
    ("next_token_mass", "attends to the next token", "attend to the next token"),
    (
        "same_word_mass",
        "merges subwords, attending to the other pieces of the query's word",
        "merge subwords, attending to the other pieces of the query's word",
    ),
)
# Below this change over training, α counts as unchanged (a fixed α is logged too).
UNCHANGED_ALPHA = 0.005


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


DEFINITIONS = {
    "alpha": "α of the head's α-entmax (1 = softmax, 2 = sparsemax); 1 for every head of a softmax model.",
    "density": "mean over queries of the fraction of the keys a query may attend to (not padding, not future "
    "tokens) that get a non-zero weight; exact zeros count as zeros.",
    "js_divergence": "mean over queries of the mean Jensen–Shannon divergence between the layer's pairs of heads, "
    "in bits (base 2, so in [0, 1]; 0 for identical heads).",
    "previous_token_mass": "mean probability a query puts on the token just before it (self-attention only).",
    "next_token_mass": "mean probability a query puts on the token just after it (self-attention only; never "
    "defined in decoder self-attention, which cannot see the future).",
    "same_word_mass": "mean probability a query puts on the other subword pieces of its own word, over queries "
    "whose word has several pieces (self-attention only; a piece starting with ▁ begins a word).",
    "top_tokens": "the token types that receive the largest share of the head's attention, summed over queries.",
}
SCALING_DEFINITIONS = {
    "scaling": "ASEntmax (attention types with attention_scaling 'asentmax' only): before α-entmax, head h "
    "multiplies a query that may attend to n keys (real source tokens; the causal prefix in decoder "
    "self-attention) by δ + β_h · log(n + 1)^γ_h, with β_h and γ_h learned and the offset δ fixed. The factor "
    "is monotonic in n: it grows with n (the head sharpens, attending to fewer keys, on longer inputs) where "
    "β·γ > 0 and shrinks (the head softens) where β·γ < 0; at 1 the scores are those of an unscaled head. "
    f"Reported at the numbers of keys the queries of the analysed sentences saw, and at {LONG_INPUT_MULTIPLE}× "
    "the largest of them.",
}


def mean_sparsity(analysis: ModelAnalysis) -> dict[str, float]:
    """Share of exact zeros per attention type: 1 − the mean density (see `DEFINITIONS`), so that a model card and
    an analysis report of the same model and sentences print the same number.

    Averaged over queries within each head, then over heads and layers, as the density is.
    """
    return {kind: 1.0 - statistics.density.nanmean().item() for kind, statistics in analysis.attention.items()}


def summarize(analysis: ModelAnalysis) -> dict[str, dict[str, Any]]:
    """Headline numbers per attention type: α range and mean, mean density and JS divergence, role counts."""
    summary = {}
    for kind, statistics in analysis.attention.items():
        alpha = statistics.alpha
        summary[kind] = {
            "mean_alpha": round(alpha.mean().item(), 4),
            "min_alpha": round(alpha.min().item(), 4),
            "max_alpha": round(alpha.max().item(), 4),
            "mean_density": round(statistics.density.nanmean().item(), 4),
            "mean_js_divergence": round(statistics.js_divergence.mean().item(), 4),
            "heads": alpha.numel(),
            "near_sparsemax_heads": int((alpha > NEAR_SPARSEMAX_ALPHA).sum()),
            "low_density_heads": int((statistics.density <= LOW_DENSITY).sum()),
            "positional_heads": len(_role_heads(statistics, "previous_token_mass", "next_token_mass")),
            "subword_heads": len(_role_heads(statistics, "same_word_mass")),
        }
        if statistics.scaling is not None:
            summary[kind]["scaling"] = _scaling_summary(statistics.scaling)
    return summary


def _scaling_summary(scaling: QueryScaling) -> dict[str, Any]:
    """ASEntmax's β, γ and factor of one attention type, in numbers: see ``SCALING_DEFINITIONS``."""
    trend = scaling.beta * scaling.gamma  # (layers, heads): the sign of d factor / d n
    fewest, most = scaling.key_counts
    long_keys = LONG_INPUT_MULTIPLE * most
    # The factor is monotonic in n, so over the sample's n it spans the values at the fewest and the most keys.
    sample_factors, long_factors = scaling.factor([fewest, most]), scaling.factor(long_keys)  # (layers, heads, 2|1)
    return {
        "offset": scaling.offset,
        "mean_beta": round(scaling.beta.mean().item(), 4),
        "mean_gamma": round(scaling.gamma.mean().item(), 4),
        "sharpening_heads": int((trend > 0).sum()),
        "softening_heads": int((trend < 0).sum()),
        "key_counts": [fewest, most],
        "factor_range": [round(sample_factors.min().item(), 4), round(sample_factors.max().item(), 4)],
        "long_keys": long_keys,
        "long_factor_range": [round(long_factors.min().item(), 4), round(long_factors.max().item(), 4)],
    }


def findings(analysis: ModelAnalysis) -> list[str]:
    """Plain sentences about one model's heads, from its numbers and the module's thresholds."""
    sentences = []
    matched = [
        ATTENTION_TITLES[kind]
        for kind, statistics in analysis.attention.items()
        if statistics.scaling_method == "softmax_matched"
    ]
    if matched:
        titles = _join([matched[0], *(title.lower() for title in matched[1:])])
        sentences.append(
            f"{titles} {_verb(matched, 'scales its', 'scale their')} queries by n^(1 − α) for n keys "
            "(softmax_matched): near uniform attention every head is as sharp as softmax whatever its α, so α shapes "
            "how weights fall to zero and the density, not α, says how sparse a head is."
        )
    for kind, statistics in analysis.attention.items():
        title, noun = ATTENTION_TITLES[kind], ATTENTION_TITLES[kind].lower()
        alpha, density = statistics.alpha, statistics.density
        if bool((alpha == 1).all()):
            sentences.append(
                f"{title}: softmax (α = 1 in every head); {_percent(density.nanmean())} of the weights a query may "
                "use are non-zero."
            )
        else:
            sentences.append(
                f"{title}: α from {alpha.min():.2f} to {alpha.max():.2f} (mean {alpha.mean():.2f}); a query gives "
                f"a non-zero weight to {_percent(density.nanmean())} of the tokens it may attend to, on average "
                "(softmax: 100%)."
            )
        if statistics.scaling is not None:
            sentences += _scaling_findings(title, statistics.scaling)
        num_layers, num_heads = alpha.shape
        for layer in range(num_layers):
            where = f"{noun} heads in layer {layer}"
            near_sparsemax = [head for head in range(num_heads) if alpha[layer, head] > NEAR_SPARSEMAX_ALPHA]
            if near_sparsemax:
                listed = _join(
                    f"{head} (α {alpha[layer, head]:.2f}, density {_percent(density[layer, head])})"
                    for head in near_sparsemax
                )
                sentences.append(
                    f"{_count(near_sparsemax, num_heads)} {where} {_verb(near_sparsemax, 'is', 'are')} near "
                    f"sparsemax (α > {NEAR_SPARSEMAX_ALPHA}): {_heads(near_sparsemax)} {listed}."
                )
            low_density = [head for head in range(num_heads) if density[layer, head] <= LOW_DENSITY]
            if low_density:
                listed = _join(
                    f"{head} (density {_percent(density[layer, head])}, α {alpha[layer, head]:.2f})"
                    for head in low_density
                )
                sentences.append(
                    f"{_count(low_density, num_heads)} {where} {_verb(low_density, 'gives', 'give')} exact zeros to "
                    f"most keys (density ≤ {_percent(LOW_DENSITY)}): {_heads(low_density)} {listed}."
                )
            dense = [head for head in range(num_heads) if 1 < alpha[layer, head] < NEAR_SOFTMAX_ALPHA]
            if dense:
                listed = _join(f"{head} (α {alpha[layer, head]:.2f})" for head in dense)
                sentences.append(
                    f"{_count(dense, num_heads)} {where} {_verb(dense, 'is', 'are')} nearly dense "
                    f"(α < {NEAR_SOFTMAX_ALPHA}): "
                    f"{_heads(dense)} {listed}."
                )
            for statistic, *verbs in ROLES:
                values = getattr(statistics, statistic)
                if values is None:
                    continue
                heads = [head for head in range(num_heads) if values[layer, head] >= ROLE_MASS]
                if heads:
                    listed = _join(
                        f"head {head} with {_percent(values[layer, head])} of its mass "
                        f"({_alpha_note(alpha[layer, head])})"
                        for head in heads
                    )
                    sentences.append(f"{_count(heads, num_heads)} {where} {_verb(heads, *verbs)}: {listed}.")
            focused = [
                (head, *statistics.top_tokens[layer][head][0])
                for head in range(num_heads)
                if statistics.top_tokens[layer][head] and statistics.top_tokens[layer][head][0][1] >= TOKEN_FOCUS_SHARE
            ]
            if focused:
                listed = _join(f"head {head} to {_code(token)} ({_percent(share)})" for head, token, share in focused)
                sends = _verb(focused, "sends most of its", "send most of their")
                sentences.append(f"{_count(focused, num_heads)} {where} {sends} attention to one token: {listed}.")
        divergence = statistics.js_divergence
        if num_layers > 1:
            high, low = int(divergence.argmax()), int(divergence.argmin())
            sentences.append(
                f"{title}: head diversity (JS divergence between heads) is highest in layer {high} "
                f"({divergence[high]:.2f} bits) and lowest in layer {low} ({divergence[low]:.2f} bits)."
            )
        else:
            sentences.append(f"{title}: head diversity (JS divergence between heads) is {divergence[0]:.2f} bits.")
    sentences += _trajectory_findings(analysis)
    return sentences


def comparison_findings(models: list[dict[str, Any]]) -> list[str]:
    """Sentences that compare the models of a report (``report.json``'s ``models`` entries) per attention type."""
    sentences = []
    for kind in ATTENTION_TYPES:
        summaries = [(model["name"], model["summary"][kind]) for model in models]
        title = ATTENTION_TITLES[kind]
        sentences.append(
            f"{title}, density: "
            + ", ".join(f"{name} {_percent(summary['mean_density'])}" for name, summary in summaries)
            + "; head diversity (JS): "
            + ", ".join(f"{name} {summary['mean_js_divergence']:.2f}" for name, summary in summaries)
            + " bits; positional heads: "
            + ", ".join(f"{name} {summary['positional_heads']}" for name, summary in summaries)
            + "."
        )
    return sentences


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
        lines += [f"## Findings: {model['name']}", "", *[f"- {sentence}" for sentence in model["findings"]], ""]
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
        f"{_percent(thresholds['low_density'])}; "
        f"positional / subword-merging head: at least {_percent(thresholds['role_mass'])} of its mass on the "
        f"previous or next token / the other pieces of the word; focused on one token: at least "
        f"{_percent(thresholds['token_focus_share'])} of its attention to one token type.",
        "",
    ]
    for analysis in analyses:
        # A softmax Marian model has no α to learn, and a model object has no folder to look in.
        if not analysis.alpha_history and analysis.model_type != "marian" and analysis.source:
            lines += [f"`{analysis.source}` has no `{ALPHA_HISTORY_FILE}`, so α over training is not shown.", ""]
    return "\n".join(lines)


def summary_table(models: list[dict[str, Any]]) -> str:
    """Markdown table of ``report.json``'s per-model ``summary``: a row per model and attention type."""
    lines = [
        f"| model | attention | mean α (range) | density | JS divergence (bits) | heads α > {NEAR_SPARSEMAX_ALPHA} "
        f"| heads density ≤ {_percent(LOW_DENSITY)} | positional heads | subword heads |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for model in models:
        for kind in ATTENTION_TYPES:
            summary = model["summary"][kind]
            lines.append(
                f"| {model['name']} | {ATTENTION_TITLES[kind]} | {summary['mean_alpha']:.2f} "
                f"({summary['min_alpha']:.2f}–{summary['max_alpha']:.2f}) | {_percent(summary['mean_density'])} "
                f"| {summary['mean_js_divergence']:.3f} | {summary['near_sparsemax_heads']}/{summary['heads']} "
                f"| {summary['low_density_heads']}/{summary['heads']} "
                f"| {summary['positional_heads']} | {summary['subword_heads']} |"
            )
    return "\n".join(lines)


def head_table(statistics: AttentionTypeStatistics) -> str:
    """Markdown table of one attention type: a row per head with α, density, role masses and top tokens, and
    ASEntmax's β, γ and factor at the most keys of the sample and `LONG_INPUT_MULTIPLE` times that, when scaled."""
    roles = [(name, label) for name, label in (("previous_token_mass", "previous"), ("next_token_mass", "next"),
             ("same_word_mass", "same word")) if getattr(statistics, name) is not None]  # fmt: skip
    scaling = statistics.scaling
    scaling_header, factors = [], None
    if scaling is not None:
        key_counts = [scaling.key_counts[1], LONG_INPUT_MULTIPLE * scaling.key_counts[1]]
        scaling_header = ["β", "γ", *(f"factor at n = {num_keys}" for num_keys in key_counts)]
        factors = scaling.factor(key_counts)  # (layers, heads, 2)
    header = ["layer", "head", "α", *scaling_header, "density", *(label for _, label in roles), "most attended tokens"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    num_layers, num_heads = statistics.alpha.shape
    for layer in range(num_layers):
        for head in range(num_heads):
            cells = [str(layer), str(head), f"{statistics.alpha[layer, head]:.3f}"]
            if scaling is not None:
                cells += [f"{scaling.beta[layer, head]:.3f}", f"{scaling.gamma[layer, head]:.3f}"]
                cells += [f"{factor:.3f}" for factor in factors[layer, head].tolist()]
            cells.append(_percent(statistics.density[layer, head]))
            cells += [_percent(getattr(statistics, name)[layer, head]) for name, _ in roles]
            cells.append(
                ", ".join(f"{_code(token)} {_percent(share)}" for token, share in statistics.top_tokens[layer][head])
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
        "(softmax: 100%); head diversity is the mean Jensen–Shannon divergence between a layer's heads (bits).",
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
    """Whether a report's ``"scaling"`` entries hold the β, γ and δ of ``get_attention_scales()``."""
    if set(reported) != set(scales):
        return False
    for kind, expected in scales.items():
        for name in ("beta", "gamma"):
            values = np.array(reported[kind][name], dtype=float)
            if values.shape != tuple(expected[name].shape) or not np.allclose(
                values, expected[name].numpy(), atol=CARD_ALPHA_TOLERANCE, rtol=0
            ):
                return False
        if not np.isclose(reported[kind]["offset"], expected["offset"], atol=CARD_ALPHA_TOLERANCE, rtol=0):
            return False
    return True


def _trajectory_findings(analysis: ModelAnalysis) -> list[str]:
    if not analysis.alpha_history:
        return []
    first, last = analysis.alpha_history[0], analysis.alpha_history[-1]
    steps = f"steps {first['step']:,}–{last['step']:,}"
    kinds = [kind for kind in ATTENTION_TYPES if kind in first and kind in last]
    changes = {kind: np.array(last[kind]) - np.array(first[kind]) for kind in kinds}  # (layers, heads) each
    if not kinds or max(np.abs(change).max() for change in changes.values()) < UNCHANGED_ALPHA:
        return [f"α did not change over training ({steps})."]
    means = ", ".join(
        f"{np.mean(first[kind]):.2f} → {np.mean(last[kind]):.2f} in {ATTENTION_TITLES[kind].lower()}" for kind in kinds
    )
    kind = max(kinds, key=lambda kind: np.abs(changes[kind]).max())
    layer, head = np.unravel_index(np.abs(changes[kind]).argmax(), changes[kind].shape)
    return [
        f"Over training ({steps}), mean α went {means}; α moved most in {ATTENTION_TITLES[kind].lower()} layer "
        f"{layer} head {head}: {first[kind][layer][head]:.2f} → {last[kind][layer][head]:.2f}."
    ]


def _scaling_findings(title: str, scaling: QueryScaling) -> list[str]:
    """How one attention type's heads scale their queries with the number of keys (``SCALING_DEFINITIONS``)."""
    numbers = _scaling_summary(scaling)
    beta, gamma = scaling.beta, scaling.gamma
    num_heads = beta.numel()
    constant = num_heads - numbers["sharpening_heads"] - numbers["softening_heads"]
    fewest, most = numbers["key_counts"]
    long_keys = numbers["long_keys"]
    keys = f"{fewest} key" if fewest == most == 1 else f"{fewest}–{most} keys" if fewest < most else f"{most} keys"
    sentences = [
        f"{title} scales its queries by {scaling.offset:g} + β·log(n + 1)^γ (ASEntmax): "
        f"{numbers['sharpening_heads']} of {num_heads} heads sharpen as inputs grow (β·γ > 0), "
        f"{numbers['softening_heads']} soften (β·γ < 0)"
        + (f", {constant} keep a constant factor" if constant else "")
        + f"; β from {beta.min():.2f} to {beta.max():.2f}, γ from {gamma.min():.2f} to {gamma.max():.2f}. "
        f"The factor spans {_range(numbers['factor_range'])} at the {keys} a query may attend to in these sentences "
        f"and {_range(numbers['long_factor_range'])} at {long_keys} keys ({LONG_INPUT_MULTIPLE}× the longest)."
    ]
    at_most, at_long = scaling.factor([most, long_keys]).unbind(-1)  # (layers, heads) each
    layer, head = np.unravel_index((at_long - at_most).abs().argmax().item(), at_most.shape)
    if at_long[layer, head] != at_most[layer, head]:
        sentences.append(
            f"{title}: the factor changes most in layer {layer} head {head} (β {beta[layer, head]:.2f}, "
            f"γ {gamma[layer, head]:.2f}): {at_most[layer, head]:.2f} at {most} keys → {at_long[layer, head]:.2f} at "
            f"{long_keys}."
        )
    return sentences


def _has_scaling(analysis: ModelAnalysis) -> bool:
    return any(statistics.scaling is not None for statistics in analysis.attention.values())


def _range(bounds: list[float]) -> str:
    return f"{bounds[0]:.2f}–{bounds[1]:.2f}"


def _role_heads(statistics: AttentionTypeStatistics, *names: str) -> list[tuple[int, int]]:
    """``(layer, head)`` of the heads with at least `ROLE_MASS` in any of the named statistics."""
    masks = [getattr(statistics, name) >= ROLE_MASS for name in names if getattr(statistics, name) is not None]
    if not masks:
        return []
    return [tuple(index) for index in torch.stack(masks).any(0).nonzero().tolist()]


def _percent(value: float | torch.Tensor | None) -> str:
    value = float(value) if value is not None else float("nan")
    return "–" if value != value else f"{100 * value:.0f}%"


def _alpha_note(alpha: torch.Tensor) -> str:
    return f"α {alpha:.2f}" + (", near sparsemax" if alpha > NEAR_SPARSEMAX_ALPHA else "")


def _count(items: list, total: int) -> str:
    return f"{len(items)} of {total}"


def _verb(items: list, singular: str, plural: str) -> str:
    return singular if len(items) == 1 else plural


def _heads(items: list) -> str:
    return "head" if len(items) == 1 else "heads"


def _join(parts) -> str:
    parts = list(parts)
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _code(token: str) -> str:
    """A token as inline code that survives a markdown table cell."""
    return "`" + token.replace("`", "'").replace("|", "\\|") + "`"


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "model"


__all__ = [
    "LOW_DENSITY",
    "NEAR_SOFTMAX_ALPHA",
    "NEAR_SPARSEMAX_ALPHA",
    "ROLE_MASS",
    "TOKEN_FOCUS_SHARE",
    "check_report_folder",
    "comparison_findings",
    "findings",
    "model_card_section",
    "summarize",
    "write_report",
]
