"""Figures of an analysis, one PNG each; several models are drawn side by side in the same figure.

Figures are drawn with matplotlib's object-oriented API on its Agg canvas (no pyplot, no window, no change to
the caller's backend), so they work on a headless machine and inside notebooks alike.
"""

import os
from pathlib import Path

import numpy as np
import torch
from matplotlib import colormaps
from matplotlib.figure import Figure

from ..modeling.configuration_adaptive_entmax_marian import ATTENTION_TITLES, ATTENTION_TYPES
from .collect import AttentionExample, ModelAnalysis


# α of a learned head lives in [1, 2]; histogram bins of 0.05.
ALPHA_BINS = np.linspace(1.0, 2.0, 21)
DPI = 120
# ASEntmax's factor is drawn from one key to this many (or to the report's long length, if that is longer).
FACTOR_CURVE_MAX_KEYS = 4096


def plot_alpha_histograms(analyses: list[ModelAnalysis], path: str | os.PathLike) -> Path:
    """One panel per attention type: how many heads have each α, the models' bars side by side."""
    figure = Figure(figsize=(4.2 * len(ATTENTION_TYPES), 3.4), layout="constrained")
    axes = figure.subplots(1, len(ATTENTION_TYPES), sharey=True)
    for axis, kind in zip(axes, ATTENTION_TYPES, strict=True):
        values = [analysis.attention[kind].alpha.flatten().numpy() for analysis in analyses]
        axis.hist(values, bins=ALPHA_BINS, label=[analysis.name for analysis in analyses], color=_colors(analyses))
        axis.set(title=ATTENTION_TITLES[kind], xlabel="α", xlim=(1.0, 2.0))
    axes[0].set_ylabel("heads")
    axes[-1].legend(fontsize="small")
    return _save(figure, path)


def plot_heatmaps(analyses: list[ModelAnalysis], statistic: str, path: str | os.PathLike) -> Path:
    """A layer × head heat map per model (rows) and attention type (columns) of ``"alpha"`` or ``"density"``."""
    limits, label, color_map, text = {
        "alpha": ((1.0, 2.0), "α", "viridis", "{:.2f}"),
        "density": ((0.0, 1.0), "density (fraction of non-zero weights)", "magma", "{:.0%}"),
    }[statistic]
    figure = Figure(figsize=(3.6 * len(ATTENTION_TYPES), 0.4 + 2.4 * len(analyses)), layout="constrained")
    axes = figure.subplots(len(analyses), len(ATTENTION_TYPES), squeeze=False)
    for row, analysis in enumerate(analyses):
        for column, kind in enumerate(ATTENTION_TYPES):
            axis, values = axes[row, column], getattr(analysis.attention[kind], statistic).numpy()  # (layers, heads)
            image = axis.imshow(values, vmin=limits[0], vmax=limits[1], cmap=color_map, aspect="auto")
            axis.set(title=f"{analysis.name}: {ATTENTION_TITLES[kind]}", xlabel="head", ylabel="layer")
            axis.set_xticks(range(values.shape[1]))
            axis.set_yticks(range(values.shape[0]))
            axis.title.set_fontsize("small")
            if values.size <= 64:  # larger grids are read by colour
                for (layer, head), value in np.ndenumerate(values):
                    # Light text on the dark half of the colour map, dark text on the light half.
                    dark = (value - limits[0]) / (limits[1] - limits[0]) < 0.6
                    axis.text(head, layer, text.format(value), ha="center", va="center", fontsize=7,
                              color="white" if dark else "black")  # fmt: skip
    figure.colorbar(image, ax=axes, label=label, shrink=0.8)
    return _save(figure, path)


