"""Sparsefinder (Treviso et al., 2022): learn to predict each head's α-entmax graph, and measure the
sparsity–recall trade-off of the predicted graphs (the code that applies a predictor at inference is the flat Hub
file `hf_entmax.modeling.sparsefinder_attention`)."""

from .collect import AttentionBatch, AttentionSample, collect_attention
from .evaluate import (
    GraphScores,
    choose_points,
    evaluate_points,
    graph_mass,
    graph_recall,
    head_recall_at,
    sweep_points,
)
from .train import TrainingSettings, contrastive_hinge_loss, train_predictor


__all__ = [
    "AttentionBatch",
    "AttentionSample",
    "GraphScores",
    "TrainingSettings",
    "choose_points",
    "collect_attention",
    "contrastive_hinge_loss",
    "evaluate_points",
    "graph_mass",
    "graph_recall",
    "head_recall_at",
    "sweep_points",
    "train_predictor",
]
