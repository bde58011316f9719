"""hf_entmax: adaptively sparse attention (learnable per-head α-entmax) for Hugging Face models."""

from .analysis import ModelAnalysis, analyze_model
from .modeling.configuration_adaptive_entmax_marian import AdaptiveEntmaxMarianConfig
from .modeling.entmax import entmax, entmax15, sparsemax
from .modeling.modeling_adaptive_entmax_marian import (
    AdaptiveEntmaxMarianModel,
    AdaptiveEntmaxMarianMTModel,
    AdaptiveEntmaxMarianPreTrainedModel,
)
from .modeling.pipeline_translation import TranslationPipeline
from .registration import register_auto_classes


register_auto_classes()

__version__ = "0.1.0"

__all__ = [
    "AdaptiveEntmaxMarianConfig",
    "AdaptiveEntmaxMarianMTModel",
    "AdaptiveEntmaxMarianModel",
    "AdaptiveEntmaxMarianPreTrainedModel",
    "ModelAnalysis",
    "TranslationPipeline",
    "analyze_model",
    "entmax",
    "entmax15",
    "register_auto_classes",
    "sparsemax",
]
