"""Train Sparsefinder's per-head projections (Treviso et al., 2022, Section 3) on collected attention.

Per layer, the heads' query and key projections ``(H, D, r)`` are trained together with the contrastive hinge loss
``max(0, margin + ‖q′ − k′₊‖² − ‖q′ − k′₋‖²)``: for each query, a key in its true entmax support (k₊) should be closer
to it in the projected space than a key outside it (k₋), by a margin. Pairs are sampled, a few per query per step.
With the position term, the squared distance of query i and key j also counts ``position_h · |i − j|``, a weight per
head learned with the projections (kept ≥ 0: a head can only be told that far keys are less likely).
Then, on the projections of the training queries and keys, each dimension's quantiles (the quantization method's
buckets), the k-means centroids (the clustering method) and the distances of the support pairs (the distance
method's thresholds to sweep) are computed.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from ..modeling.sparsefinder_attention import (
    QUANTILE_STEPS,
    LayerProjections,
    SparsefinderPredictor,
)
from .collect import AttentionBatch, AttentionSample


# The distance thresholds swept: these quantiles of the training support pairs' projected distances. The low ones
# give graphs that leave out much of the support by count yet may keep most of the attention mass: the points a mass
# target (`--target_mass`) may choose.
THRESHOLD_QUANTILES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 1.0)
KMEANS_ITERATIONS = 25


@dataclass
class TrainingSettings:
    """How the projections are trained.

    Attributes:
        projection_dim: r, the dimension queries and keys are projected to.
        epochs: Passes over the training batches.
        learning_rate: Adam's step size.
        margin: The hinge's margin, in squared projected distance.
        pairs_per_query: (positive, negative) key pairs sampled per query and step.
        clusters: The numbers of k-means clusters to fit (the clustering method's knob values).
        position_term: Learn the distance method's position term (a weight per head on ``|i − j|``).
        position_learning_rate: Adam's step size for it. Adam moves a weight by about its step size a step, a layer
            gets a few dozen steps (epochs × batches), and a local head needs about the margin per token of distance:
            the projections' step size would leave it at a fraction of that.
        seed: Seed of the initialisation, the pair sampling and k-means.
    """

    projection_dim: int = 4
    epochs: int = 10
    learning_rate: float = 0.01
    margin: float = 1.0
    pairs_per_query: int = 8
    clusters: Sequence[int] = (2, 3, 4, 6, 8, 12, 16)
    position_term: bool = True
    position_learning_rate: float = 0.1
    seed: int = 0


def round_up(value: float, digits: int = 3) -> float:
    """``value`` > 0 rounded up to ``digits`` significant digits: a threshold that reads well in an operating point
    and still keeps every pair the exact value kept."""
    unit = 10.0 ** (math.floor(math.log10(value)) - digits + 1)
    return float(f"{math.ceil(value / unit - 1e-9) * unit:.{digits}g}")


def contrastive_hinge_loss(
    squared: torch.Tensor,
    support: torch.Tensor,
    allowed: torch.Tensor,
    *,
    margin: float,
    pairs_per_query: int,
    generator: torch.Generator,
) -> torch.Tensor:
    """Mean hinge ``max(0, margin + d(q, k₊) − d(q, k₋))`` over sampled (k₊ in the support, k₋ allowed but not).

    Args:
        squared: ``(B, H, Lq, Lk)`` d, the squared distances (`LayerProjections.squared_distances`).
        support: ``(B, H, Lq, Lk)`` bool.
        allowed: ``(B, Lq, Lk)`` bool.
        margin: The margin in squared distance.
        pairs_per_query: Pairs sampled (with replacement) per query that has both kinds of keys.
        generator: Where the samples come from.

    Returns:
        A scalar; 0 (still differentiable) when no query has keys outside its support.
    """
    negatives = allowed[:, None] & ~support  # (B, H, Lq, Lk)
    rows = support.any(-1) & negatives.any(-1)  # (B, H, Lq): queries with both
    if not bool(rows.any()):
        return squared.sum() * 0.0
    distances = squared[rows]  # (N, Lk)
    positive = torch.multinomial(support[rows].float(), pairs_per_query, replacement=True, generator=generator)
    negative = torch.multinomial(negatives[rows].float(), pairs_per_query, replacement=True, generator=generator)
    hinge = margin + distances.gather(-1, positive) - distances.gather(-1, negative)  # (N, pairs)
    return hinge.clamp(min=0).mean()


def teacher_forced_positions(batch: AttentionBatch) -> torch.Tensor:
    """``(Lq,)`` the queries' positions in a collected batch: 0 … Lq − 1 (the keys' are 0 … Lk − 1), as teacher
    forcing numbers them in self- and cross-attention alike."""
    return torch.arange(batch.query.shape[-2])


def real_projections(projections: LayerProjections, batches: list[AttentionBatch]) -> torch.Tensor:
    """``(H, N, r)``: the projections of every real query and key of the batches (padding left out)."""
    points = []
    with torch.no_grad():
        for batch in batches:
            projected_query, projected_key = projections.project(batch.query, batch.key)
            real_queries, real_keys = batch.allowed.any(-1), batch.allowed.any(-2)  # (B, Lq), (B, Lk)
            points.append(projected_query.transpose(0, 1)[:, real_queries])  # (H, n, r)
            points.append(projected_key.transpose(0, 1)[:, real_keys])
    return torch.cat(points, dim=1)


def kmeans(points: torch.Tensor, clusters: int, generator: torch.Generator) -> torch.Tensor:
    """Lloyd's k-means per head: ``(H, N, r)`` → ``(H, k, r)`` centroids (started at k distinct random points; an
    emptied cluster keeps its centroid)."""
    count = points.shape[1]
    start = torch.randperm(count, generator=generator)[:clusters]
    centroids = points[:, start].clone()  # (H, k, r)
    for _ in range(KMEANS_ITERATIONS):
        assignment = torch.cdist(points, centroids).argmin(-1)  # (H, N)
        one_hot = torch.nn.functional.one_hot(assignment, clusters).to(points.dtype)  # (H, N, k)
        sizes = one_hot.sum(1)  # (H, k)
        sums = one_hot.transpose(1, 2) @ points  # (H, k, r)
        centroids = torch.where(sizes[..., None] > 0, sums / sizes.clamp(min=1)[..., None], centroids)
    return centroids


def train_layer(
    batches: list[AttentionBatch], settings: TrainingSettings, generator: torch.Generator, bar: tqdm
) -> tuple[LayerProjections, torch.Tensor]:
    """Train one layer's projections and fit its quantiles and centroids.

    Returns:
        ``(projections, support distances)``: the latter ``(n,)``, the projected distances of the training support
        pairs (all heads), for the thresholds to sweep.
    """
    heads, head_dim = batches[0].query.shape[1], batches[0].query.shape[-1]
    shape = (heads, head_dim, settings.projection_dim)
    # Variance-preserving start: a projected coordinate has about the variance of an input coordinate.
    query_weight = (torch.randn(shape, generator=generator) / head_dim**0.5).requires_grad_()
    key_weight = (torch.randn(shape, generator=generator) / head_dim**0.5).requires_grad_()
    # From 0 (no position term) up: the hinge's gradient moves it wherever the support keys are nearer than the others.
    position_weight = torch.zeros(heads).requires_grad_() if settings.position_term else None
    groups = [{"params": [query_weight, key_weight]}]
    if position_weight is not None:
        groups.append({"params": [position_weight], "lr": settings.position_learning_rate})
    optimizer = torch.optim.Adam(groups, lr=settings.learning_rate)
    empty_quantiles = torch.zeros(heads, settings.projection_dim, QUANTILE_STEPS + 1)
    for _ in range(settings.epochs):
        for index in torch.randperm(len(batches), generator=generator).tolist():
            batch = batches[index]
            projections = LayerProjections(query_weight, key_weight, empty_quantiles, position=position_weight)
            squared = projections.squared_distances(
                *projections.project(batch.query, batch.key), teacher_forced_positions(batch)
            )
            loss = contrastive_hinge_loss(
                squared, batch.support, batch.allowed,
                margin=settings.margin, pairs_per_query=settings.pairs_per_query, generator=generator,
            )  # fmt: skip
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if position_weight is not None:
                with torch.no_grad():
                    position_weight.clamp_(min=0.0)
            bar.set_postfix(loss=f"{loss.item():.3f}")
        bar.update(1)

    detached_position = None if position_weight is None else position_weight.detach()
    projections = LayerProjections(
        query_weight.detach(), key_weight.detach(), empty_quantiles, position=detached_position
    )
    points = real_projections(projections, batches)  # (H, N, r)
    levels = torch.linspace(0, 1, QUANTILE_STEPS + 1)
    projections.quantiles = torch.quantile(points, levels, dim=1).permute(1, 2, 0).contiguous()  # (H, r, steps + 1)
    projections.centroids = {
        clusters: kmeans(points, clusters, generator) for clusters in settings.clusters if clusters <= points.shape[1]
    }
    distances = []
    with torch.no_grad():
        for batch in batches:
            squared = projections.squared_distances(
                *projections.project(batch.query, batch.key), teacher_forced_positions(batch)
            )
            distances.append(squared[batch.support].sqrt())
    return projections, torch.cat(distances)


def train_predictor(
    sample: AttentionSample, settings: TrainingSettings | None = None, *, progress: bool = True
) -> SparsefinderPredictor:
    """Train the projections of every layer of every attention type in ``sample``.

    Returns:
        The predictor; its ``metadata`` holds the settings and ``"thresholds"``: per attention type, the distance
        thresholds to sweep (`THRESHOLD_QUANTILES` of the training support pairs' projected distances).
    """
    settings = settings or TrainingSettings()
    generator = torch.Generator().manual_seed(settings.seed)
    layers, thresholds = {}, {}
    total = settings.epochs * sum(len(layer_batches) for layer_batches in sample.layers.values())
    with tqdm(total=total, desc="Training projections", unit="epoch", disable=not progress) as bar:
        for kind, layer_batches in sample.layers.items():
            trained = [train_layer(batches, settings, generator, bar) for batches in layer_batches]
            layers[kind] = [projections for projections, _ in trained]
            distances = torch.cat([layer_distances for _, layer_distances in trained])
            levels = torch.tensor(THRESHOLD_QUANTILES)
            values = torch.quantile(distances, levels).tolist() if distances.numel() else [1.0]
            thresholds[kind] = sorted({round_up(value) for value in values if value > 0} or {1.0})
    metadata = {
        "projection_dim": settings.projection_dim,
        "epochs": settings.epochs,
        "learning_rate": settings.learning_rate,
        "margin": settings.margin,
        "pairs_per_query": settings.pairs_per_query,
        "position_term": settings.position_term,
        "position_learning_rate": settings.position_learning_rate,
        "seed": settings.seed,
        "training_sentences": sample.num_sentences,
        "thresholds": thresholds,
    }
    return SparsefinderPredictor(layers, metadata)


__all__ = [
    "THRESHOLD_QUANTILES",
    "TrainingSettings",
    "contrastive_hinge_loss",
    "kmeans",
    "round_up",
    "teacher_forced_positions",
    "train_layer",
    "train_predictor",
]
