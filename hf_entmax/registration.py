"""Registration of AdaptiveEntmaxMarian with the transformers Auto classes."""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from .modeling.configuration_adaptive_entmax_marian import AdaptiveEntmaxMarianConfig
from .modeling.modeling_adaptive_entmax_marian import (
    AdaptiveEntmaxMarianModel,
    AdaptiveEntmaxMarianMTModel,
    register_attention,
)


def register_auto_classes() -> None:
    """Register the config and models with `AutoConfig`, `AutoModel` and `AutoModelForSeq2SeqLM`.

    Runs on `import hf_entmax`; calling it again is harmless.
    """
    AutoConfig.register(AdaptiveEntmaxMarianConfig.model_type, AdaptiveEntmaxMarianConfig, exist_ok=True)
    AutoModel.register(AdaptiveEntmaxMarianConfig, AdaptiveEntmaxMarianModel, exist_ok=True)
    AutoModelForSeq2SeqLM.register(AdaptiveEntmaxMarianConfig, AdaptiveEntmaxMarianMTModel, exist_ok=True)
    register_attention()
