"""Building a model config from settings people gave, with a one-line error for an inconsistent one, and saying in
words what a config's settings mean where several outputs say it (the training printout, the model card, the analysis
report)."""

from huggingface_hub.errors import StrictDataclassError
from transformers import PreTrainedConfig

from ..errors import HfEntmaxValueError, last_line
from ..modeling.configuration_adaptive_entmax_marian import AdaptiveEntmaxMarianConfig, position_limit


def build_config(**fields) -> AdaptiveEntmaxMarianConfig:
    """The model config; an inconsistent setting becomes a one-line error naming the flag."""
    try:
        return AdaptiveEntmaxMarianConfig(**fields)
    except StrictDataclassError as error:
        # The config's message names the field (`alpha_init`), which is also the flag's name.
        reason = last_line(str(error)).removeprefix("ValueError: ")
        raise HfEntmaxValueError(f"invalid model settings: {reason}") from error


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
    limit = position_limit(config)
    if limit is not None:
        return f"{what}; inputs of up to {limit} tokens (max_position_embeddings)"
    if kind == "none":
        return f"{what}; inputs may be of any length"
    # A term in the scores of self-attention only: cross-attention compares every target token with every source
    # token, wherever they are.
    return f"{what}; cross-attention has no position term, and inputs may be of any length"
