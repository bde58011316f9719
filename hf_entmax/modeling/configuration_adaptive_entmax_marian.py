"""Configuration of AdaptiveEntmaxMarian: a Marian config plus how each attention type picks its α.

This file is copied to the Hub next to the model, so it needs nothing but torch and transformers.
"""

from dataclasses import dataclass

from huggingface_hub.dataclasses import strict
from transformers import MarianConfig


ATTENTION_TYPES = ("encoder_self", "decoder_self", "cross")


@dataclass(frozen=True)
class AlphaSettings:
    """How one attention type chooses α: ``init`` is a float in [1, 2] or ``"random"``."""

    init: float | str
    learn: bool
    minimum: float
    maximum: float


@strict
class AdaptiveEntmaxMarianConfig(MarianConfig):
    r"""
    A [`MarianConfig`] whose attention heads use α-entmax instead of softmax.

    Every attention module (encoder self-attention, decoder self-attention, cross-attention) holds
    one α per head. A learned α is ``clamp(1 + sigmoid(alpha_logit), alpha_min, alpha_max)``,
    recomputed from its unconstrained logit at every forward, as in Correia et al. (2019).

    alpha_init (`float` or `"random"`, *optional*, defaults to `"random"`):
        Initial α of every head: a number in [1, 2], or `"random"` for the paper's initialisation
        (logits drawn from N(0, 1), so α has mean ≈ 1.5). 1 is softmax, 1.5 is 1.5-entmax, 2 is sparsemax.
    learn_alpha (`bool`, *optional*, defaults to `True`):
        Learn α per head. With `False`, α stays at `alpha_init` (which must then be a number) and is not
        a parameter: α = 1 is exactly softmax, 1.5 the paper's 1.5-entmax baseline, 2 sparsemax.
    alpha_min (`float`, *optional*, defaults to 1.01):
        Lower bound of a learned α (the paper clamps at 1.01).
    alpha_max (`float`, *optional*, defaults to 2.0):
        Upper bound of a learned α.
    encoder_self_alpha_init, decoder_self_alpha_init, cross_alpha_init (`float` or `"random"`, *optional*):
        Per attention type overrides of `alpha_init`; `None` (the default) uses `alpha_init`.
    encoder_self_learn_alpha, decoder_self_learn_alpha, cross_learn_alpha (`bool`, *optional*):
        Per attention type overrides of `learn_alpha`; `None` (the default) uses `learn_alpha`.

    Example:

    ```python
    >>> from hf_entmax import AdaptiveEntmaxMarianConfig, AdaptiveEntmaxMarianMTModel
    >>> # Learned α everywhere, but a fixed softmax for cross-attention.
    >>> config = AdaptiveEntmaxMarianConfig(cross_alpha_init=1.0, cross_learn_alpha=False)
    >>> model = AdaptiveEntmaxMarianMTModel(config)
    ```
    """

    model_type = "adaptive_entmax_marian"

    alpha_init: float | int | str = "random"
    learn_alpha: bool = True
    alpha_min: float | int = 1.01
    alpha_max: float | int = 2.0
    encoder_self_alpha_init: float | int | str | None = None
    decoder_self_alpha_init: float | int | str | None = None
    cross_alpha_init: float | int | str | None = None
    encoder_self_learn_alpha: bool | None = None
    decoder_self_learn_alpha: bool | None = None
    cross_learn_alpha: bool | None = None

    def alpha_settings(self, attention_type: str) -> AlphaSettings:
        """The α settings of one attention type (`"encoder_self"`, `"decoder_self"` or `"cross"`)."""
        if attention_type not in ATTENTION_TYPES:
            raise ValueError(f"attention type must be one of {ATTENTION_TYPES}, got {attention_type!r}")
        init = getattr(self, f"{attention_type}_alpha_init")
        learn = getattr(self, f"{attention_type}_learn_alpha")
        return AlphaSettings(
            init=self.alpha_init if init is None else init,
            learn=self.learn_alpha if learn is None else learn,
            minimum=float(self.alpha_min),
            maximum=float(self.alpha_max),
        )

    def validate_alpha(self):
        """Part of `@strict` validation: α settings are in range and consistent."""
        if not 1.0 <= self.alpha_min < self.alpha_max <= 2.0:
            raise ValueError(
                f"`alpha_min` and `alpha_max` must satisfy 1 <= alpha_min < alpha_max <= 2, "
                f"got alpha_min={self.alpha_min} and alpha_max={self.alpha_max}"
            )
        for prefix in ("", *(f"{kind}_" for kind in ATTENTION_TYPES)):
            value = getattr(self, f"{prefix}alpha_init")
            if value is None or value == "random":
                continue
            if isinstance(value, str) or not 1.0 <= value <= 2.0:
                raise ValueError(f"`{prefix}alpha_init` must be a number in [1, 2] or 'random', got {value!r}")
        for kind in ATTENTION_TYPES:
            settings = self.alpha_settings(kind)
            if settings.init == "random" and not settings.learn:
                raise ValueError(
                    f"`alpha_init`='random' needs a learned α, but α of {kind} attention is fixed "
                    f"(`learn_alpha`=False): give a number in [1, 2] as its `alpha_init` instead"
                )
            if settings.learn and settings.init != "random" and not self.alpha_min <= settings.init <= self.alpha_max:
                raise ValueError(
                    f"a learned α of {kind} attention lives in [alpha_min, alpha_max] = "
                    f"[{self.alpha_min}, {self.alpha_max}], but its `alpha_init` is {settings.init}: "
                    f"change `alpha_min`/`alpha_max`, or fix α with `learn_alpha`=False"
                )


__all__ = ["AdaptiveEntmaxMarianConfig"]
