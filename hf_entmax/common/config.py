"""Building a model config from settings people gave, with a one-line error for an inconsistent one, and saying in
words what a config's settings mean where several outputs say it (the training printout, the model card, the analysis
report)."""

from huggingface_hub.errors import StrictDataclassError
from transformers import PreTrainedConfig

from ..errors import HfEntmaxValueError, last_line
from ..modeling.configuration_adaptive_entmax_marian import AdaptiveEntmaxMarianConfig, position_limit
from ..modeling.modeling_adaptive_entmax_marian import SCALING_PARAMETERS
from ..modeling.positions import alibi_slopes


def build_config(**fields) -> AdaptiveEntmaxMarianConfig:
    """The model config; an inconsistent setting becomes a one-line error naming the flag."""
    try:
        return AdaptiveEntmaxMarianConfig(**fields)
    except StrictDataclassError as error:
        # The config's message names the field (`alpha_init`), which is also the flag's name.
        reason = last_line(str(error)).removeprefix("ValueError: ")
        raise HfEntmaxValueError(f"invalid model settings: {reason}") from error


# The layers of each `layer_style` but Marian's, in words (model cards, the decoder-only benchmark's table).
LAYER_STYLE_DESCRIPTIONS = {
    "pre_norm": "pre-norm layers (LayerNorm before each block, and once more after each stack)",
    "gemma2": "Gemma-2's layers (RMSNorm before and after each block, a gated feed-forward, a norm after each stack)",
}


def describe_positions(config: PreTrainedConfig) -> str:
    """How a model of ``config`` knows where tokens are, in one sentence without a full stop: the position type (a
    Marian config's are sinusoidal), what it does, and the input length it limits to, if any."""
    kind = getattr(config, "position_embedding_type", "sinusoidal")
    what = {
        "sinusoidal": "sinusoidal (Marian's): fixed vectors added to the token embeddings",
        "rope": f"RoPE (θ = {getattr(config, 'rope_theta', 0):g}): self-attention rotates queries and keys by their "
        "position",
        "alibi": "ALiBi: self-attention subtracts a slope per head times the query–key distance from the scores",
        "nape": "NAPE: ALiBi's distance penalty on the first half of each self-attention's heads (slopes 1, 1/2, …), "
        "no position on the other half",
        "none": "none: no position term (a causal decoder still tells tokens apart by how many precede them)",
    }[kind]
    if getattr(config, "encoder_alibi_directions", "both") == "split":
        what += "; the encoder's biased heads see the keys up to the query and from it in turn (split directions)"
    limit = position_limit(config)
    length = "inputs may be of any length"
    if limit is not None:
        length = f"inputs of up to {limit} tokens (max_position_embeddings)"
    cross = getattr(config, "cross_attention_positions", "none")
    if cross != "none":
        how = {
            "rope": "rotates target queries and source keys by their positions (RoPE, θ = "
            f"{getattr(config, 'rope_theta', 0):g})",
            "alibi": "subtracts a slope per head times the target–source distance from the scores (ALiBi)",
            "nape": "subtracts a slope times the target–source distance on half of its heads (NAPE)",
        }[cross]
        return f"{what}; cross-attention {how}, and {length}"
    if kind in ("sinusoidal", "none"):
        return f"{what}; {length}"
    # A term in the scores of self-attention only: cross-attention compares every target token with every source
    # token, wherever they are.
    return f"{what}; cross-attention has no position term, and {length}"


def is_scaling_parameter(name: str) -> bool:
    """Whether the parameter (or state-dict key) ``name`` is one of the `SCALING_PARAMETERS`."""
    return name.endswith(SCALING_PARAMETERS)


# Each learned query scaling's factor on a query that may attend to n keys, and its name.
SCALING_FORMULAS = {
    "asentmax": ("δ + β·log(n + 1)^γ per head", "ASEntmax"),
    "asentmax_per_token": (
        "δ + β·log(n + 1)^γ with β = softplus(W_β h), γ = 2·tanh(W_γ h) per token",
        "ASEntmax per token",
    ),
    "ssmax": ("s·log(n + 1) per head", "SSMax, scalable softmax"),
}


def scaling_formula(method: str, projection_bias: bool = False) -> tuple[str, str]:
    """A learned query scaling's factor (`SCALING_FORMULAS`), with per-token ASEntmax's biases where its maps have
    them (`attention_scaling_projection_bias`), and its name."""
    formula, name = SCALING_FORMULAS[method]
    if projection_bias and method == "asentmax_per_token":
        formula = formula.replace("W_β h", "W_β h + b_β").replace("W_γ h", "W_γ h + b_γ")
    return formula, name


def describe_scaling_method(method: str, offset: float, projection_bias: bool = False) -> str:
    """A learned query scaling's factor, with the value of its offset δ (SSMax has none), and its name in words."""
    formula, name = scaling_formula(method, projection_bias)
    return f"{formula.replace('δ', f'{offset:g}')} ({name})"


def scaled_heads_text(config: PreTrainedConfig, attention_type: str) -> str:
    """Which heads of an attention type scale their queries, in words: empty for all of them, else the heads
    without a position bias (NAPE's NoPE heads)."""
    if config.scaled_heads(attention_type) == "all":
        return ""
    heads = config.decoder_attention_heads if attention_type != "encoder_self" else config.encoder_attention_heads
    slopes = alibi_slopes(config.position_embedding_type, heads) or (0.0,) * heads
    listed = ", ".join(str(head) for head, slope in enumerate(slopes) if slope == 0.0)
    return f"the heads without a position bias only (heads {listed})"