def plot_js_divergence(analyses: list[ModelAnalysis], path: str | os.PathLike) -> Path:
    """One panel per attention type: the mean Jensen–Shannon divergence between heads, per layer, per model."""
    figure = Figure(figsize=(4.2 * len(ATTENTION_TYPES), 3.4), layout="constrained")
    axes = figure.subplots(1, len(ATTENTION_TYPES), sharey=True)
    for axis, kind in zip(axes, ATTENTION_TYPES, strict=True):
        for analysis, color in zip(analyses, _colors(analyses), strict=True):
            values = analysis.attention[kind].js_divergence.numpy()  # (layers,)
            axis.plot(range(len(values)), values, marker="o", color=color, label=analysis.name)
        axis.set(title=ATTENTION_TITLES[kind], xlabel="layer", ylim=(0, None))
        axis.set_xticks(range(len(analyses[0].attention[kind].js_divergence)))
    axes[0].set_ylabel("mean JS divergence between heads (bits)")
    axes[-1].legend(fontsize="small")
    return _save(figure, path)


def plot_alpha_trajectories(analyses: list[ModelAnalysis], path: str | os.PathLike) -> Path | None:
    """α of every head over training steps (one line per head, coloured by layer), for the models with a history.

    Returns:
        The figure's path, or None when no model has an α history.
    """
    with_history = [analysis for analysis in analyses if analysis.alpha_history]
    if not with_history:
        return None
    figure = Figure(figsize=(4.2 * len(ATTENTION_TYPES), 0.4 + 3.0 * len(with_history)), layout="constrained")
    axes = figure.subplots(len(with_history), len(ATTENTION_TYPES), squeeze=False, sharey=True)
    layer_colors = colormaps["tab10"].colors
    for row, analysis in enumerate(with_history):
        for column, kind in enumerate(ATTENTION_TYPES):
            axis = axes[row, column]
            axis.set(title=f"{analysis.name}: {ATTENTION_TITLES[kind]}", xlabel="training step", ylim=(1.0, 2.0))
            axis.title.set_fontsize("small")
            # A fixed α is not logged: that attention type has no trajectory.
            history = [record for record in analysis.alpha_history if kind in record]
            if not history:
                axis.text(0.5, 0.5, "α fixed (not logged)", transform=axis.transAxes, ha="center")
                continue
            steps = [record["step"] for record in history]
            alphas = np.array([record[kind] for record in history])  # (steps, layers, heads)
            for layer, head in np.ndindex(alphas.shape[1:]):
                axis.plot(steps, alphas[:, layer, head], color=layer_colors[layer % len(layer_colors)], linewidth=1,
                          label=f"layer {layer}" if head == 0 else None)  # fmt: skip
            axis.legend(fontsize="x-small")
        axes[row, 0].set_ylabel("α")
    return _save(figure, path)


def plot_query_scales(analyses: list[ModelAnalysis], path: str | os.PathLike, length_multiple: int) -> Path | None:
    """ASEntmax's factor on the queries, ``δ + β·log(n + 1)^γ``, against the number of keys n (log scale), one line
    per head coloured by layer: a panel per model with scaling (rows) and attention type (columns). The band shows
    the numbers of keys the queries of the analysed sentences saw; the dotted line, ``length_multiple`` times the
    most of them (inputs that much longer).

    Returns:
        The figure's path, or None when no model scales its queries.
    """
    with_scaling = [analysis for analysis in analyses if any(s.scaling for s in analysis.attention.values())]
    if not with_scaling:
        return None
    kinds = [kind for kind in ATTENTION_TYPES if any(analysis.attention[kind].scaling for analysis in with_scaling)]
    longest = max(
        analysis.attention[kind].scaling.key_counts[1]
        for analysis in with_scaling
        for kind in kinds
        if analysis.attention[kind].scaling
    )
    num_keys = np.unique(np.geomspace(1, max(FACTOR_CURVE_MAX_KEYS, length_multiple * longest), 200).round())  # (N,)
    figure = Figure(figsize=(4.2 * len(kinds), 0.4 + 3.0 * len(with_scaling)), layout="constrained")
    axes = figure.subplots(len(with_scaling), len(kinds), squeeze=False)
    layer_colors = colormaps["tab10"].colors
    for row, analysis in enumerate(with_scaling):
        for column, kind in enumerate(kinds):
            axis, scaling = axes[row, column], analysis.attention[kind].scaling
            axis.set(title=f"{analysis.name}: {ATTENTION_TITLES[kind]}", xlabel="keys a query may attend to (n)",
                     xscale="log")  # fmt: skip
            axis.title.set_fontsize("small")
            if scaling is None:
                axis.text(0.5, 0.5, "queries not scaled", transform=axis.transAxes, ha="center")
                axis.set_axis_off()  # no curve to read off: no empty scales either
                continue
            factors = scaling.factor(torch.from_numpy(num_keys)).numpy()  # (layers, heads, N)
            for layer, head in np.ndindex(factors.shape[:2]):
                axis.plot(num_keys, factors[layer, head], color=layer_colors[layer % len(layer_colors)], linewidth=1,
                          label=f"layer {layer}" if head == 0 else None)  # fmt: skip
            axis.axvspan(*scaling.key_counts, color="grey", alpha=0.2, label="analysed sentences")
            long_keys = length_multiple * scaling.key_counts[1]
            axis.axvline(long_keys, color="grey", linestyle=":", label=f"{length_multiple}× longer ({long_keys})")
            axis.axhline(1.0, color="black", linewidth=0.5)  # a factor of 1 leaves the query as it is
            axis.legend(fontsize="x-small")
        axes[row, 0].set_ylabel("factor on the query")
    return _save(figure, path)


