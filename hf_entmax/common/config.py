"""Building a model config from settings people gave, with a one-line error for an inconsistent one."""

from huggingface_hub.errors import StrictDataclassError

from ..errors import HfEntmaxValueError, last_line
from ..modeling.configuration_adaptive_entmax_marian import AdaptiveEntmaxMarianConfig


def build_config(**fields) -> AdaptiveEntmaxMarianConfig:
    """The model config; an inconsistent setting becomes a one-line error naming the flag."""
    try:
        return AdaptiveEntmaxMarianConfig(**fields)
    except StrictDataclassError as error:
        # The config's message names the field (`alpha_init`), which is also the flag's name.
        reason = last_line(str(error)).removeprefix("ValueError: ")
        raise HfEntmaxValueError(f"invalid model settings: {reason}") from error
