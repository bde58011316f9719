"""The named model sizes of training (`--model_size`); `hf_entmax.common.config.build_config` makes the config."""

from ..errors import HfEntmaxValueError


# Architecture only; vocabulary and special tokens come from the tokenizer.
MODEL_PRESETS: dict[str, dict[str, int]] = {
    # For tests and the demo: trains in minutes on two CPU cores.
    "tiny": dict(
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=256,
        decoder_ffn_dim=256,
    ),
    # The project's Multi30k baseline size.
    "small": dict(
        d_model=256,
        encoder_layers=3,
        decoder_layers=3,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=1024,
        decoder_ffn_dim=1024,
    ),
    # Transformer-Base (Vaswani et al., 2017), the size of the paper's experiments.
    "base": dict(
        d_model=512,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
    ),
}


def preset_config_kwargs(name: str) -> dict[str, int]:
    """The architecture keyword arguments of a named size preset (`tiny`, `small` or `base`)."""
    if name not in MODEL_PRESETS:
        raise HfEntmaxValueError(f"`model_size` must be one of {sorted(MODEL_PRESETS)}, got {name!r}")
    return dict(MODEL_PRESETS[name])