def plot_attention_maps(
    example: AttentionExample, kind: str, alphas: np.ndarray, title: str, path: str | os.PathLike
) -> Path:
    """Every head's attention on one sentence pair: a grid of layers (rows) × heads (columns).

    Queries are rows and keys columns, with their tokens on the axes; exact zeros are left blank (white), so a
    sparse head's support is visible at a glance.

    Args:
        example: The sentence pair and its attention.
        kind: The attention type to draw.
        alphas: ``(layers, heads)`` α of the heads, shown in the panel titles.
        title: The figure's title.
    """
    attention = example.attentions[kind].numpy()  # (layers, heads, Q, K)
    num_layers, num_heads, num_queries, num_keys = attention.shape
    query_tokens, key_tokens = example.axis_tokens(kind)
    cell = min(0.16, 5.0 / max(num_queries, num_keys))  # inches per token, so long sentences stay printable
    figure = Figure(
        figsize=(num_heads * (num_keys * cell + 0.6) + 1.5, num_layers * (num_queries * cell + 0.6) + 1.2),
        layout="constrained",
    )
    axes = figure.subplots(num_layers, num_heads, squeeze=False)
    color_map = colormaps["viridis"].with_extremes(bad="white")
    for layer in range(num_layers):
        for head in range(num_heads):
            axis = axes[layer, head]
            weights = np.ma.masked_equal(attention[layer, head], 0.0)  # exact zeros: blank
            image = axis.imshow(weights, vmin=0.0, vmax=1.0, cmap=color_map, interpolation="nearest")
            axis.set_title(f"layer {layer} head {head}, α {alphas[layer, head]:.2f}", fontsize=7)
            # Tokens along the outer edges only: inner panels share them, and every tick costs drawing time.
            if layer == num_layers - 1:
                axis.set_xticks(range(num_keys), key_tokens, rotation=90, fontsize=6)
            else:
                axis.set_xticks([])
            if head == 0:
                axis.set_yticks(range(num_queries), query_tokens, fontsize=6)
            else:
                axis.set_yticks([])
    figure.suptitle(title, fontsize="small")
    figure.colorbar(image, ax=axes, label="attention weight (blank: exactly 0)", shrink=0.6)
    return _save(figure, path)


def _colors(analyses: list[ModelAnalysis]) -> list:
    palette = colormaps["tab10"].colors
    return [palette[index % len(palette)] for index in range(len(analyses))]


def _save(figure: Figure, path: str | os.PathLike) -> Path:
    path = Path(path)
    figure.savefig(path, dpi=DPI)
    return path


__all__ = [
    "plot_alpha_histograms",
    "plot_alpha_trajectories",
    "plot_attention_maps",
    "plot_heatmaps",
    "plot_js_divergence",
    "plot_query_scales",
]
