"""How well a predicted graph covers the true α-entmax graph: sparsity, recall and cost, per head, over a sample.

Definitions (shared with `hf-entmax analyze`, whose density is `hf_entmax.analysis.statistics.attention_density`):

- a query's *allowed* keys are those it may attend to (real tokens; in decoder self-attention not the future);
- *sparsity* of a graph: mean over real queries of the fraction of its allowed keys the graph leaves out, i.e.
  1 − the graph's density; the model's own sparsity is 1 − its attention density (the true graph's);
- *recall*: mean over real queries of the fraction of its true non-zero keys (p > 0) that the graph keeps;
- *mass kept*: mean over real queries of the fraction of its attention probability on the keys the graph keeps
  (recall weighs a key of p = 0.001 like one of p = 0.9; the mass says how much of the attention is lost);
- *cost*: how many query–key pairs the graph computes (pooled over the sample, all layers and heads), also as a
  fraction of the allowed pairs full attention computes.

The graph judged is the one restricted attention computes (`effective_graph`: a query with none of its keys
predicted keeps its full row), so the numbers are those of inference.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ..analysis.statistics import attention_density
from ..modeling.sparsefinder_attention import (
    METHODS,
    SELF_ATTENTION_TYPES,
    OperatingPoint,
    SparsefinderPredictor,
    effective_graph,
    predicted_graph,
)
from .collect import AttentionBatch, AttentionSample


# The knob values swept by default (the distance thresholds come from the training distances, see `train`).
BUCKETS = (2, 3, 4, 6, 8, 12, 16, 24, 32)
NEAREST_KEYS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
WINDOW_SIZES = (0, 1, 2, 3, 4, 6, 8, 12, 16)


def graph_recall(
    graph: torch.Tensor, support: torch.Tensor, allowed: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fraction of each query's true non-zero keys that the graph keeps.

    Args:
        graph: ``(B, H, Q, K)`` bool, the pairs computed.
        support: ``(B, H, Q, K)`` bool, the pairs with p > 0.
        allowed: ``(B, Q, K)`` bool.

    Returns:
        ``(recall, counted)``: ``(B, H, Q)`` in [0, 1] and the ``(B, Q)`` mask of real queries (the others, padding,
        have no support and count as recall 1).
    """
    support = support & allowed[:, None]
    kept = (graph & support).sum(-1)  # (B, H, Q)
    total = support.sum(-1)  # (B, H, Q)
    recall = torch.where(total > 0, kept / total.clamp(min=1), torch.ones_like(kept, dtype=torch.float))
    return recall, allowed.any(-1)


def graph_mass(graph: torch.Tensor, probabilities: torch.Tensor) -> torch.Tensor:
    """Fraction of each query's attention probability on the keys the graph keeps.

    Args:
        graph: ``(B, H, Q, K)`` bool, the pairs computed.
        probabilities: ``(B, H, Q, K)`` ≥ 0, 0 outside the allowed pairs (rows sum to 1, or 0 for padding).

    Returns:
        ``(B, H, Q)`` in [0, 1]; 1 for a row without probability (padding).
    """
    total = probabilities.sum(-1)
    kept = (probabilities * graph).sum(-1)
    return torch.where(total > 0, kept / total.clamp(min=torch.finfo(total.dtype).tiny), torch.ones_like(total))


class _HeadTotals:
    """Per-head running sums over batches: density, recall and mass kept per query, real queries, pairs computed."""

    def __init__(self, heads: int) -> None:
        self.density = torch.zeros(heads, dtype=torch.float64)
        self.recall = torch.zeros(heads, dtype=torch.float64)
        self.mass = torch.zeros(heads, dtype=torch.float64)
        self.queries = torch.zeros((), dtype=torch.float64)
        self.fallbacks = torch.zeros((), dtype=torch.float64)
        self.pairs = 0

    def add(self, graph: torch.Tensor, batch: AttentionBatch, predicted: torch.Tensor | None = None) -> None:
        """``graph``: ``(B, H, Q, K)`` bool, already within the allowed pairs; ``predicted``: the prediction it came
        from, to count the real queries that fell back to their full row."""
        density, counted = attention_density(graph, batch.allowed)  # (B, H, Q), (B, Q)
        recall, _ = graph_recall(graph, batch.support, batch.allowed)
        weights = counted[:, None].double()  # (B, 1, Q)
        self.density += (density.double() * weights).sum((0, 2))
        self.recall += (recall.double() * weights).sum((0, 2))
        self.mass += (graph_mass(graph, batch.probabilities).double() * weights).sum((0, 2))
        self.queries += counted.sum()
        self.pairs += int(graph.sum())
        if predicted is not None:
            empty = ~(predicted & batch.allowed[:, None]).any(-1)  # (B, H or 1, Q)
            self.fallbacks += (empty & counted[:, None]).expand(graph.shape[:-1]).sum()


