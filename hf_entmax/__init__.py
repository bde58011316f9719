"""hf_entmax: adaptively sparse attention (learnable per-head α-entmax) for Hugging Face models.

``import hf_entmax`` loads the model (the flat files of `hf_entmax.modeling`) and registers it with the Auto classes;
the heavier tools load on first use: ``hf_entmax.analyze_model`` imports the analysis, and the training, Hub and
analysis packages (`hf_entmax.training`, `hf_entmax.hub`, `hf_entmax.analysis`) are imported by name.
"""

import importlib

from .modeling.configuration_adaptive_entmax_marian import AdaptiveEntmaxMarianConfig
from .modeling.entmax import entmax, entmax15, sparsemax
from .modeling.modeling_adaptive_entmax_marian import (
    AdaptiveEntmaxMarianForCausalLM,
    AdaptiveEntmaxMarianModel,
    AdaptiveEntmaxMarianMTModel,
    AdaptiveEntmaxMarianPreTrainedModel,
)
from .registration import register_auto_classes


register_auto_classes()

__version__ = "0.1.0"

# Public names whose modules load more than the model needs (transformers' pipelines and every tokenizer backend,
# the analysis), imported on first access (PEP 562): `import hf_entmax` stays as light as the model it registers.
_LAZY_ATTRIBUTES = {
    "ModelAnalysis": "hf_entmax.analysis.collect",
    "TranslationPipeline": "hf_entmax.modeling.pipeline_translation",
    "analyze_model": "hf_entmax.analysis.collect",
}

__all__ = [
    "AdaptiveEntmaxMarianConfig",
    "AdaptiveEntmaxMarianForCausalLM",
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


def __getattr__(name: str):
    if name in _LAZY_ATTRIBUTES:
        value = getattr(importlib.import_module(_LAZY_ATTRIBUTES[name]), name)
        globals()[name] = value  # later accesses skip this function
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
