"""Registration of AdaptiveEntmaxMarian with the transformers Auto classes."""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

from .modeling.configuration_adaptive_entmax_marian import AdaptiveEntmaxMarianConfig
from .modeling.modeling_adaptive_entmax_marian import (
    AdaptiveEntmaxMarianForCausalLM,
    AdaptiveEntmaxMarianModel,
    AdaptiveEntmaxMarianMTModel,
    register_attention,
)


def register_auto_classes() -> None:
    """Register the config and models with `AutoConfig`, `AutoModel`, `AutoModelForSeq2SeqLM` and
    `AutoModelForCausalLM` (the decoder-only model).

    Runs on `import hf_entmax`; calling it again is harmless.
    """
    AutoConfig.register(AdaptiveEntmaxMarianConfig.model_type, AdaptiveEntmaxMarianConfig, exist_ok=True)
    AutoModel.register(AdaptiveEntmaxMarianConfig, AdaptiveEntmaxMarianModel, exist_ok=True)
    AutoModelForSeq2SeqLM.register(AdaptiveEntmaxMarianConfig, AdaptiveEntmaxMarianMTModel, exist_ok=True)
    AutoModelForCausalLM.register(AdaptiveEntmaxMarianConfig, AdaptiveEntmaxMarianForCausalLM, exist_ok=True)
    register_attention()