@dataclass
class GraphScores:
    """How one graph (an operating point, or the model's own support) does on one attention type.

    Attributes:
        point: The operating point; None for the model's own (true) graph.
        sparsity: ``(layers, heads)`` mean over queries of the fraction of allowed keys left out.
        recall: ``(layers, heads)`` mean over queries of the fraction of true non-zero keys kept.
        mass: ``(layers, heads)`` mean over queries of the fraction of attention probability on the keys kept.
        pairs: Query–key pairs computed, summed over the sample, layers and heads.
        allowed_pairs: Pairs full attention computes on the same sample.
        fallback: Share of (query, head) rows with none of their keys predicted, which attend over the full row.
    """

    point: OperatingPoint | None
    sparsity: torch.Tensor
    recall: torch.Tensor
    mass: torch.Tensor
    pairs: int
    allowed_pairs: int
    fallback: float = 0.0

    @property
    def mean_sparsity(self) -> float:
        return float(self.sparsity.mean())

    @property
    def mean_recall(self) -> float:
        return float(self.recall.mean())

    @property
    def mean_mass(self) -> float:
        return float(self.mass.mean())

    @property
    def cost(self) -> float:
        """Pairs computed as a fraction of full attention's."""
        return self.pairs / max(self.allowed_pairs, 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "point": None if self.point is None else self.point.spec(),
            "method": None if self.point is None else self.point.method,
            "sparsity": round(self.mean_sparsity, 4),
            "recall": round(self.mean_recall, 4),
            "mass": round(self.mean_mass, 4),
            "pairs": self.pairs,
            "allowed_pairs": self.allowed_pairs,
            "cost": round(self.cost, 4),
            "fallback": round(self.fallback, 4),
            "per_head": {
                "sparsity": [[round(value, 4) for value in row] for row in self.sparsity.tolist()],
                "recall": [[round(value, 4) for value in row] for row in self.recall.tolist()],
                "mass": [[round(value, 4) for value in row] for row in self.mass.tolist()],
            },
        }


def sweep_points(
    predictor: SparsefinderPredictor | None, kind: str, methods: Sequence[str], window: int | None = None
) -> list[OperatingPoint]:
    """The operating points swept for one attention type: each method over its knob's default values.

    Distance thresholds are the predictor's (``metadata["thresholds"]``), clusters those it has centroids for;
    ``window`` is added to the projection methods in self-attention. Windows do not exist in cross-attention: the
    window method is left out there.
    """
    window = window if kind in SELF_ATTENTION_TYPES else None
    knobs: dict[str, Sequence] = {
        "distance": predictor.metadata["thresholds"][kind] if predictor else (),
        "nearest": NEAREST_KEYS if predictor else (),
        "quantization": BUCKETS,
        "clustering": sorted(predictor.layers[kind][0].centroids) if predictor else (),
        "window": WINDOW_SIZES if kind in SELF_ATTENTION_TYPES else (),
    }
    return [
        OperatingPoint(method, knob, None if method == "window" else window)
        for method in METHODS
        if method in methods
        for knob in knobs[method]
    ]


