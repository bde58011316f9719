"""Sparsefinder's figures, in the analysis' style (matplotlib's object-oriented API on the Agg canvas, no pyplot)."""

import os
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from ..analysis.plots import DPI
from ..modeling.configuration_adaptive_entmax_marian import ATTENTION_TITLES
from ..modeling.sparsefinder_attention import METHODS
from .evaluate import GraphScores


def _method_colors() -> dict[str, tuple]:
    palette = colormaps["tab10"].colors
    return {method: palette[index] for index, method in enumerate(METHODS)}


def plot_pareto(
    kind: str, own: GraphScores, scores: list[GraphScores], chosen: dict[str, GraphScores], path: str | os.PathLike
) -> Path:
    """Recall against sparsity of every operating point of one attention type, a line per method, with the random
    baseline (a random graph of sparsity s keeps a share 1 − s of the support, in expectation) and the model's own
    sparsity (the true graph: recall 1). Chosen points are circled."""
    colors = _method_colors()
    figure = Figure(figsize=(5.6, 4.2), layout="constrained")
    axis = figure.subplots()
    for method in METHODS:
        points = sorted(
            (score for score in scores if score.point.method == method), key=lambda score: score.mean_sparsity
        )
        if not points:
            continue
        label = "window only" if method == "window" else method
        axis.plot(
            [score.mean_sparsity for score in points],
            [score.mean_recall for score in points],
            marker="o",
            markersize=3,
            color=colors[method],
            label=label,
        )
        if method in chosen:
            axis.scatter(
                [chosen[method].mean_sparsity], [chosen[method].mean_recall], s=90, facecolors="none",
                edgecolors=colors[method], linewidths=1.5,
            )  # fmt: skip
    axis.plot([0, 1], [1, 0], linestyle=":", color="grey", label="random (expected)")
    axis.axvline(own.mean_sparsity, linestyle="--", color="black", linewidth=1, label="model's own sparsity")
    axis.set(
        title=f"{ATTENTION_TITLES[kind]}: predicted graphs",
        xlabel="sparsity (share of allowed pairs left out)",
        ylabel="recall (share of non-zero pairs kept)",
        xlim=(0, 1),
        ylim=(0, 1.02),
    )
    axis.legend(fontsize="small", loc="lower left")
    figure.savefig(Path(path), dpi=DPI)
    return Path(path)


def plot_head_recall(head_recall: dict[str, dict[str, np.ndarray]], sparsity: float, path: str | os.PathLike) -> Path:
    """Heat maps of each head's recall at one sparsity: a row per method, a column per attention type.

    Args:
        head_recall: ``{attention_type: {method: (layers, heads) recall}}``.
        sparsity: The sparsity the recalls are read at.
    """
    kinds = list(head_recall)
    methods = [method for method in METHODS if any(method in by_method for by_method in head_recall.values())]
    figure = Figure(figsize=(3.4 * len(kinds), 0.4 + 2.2 * len(methods)), layout="constrained")
    axes = figure.subplots(len(methods), len(kinds), squeeze=False)
    image = None
    for row, method in enumerate(methods):
        for column, kind in enumerate(kinds):
            axis = axes[row, column]
            if method not in head_recall[kind]:
                axis.set_axis_off()
                continue
            values = head_recall[kind][method]  # (layers, heads)
            image = axis.imshow(values, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
            axis.set(title=f"{method}: {ATTENTION_TITLES[kind]}", xlabel="head", ylabel="layer")
            axis.title.set_fontsize("small")
            axis.set_xticks(range(values.shape[1]))
            axis.set_yticks(range(values.shape[0]))
            if values.size <= 64:  # larger grids are read by colour
                for (layer, head), value in np.ndenumerate(values):
                    axis.text(head, layer, f"{value:.2f}", ha="center", va="center", fontsize=7,
                              color="white" if value < 0.6 else "black")  # fmt: skip
    if image is not None:
        figure.colorbar(image, ax=axes, label=f"recall at sparsity {sparsity:.0%}", shrink=0.8)
    figure.savefig(Path(path), dpi=DPI)
    return Path(path)


__all__ = ["plot_head_recall", "plot_pareto"]