def evaluate_points(
    sample: AttentionSample,
    predictor: SparsefinderPredictor | None,
    points: dict[str, list[OperatingPoint]],
    *,
    progress: bool = True,
) -> tuple[dict[str, GraphScores], dict[str, list[GraphScores]]]:
    """Score the model's own graph and every operating point on ``sample``.

    Args:
        sample: Held-out attention (`collect_attention`).
        predictor: The learned projections (None if only windows are scored).
        points: ``{attention_type: [operating points]}``.
        progress: Show a progress bar.

    Returns:
        ``(own, scores)``: the model's own graph per attention type, and the scores of each point in order.
    """
    own, scores = {}, {}
    total = sum(len(sample.layers[kind]) for kind in points)
    with tqdm(total=total, desc="Scoring graphs", unit="layer", disable=not progress) as bar:
        for kind, kind_points in points.items():
            layer_batches = sample.layers[kind]
            own_totals, point_totals, allowed_pairs = [], [], 0
            for layer, batches in enumerate(layer_batches):
                heads = batches[0].query.shape[1]
                own_totals.append(_HeadTotals(heads))
                point_totals.append([_HeadTotals(heads) for _ in kind_points])
                projections = predictor.layers[kind][layer] if predictor and kind in predictor.layers else None
                for batch in batches:
                    own_totals[-1].add(batch.support, batch)
                    allowed = batch.allowed[:, None]  # (B, 1, Q, K)
                    allowed_pairs += int(allowed.sum()) * heads
                    for totals, point in zip(point_totals[-1], kind_points, strict=True):
                        predicted = predicted_graph(
                            point, projections, batch.query, batch.key, kind in SELF_ATTENTION_TYPES, allowed=allowed
                        )
                        totals.add(effective_graph(predicted, allowed), batch, predicted)
                bar.update(1)
            own[kind] = _scores(None, own_totals, allowed_pairs)
            scores[kind] = [
                _scores(point, [layer[index] for layer in point_totals], allowed_pairs)
                for index, point in enumerate(kind_points)
            ]
    return own, scores


def _scores(point: OperatingPoint | None, totals: list[_HeadTotals], allowed_pairs: int) -> GraphScores:
    return GraphScores(
        point=point,
        sparsity=torch.stack([1 - layer.density / layer.queries for layer in totals]).float(),
        recall=torch.stack([layer.recall / layer.queries for layer in totals]).float(),
        mass=torch.stack([layer.mass / layer.queries for layer in totals]).float(),
        pairs=sum(layer.pairs for layer in totals),
        allowed_pairs=allowed_pairs,
        fallback=float(
            sum(layer.fallbacks for layer in totals) / sum(layer.queries * len(layer.density) for layer in totals)
        ),
    )


def choose_points(scores: list[GraphScores], target_recall: float, target_mass: float = 0.0) -> dict[str, GraphScores]:
    """Per method, the sparsest point whose mean recall reaches ``target_recall`` and whose mean mass kept reaches
    ``target_mass``; where none reaches both, the one of highest mass kept (with a mass target) or recall.

    Raises:
        ValueError: For a target outside [0, 1].
    """
    for name, target in (("target_recall", target_recall), ("target_mass", target_mass)):
        if not 0.0 <= target <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {target}")
    chosen = {}
    for method in METHODS:
        candidates = [score for score in scores if score.point.method == method]
        if not candidates:
            continue
        reaching = [
            score for score in candidates if score.mean_recall >= target_recall and score.mean_mass >= target_mass
        ]
        if reaching:
            chosen[method] = max(reaching, key=lambda score: (score.mean_sparsity, score.mean_recall))
        elif target_mass > 0:
            chosen[method] = max(candidates, key=lambda score: (score.mean_mass, score.mean_sparsity))
        else:
            chosen[method] = max(candidates, key=lambda score: (score.mean_recall, score.mean_sparsity))
    return chosen


def head_recall_at(scores: list[GraphScores], method: str, sparsity: float) -> torch.Tensor:
    """``(layers, heads)`` each head's recall at ``sparsity``, interpolated along the method's points (sorted by the
    head's sparsity); beyond the sparsest or densest point, that point's recall."""
    points = [score for score in scores if score.point.method == method]
    sparsities = torch.stack([score.sparsity for score in points], -1).double()  # (layers, heads, P)
    recalls = torch.stack([score.recall for score in points], -1).double()
    order = sparsities.argsort(-1)
    sparsities, recalls = sparsities.gather(-1, order), recalls.gather(-1, order)
    result = [
        np.interp(sparsity, head_sparsities, head_recalls)
        for head_sparsities, head_recalls in zip(sparsities.flatten(0, 1), recalls.flatten(0, 1), strict=True)
    ]
    return torch.tensor(result, dtype=torch.float32).view(sparsities.shape[:-1])


__all__ = [
    "BUCKETS",
    "NEAREST_KEYS",
    "WINDOW_SIZES",
    "GraphScores",
    "choose_points",
    "evaluate_points",
    "graph_mass",
    "graph_recall",
    "head_recall_at",
    "sweep_points",
]
