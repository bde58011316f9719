"""Configuration of AdaptiveEntmaxMarian: a Marian config plus how each attention type picks its α.

This file is copied to the Hub next to the model, so it needs nothing but torch and transformers.
"""

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from huggingface_hub.dataclasses import strict
from transformers import MarianConfig, PreTrainedConfig
from transformers.activations import ACT2FN


ATTENTION_TYPES = ("encoder_self", "decoder_self", "cross")
# How cards, reports and messages name each attention type (lower-cased inside a sentence).
ATTENTION_TITLES = {
    "encoder_self": "Encoder self-attention",
    "decoder_self": "Decoder self-attention",
    "cross": "Cross-attention",
}
SIZE_FIELDS = (
    "vocab_size",
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "max_position_embeddings",
)
# Probabilities of dropping something in training: 1 would drop everything (and divide by 1 − p = 0).
PROBABILITY_FIELDS = ("dropout", "attention_dropout", "activation_dropout", "encoder_layerdrop", "decoder_layerdrop")
# How each layer normalises around its blocks (`LayerStyleMixin` in the modeling file, docs/model.md "Layer styles"):
# Marian's post-norm LayerNorm; pre-norm; or Gemma-2's RMSNorm before and after each block with a gated feed-forward,
# the layers of ASEntmax's reference.
LAYER_STYLES = ("marian", "pre_norm", "gemma2")
# The decoder's start token and one generated token: fewer positions leave nothing to generate.
MIN_POSITIONS = 2
# The whole numbers a generation config sets, and their least values (0 for the minimum lengths).
GENERATION_COUNTS = {
    "num_beams": 1,
    "num_return_sequences": 1,
    "max_length": 1,
    "max_new_tokens": 1,
    "min_length": 0,
    "min_new_tokens": 0,
}


@dataclass(frozen=True)
class AlphaSettings:
    """How one attention type chooses α: ``init`` is a float in [1, 2] or ``"random"``."""

    init: float | str
    learn: bool
    minimum: float
    maximum: float


def _option(default: object, help_text: str):
    return field(default=default, metadata={"help": help_text})


@dataclass
class AlphaOptions:
    """How the attention heads choose α: the one definition of these options.

    `AdaptiveEntmaxMarianConfig` inherits them as config fields, and `hf-entmax train`/`hf-entmax convert` derive their
    flags from them (with the same names and help), so the three cannot drift apart.
    """

    alpha_init: float | int | str = _option(
        "random",
        "Initial α of every head: a number in [1, 2] (1 = softmax, 1.5 = 1.5-entmax, 2 = sparsemax) or 'random' "
        "(the paper's: logits drawn from N(0, 1), so α has mean ≈ 1.5).",
    )
    learn_alpha: bool = _option(
        True, "Learn α per head. With False, α stays at alpha_init (a number then) and is not a parameter."
    )
    alpha_min: float | int = _option(1.01, "Lower bound of a learned α (the paper clamps at 1.01).")
    alpha_max: float | int = _option(2.0, "Upper bound of a learned α.")
    encoder_self_alpha_init: float | int | str | None = _option(
        None, "Override of alpha_init for encoder self-attention (None: alpha_init)."
    )
    decoder_self_alpha_init: float | int | str | None = _option(
        None, "Override of alpha_init for decoder self-attention (None: alpha_init)."
    )
    cross_alpha_init: float | int | str | None = _option(
        None, "Override of alpha_init for cross-attention (None: alpha_init)."
    )
    encoder_self_learn_alpha: bool | None = _option(
        None, "Override of learn_alpha for encoder self-attention (None: learn_alpha)."
    )
    decoder_self_learn_alpha: bool | None = _option(
        None, "Override of learn_alpha for decoder self-attention (None: learn_alpha)."
    )
    cross_learn_alpha: bool | None = _option(None, "Override of learn_alpha for cross-attention (None: learn_alpha).")

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
        """α settings in range and consistent; part of the config's `@strict` validation.

        Raises:
            ValueError: naming the field, its value and what is allowed.
        """
        if not 1.0 <= self.alpha_min < self.alpha_max <= 2.0:
            raise ValueError(
                f"`alpha_min` and `alpha_max` must satisfy 1 <= alpha_min < alpha_max <= 2, "
                f"got alpha_min={self.alpha_min} and alpha_max={self.alpha_max}"
            )
        for prefix in ("", *(f"{kind}_" for kind in ATTENTION_TYPES)):
            value = getattr(self, f"{prefix}alpha_init")
            if value is None or value == "random":
                continue
            if isinstance(value, (str, bool)) or not 1.0 <= value <= 2.0:
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


# How a head may scale its queries before α-entmax: "none"; ASEntmax's learned, length-dependent temperature, per
# head or per token; scalable softmax's learned s · log n (SSMax, the baseline ASEntmax is compared with); or
# n^(1−α), which gives every head softmax's sharpness at uniform attention.
SCALING_METHODS = ("none", "asentmax", "asentmax_per_token", "ssmax", "softmax_matched")
# The methods with parameters of their own (learned), and which heads a method may scale (`attention_scaling_heads`).
LEARNED_SCALING_METHODS = ("asentmax", "asentmax_per_token", "ssmax")
SCALED_HEADS = ("all", "nope")


@dataclass
class ScalingOptions:
    """Whether the heads scale their queries by a learned, length-dependent temperature before α-entmax (ASEntmax,
    Vasylenko et al., 2026): the one definition of these options, inherited by the config like `AlphaOptions`.

    With ``"asentmax"``, head h multiplies a query that may attend to n keys by ``δ + β_h · log(n + 1) ** γ_h``
    (``δ`` = `attention_scaling_offset`; ``β_h``, ``γ_h`` learned, initialised from U(0.1, 1) and N(0, 0.1²)), so
    that it can stay sparse, or become softmax-like, as inputs grow longer than those it was trained on.

    With ``"asentmax_per_token"``, β and γ come from each query token's hidden state h instead (ASEntmax's adaptive
    variant): ``β = softplus(W_β h + b_β)``, ``γ = 2 · tanh(W_γ h + b_γ)``, one value per head, W_β and W_γ learned,
    and the biases b_β, b_γ too with `attention_scaling_projection_bias` (else none).

    With ``"ssmax"`` (scalable softmax, Nakanishi 2025), head h multiplies its query by ``s_h · log(n + 1)``, ``s_h``
    learned from N(1, 0.01²).

    With ``"softmax_matched"``, head h multiplies a query that may attend to n keys by ``n ** (1 − α_h)``, with no
    parameter of its own: every head starts as sharp as softmax whatever its α (why: docs/model.md, "Softmax-matched
    queries"). With α = 1 it is 1: softmax heads are unchanged.

    `attention_scaling_heads` chooses the heads a method scales: all of them, or under NAPE positions the heads
    without a position bias only (``"nope"``, ASEntmax's reference, and the default there for the learned,
    length-dependent methods; softmax-matched queries undo α's temperature, which every head has, so they scale all).
    """

    attention_scaling: str | None = _option(
        None,
        "How every head scales its queries before α-entmax: None or 'none' (not at all, the paper's model), "
        "'asentmax' (a learned temperature per head that grows with the number of keys a query may attend to) or "
        "'asentmax_per_token' (the same temperature with β and γ computed from each query token), 'ssmax' (scalable "
        "softmax: a learned s per head times log(n + 1)) or 'softmax_matched' (n ** (1 − α) for n keys: every head as "
        "sharp as softmax at uniform attention).",
    )
    encoder_self_attention_scaling: str | None = _option(
        None, "Override of attention_scaling for encoder self-attention (None: attention_scaling)."
    )
    decoder_self_attention_scaling: str | None = _option(
        None, "Override of attention_scaling for decoder self-attention (None: attention_scaling)."
    )
    cross_attention_scaling: str | None = _option(
        None, "Override of attention_scaling for cross-attention (None: attention_scaling)."
    )
    attention_scaling_offset: float | int = _option(
        1.0, "δ of ASEntmax's factor δ + β_h · log(n + 1) ** γ_h: a finite number >= 0 (the reference's is 1)."
    )
    attention_scaling_heads: str | None = _option(
        None,
        "Which heads scale their queries: 'all', or 'nope' (where positions are NAPE's, in self-attention with "
        "position_embedding_type='nape' and in cross-attention with cross_attention_positions='nape': the heads "
        "without a position bias, as ASEntmax's reference). None: 'nope' for asentmax, asentmax_per_token and ssmax "
        "under NAPE, 'all' otherwise.",
    )
    attention_scaling_projection_bias: bool = _option(
        False,
        "Whether the maps that compute β and γ from each query token (attention_scaling 'asentmax_per_token') have a "
        "bias per head: β = softplus(W_β h + b_β), γ = 2 · tanh(W_γ h + b_γ) (the reference's attn_scale_proj_bias). "
        "The biases start at 0, where the maps compute what they do without them.",
    )

    def scales_per_token(self) -> bool:
        """Whether an attention type computes its β and γ from each token (``"asentmax_per_token"``): the only method
        whose maps `attention_scaling_projection_bias` gives a bias."""
        methods = {getattr(self, f"{kind}_attention_scaling") or self.attention_scaling for kind in ATTENTION_TYPES}
        return "asentmax_per_token" in methods

    def validate_attention_scaling(self):
        """Part of the config's `@strict` validation: known methods and a usable offset.

        Raises:
            ValueError: naming the field, its value and what is allowed.
        """
        for prefix in ("", *(f"{kind}_" for kind in ATTENTION_TYPES)):
            value = getattr(self, f"{prefix}attention_scaling")
            if value is not None and value not in SCALING_METHODS:
                raise ValueError(
                    f"`{prefix}attention_scaling` must be one of {', '.join(map(repr, SCALING_METHODS))} or None, "
                    f"got {value!r}"
                )
        offset = self.attention_scaling_offset
        if isinstance(offset, bool) or not isinstance(offset, (int, float)) or not 0.0 <= offset < float("inf"):
            raise ValueError(f"`attention_scaling_offset` must be a finite number >= 0, got {offset!r}")
        heads = self.attention_scaling_heads
        if heads is not None and heads not in SCALED_HEADS:
            raise ValueError(
                f"`attention_scaling_heads` must be one of {', '.join(map(repr, SCALED_HEADS))} or None, got {heads!r}"
            )
        if self.attention_scaling_projection_bias and not self.scales_per_token():
            raise ValueError(
                "`attention_scaling_projection_bias`=True adds a bias to per-token ASEntmax's maps, which no "
                "attention type has: set attention_scaling (or an attention type's) to 'asentmax_per_token', or leave "
                "it False"
            )
        positions = (getattr(self, "position_embedding_type", None), getattr(self, "cross_attention_positions", None))
        if heads == "nope" and "nape" not in positions:
            raise ValueError(
                "`attention_scaling_heads`='nope' scales the heads without a position bias, which only NAPE positions "
                "have: use 'all', or position_embedding_type='nape' or cross_attention_positions='nape'"
            )


# Where self-attention's heads learn where tokens are (docs/model.md, "Positions"). Marian's sinusoidal vectors are
# added to the embeddings, and a position past the table (max_position_embeddings) does not exist; the others act in
# the attention scores and depend only on the distance between query and key, so they take inputs of any length.
POSITION_TYPES = ("sinusoidal", "rope", "alibi", "nape", "none")
# How the encoder's distance-biased heads see the keys (`PositionOptions.encoder_alibi_directions`).
ALIBI_DIRECTIONS = ("both", "split")
# Whether cross-attention knows where tokens are (`PositionOptions.cross_attention_positions`): not at all, by RoPE's
# rotation, or by ALiBi's (NAPE's) distance penalty between target and source positions.
CROSS_ATTENTION_POSITION_TYPES = ("none", "rope", "alibi", "nape")


@dataclass
class PositionOptions:
    """How self-attention knows where tokens are: the one definition of these options, inherited by the config.

    - ``"sinusoidal"``: Marian's fixed vectors, added to the token embeddings of both stacks (the default, and what a
      converted Marian checkpoint keeps);
    - ``"rope"``: rotary positions (Su et al., 2021): queries and keys of self-attention rotated by their position,
      so that their product depends on the distance alone;
    - ``"alibi"``: ALiBi (Press et al., 2022): a penalty ``−slope_h · |i − j|`` added to the score of query i and
      key j, slopes ``2^(−8h/H)`` for heads h = 1 … H;
    - ``"nape"``: ASEntmax's reference (Vasylenko et al., 2026): ALiBi with slopes 1, 1/2, …, 1/(H/2) on the first
      half of the heads, and no position at all on the others;
    - ``"none"``: no position (a causal decoder still tells positions apart by how many tokens precede them).

    Cross-attention has no position term, unless ``cross_attention_positions`` gives it one in target position i minus
    source position j: ``"rope"`` rotates target token i's query and source token j's key by their positions, so that
    their product depends on i − j; ``"alibi"`` and ``"nape"`` subtract ALiBi's ``slope_h · |i − j|`` (on all heads,
    or NAPE's half), which fades with distance at any length. Either is a start for the alignment's diagonal without
    absolute positions (docs/model.md, "Positions").
    """

    position_embedding_type: str = _option(
        "sinusoidal",
        "How self-attention knows where tokens are: 'sinusoidal' (Marian's fixed vectors, up to "
        "max_position_embeddings), 'rope' (rotary), 'alibi' (a distance penalty per head), 'nape' (ALiBi on half of "
        "the heads, no position on the others) or 'none'. All but 'sinusoidal' take inputs of any length.",
    )
    rope_theta: float | int = _option(
        10000.0,
        "Base of RoPE's rotation frequencies (position_embedding_type='rope', cross_attention_positions='rope').",
    )
    encoder_alibi_directions: str = _option(
        "both",
        "How the encoder's ALiBi/NAPE heads see the keys: 'both' (the penalty -slope * |i - j| on either side alike, "
        "which leaves the encoder unable to tell a sentence from its mirror image) or 'split' (the biased heads "
        "alternate between the keys up to the query and the keys from it, so the encoder knows left from right). "
        "Only with position_embedding_type 'alibi' or 'nape'.",
    )
    cross_attention_positions: str = _option(
        "none",
        "Whether cross-attention knows where tokens are: 'none' (it compares every target token with every source "
        "token alike, as Marian's), 'rope' (target token i's query and source token j's key rotated by their "
        "positions with rope_theta, so that their product depends on i - j), 'alibi' (ALiBi's penalty "
        "-slope * |i - j| on every head) or 'nape' (that penalty on half of the heads, none on the others). Any "
        "position_embedding_type.",
    )

    def validate_positions(self):
        """Part of the config's `@strict` validation: a known position type, and what it needs.

        Raises:
            ValueError: naming the field, its value and what is allowed.
        """
        kind = self.position_embedding_type
        if kind not in POSITION_TYPES:
            raise ValueError(
                f"`position_embedding_type` must be one of {', '.join(map(repr, POSITION_TYPES))}, got {kind!r}"
            )
        theta = self.rope_theta
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not 1.0 < theta < float("inf"):
            raise ValueError(f"`rope_theta` must be a finite number > 1, got {theta!r}")
        directions = self.encoder_alibi_directions
        if directions not in ALIBI_DIRECTIONS:
            raise ValueError(
                f"`encoder_alibi_directions` must be one of {', '.join(map(repr, ALIBI_DIRECTIONS))}, "
                f"got {directions!r}"
            )
        cross = self.cross_attention_positions
        if cross not in CROSS_ATTENTION_POSITION_TYPES:
            raise ValueError(
                f"`cross_attention_positions` must be one of {', '.join(map(repr, CROSS_ATTENTION_POSITION_TYPES))}, "
                f"got {cross!r}"
            )
        if directions == "split" and kind not in ("alibi", "nape"):
            raise ValueError(
                f"`encoder_alibi_directions`='split' splits the heads of ALiBi's distance penalty, which "
                f"position_embedding_type {kind!r} does not have: use 'alibi' or 'nape', or 'both'"
            )
        rotated = ("encoder_attention_heads", "decoder_attention_heads") if kind == "rope" else ()
        if cross == "rope":
            rotated = (*rotated, "decoder_attention_heads")  # cross-attention has the decoder's heads
        for name in dict.fromkeys(rotated):
            heads = getattr(self, name, None)
            if isinstance(heads, int) and heads > 0 and (self.d_model // heads) % 2:
                raise ValueError(
                    f"RoPE rotates pairs of dimensions, but `d_model` / `{name}` = {self.d_model // heads} is "
                    "odd: choose sizes with an even head dimension"
                )
        halved = ("encoder_attention_heads", "decoder_attention_heads") if kind == "nape" else ()
        if cross == "nape":
            halved = (*halved, "decoder_attention_heads")
        for name in dict.fromkeys(halved):
            heads = getattr(self, name, None)
            if isinstance(heads, int) and heads < 2:
                raise ValueError(
                    f"NAPE gives half of the heads ALiBi and the other half no position, but `{name}` is {heads}: "
                    "use at least 2 heads"
                )

    def has_absolute_positions(self) -> bool:
        """Whether positions are a table of ``max_position_embeddings`` vectors, which inputs cannot outgrow."""
        return self.position_embedding_type == "sinusoidal"


def position_limit(config: PreTrainedConfig) -> int | None:
    """The most tokens a stack of a model of ``config`` takes: ``max_position_embeddings`` where positions are a table
    (Marian's sinusoidal ones, and any config without `position_embedding_type`), None where they are relative."""
    if getattr(config, "position_embedding_type", "sinusoidal") != "sinusoidal":
        return None
    return getattr(config, "max_position_embeddings", None)


@strict
class AdaptiveEntmaxMarianConfig(MarianConfig, AlphaOptions, ScalingOptions, PositionOptions):
    r"""
    A [`MarianConfig`] whose attention heads use α-entmax instead of softmax.

    Every attention module (encoder self-attention, decoder self-attention, cross-attention) holds
    one α per head. A learned α is ``clamp(1 + sigmoid(alpha_logit), alpha_min, alpha_max)``,
    recomputed from its unconstrained logit at every forward, as in Correia et al. (2019).

    The α fields (`alpha_init`, `learn_alpha`, `alpha_min`, `alpha_max` and their per-attention-type overrides such
    as `cross_alpha_init`) are those of [`AlphaOptions`], documented there; the query scaling fields
    (`attention_scaling`, its per-attention-type overrides, `attention_scaling_offset` and `attention_scaling_heads`)
    those of [`ScalingOptions`]; `position_embedding_type` and `rope_theta` those of [`PositionOptions`].
    `layer_style` is how each layer normalises around its blocks: ``"marian"`` (Marian's post-norm LayerNorm, the
    default and what conversion keeps), ``"pre_norm"`` (LayerNorm before each block, and once more after the stack) or
    ``"gemma2"`` (Gemma-2's RMSNorm before and after each block, a gated feed-forward, and a norm after the stack: the
    layers of ASEntmax's reference; pair it with ``activation_function="gelu_pytorch_tanh"`` for its GeGLU); the other
    fields are Marian's. The same config serves the decoder-only `AdaptiveEntmaxMarianForCausalLM`, which reads the
    decoder's fields (``decoder_layers``, ``decoder_attention_heads``, …) and ``decoder_self_*`` settings.

    Example:

    ```python
    >>> from hf_entmax import AdaptiveEntmaxMarianConfig, AdaptiveEntmaxMarianMTModel
    >>> # Learned α everywhere, but a fixed softmax for cross-attention.
    >>> config = AdaptiveEntmaxMarianConfig(cross_alpha_init=1.0, cross_learn_alpha=False)
    >>> model = AdaptiveEntmaxMarianMTModel(config)
    ```
    """

    model_type = "adaptive_entmax_marian"

    layer_style: str = "marian"

    # transformers allows `output_attentions` only with the "eager" implementation, because fused kernels (SDPA,
    # flash) never materialise the attention probabilities. This model always runs its own α-entmax attention
    # function, which computes the probabilities explicitly and returns them, so attentions can always be returned:
    # the setter and the validator below drop that restriction (and the switch to "eager" that would come with it).
    @property
    def output_attentions(self) -> bool:
        """`bool`: Whether the model returns the attention probabilities of every layer."""
        return self._output_attentions

    @output_attentions.setter
    def output_attentions(self, value: bool) -> None:
        self._output_attentions = value

    def scaling_method(self, attention_type: str) -> str:
        """One of `SCALING_METHODS`: how one attention type scales its queries.

        A type configured ``"softmax_matched"`` whose α is fixed at 1 is ``"none"``: its factor n^(1 − α) is 1. The
        model, the training printout, the model card and `hf-entmax analyze` all read this method, so none of them
        calls a softmax type scaled because its config names softmax_matched (`hf-entmax train`'s softmax twin keeps
        the fresh-model default).
        """
        if attention_type not in ATTENTION_TYPES:
            raise ValueError(f"attention type must be one of {ATTENTION_TYPES}, got {attention_type!r}")
        method = getattr(self, f"{attention_type}_attention_scaling")
        method = self.attention_scaling if method is None else method
        if method is None:
            return "none"
        alpha = self.alpha_settings(attention_type)
        if method == "softmax_matched" and not alpha.learn and float(alpha.init) == 1.0:
            return "none"
        return method

    def has_learned_scaling(self, attention_type: str) -> bool:
        """Whether one attention type's queries are scaled by learned parameters (ASEntmax's β and γ or their
        projections, SSMax's s), which its modules then hold as weights; softmax_matched scaling has none."""
        return self.scaling_method(attention_type) in LEARNED_SCALING_METHODS

    def scaled_heads(self, attention_type: str) -> str:
        """``"all"``, or ``"nope"`` (the heads without ALiBi's bias under NAPE): the heads whose queries one attention
        type scales; "all" wherever that type's positions are not NAPE's (`position_embedding_type` for self-attention,
        `cross_attention_positions` for cross-attention). By default NAPE's ALiBi heads keep their temperature under
        the learned length scalings (a head with a distance penalty already focuses near the query: the reference's
        choice), but not under softmax-matched queries, which make every head start as sharp as softmax whatever its
        α."""
        positions = self.cross_attention_positions if attention_type == "cross" else self.position_embedding_type
        if positions != "nape":
            return "all"
        if self.attention_scaling_heads is not None:
            return self.attention_scaling_heads
        return "nope" if self.has_learned_scaling(attention_type) else "all"

    def validate_sizes(self):
        """Part of `@strict` validation: sizes the model can be built with (not a failure deep inside torch)."""
        for name in SIZE_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be a positive whole number, got {value!r}")
        for name in ("encoder_attention_heads", "decoder_attention_heads"):
            if self.d_model % getattr(self, name):
                raise ValueError(f"`d_model` ({self.d_model}) must be divisible by `{name}` ({getattr(self, name)})")
        if self.max_position_embeddings < MIN_POSITIONS:
            raise ValueError(
                f"`max_position_embeddings` must be at least {MIN_POSITIONS} (the decoder's start token and one "
                f"generated token), got {self.max_position_embeddings}"
            )
        # Marian's `__post_init__` has already turned a missing `decoder_vocab_size` into `vocab_size`.
        decoder_vocab_size = self.decoder_vocab_size
        if isinstance(decoder_vocab_size, bool) or not isinstance(decoder_vocab_size, int) or decoder_vocab_size < 1:
            raise ValueError(f"`decoder_vocab_size` must be a positive whole number, got {decoder_vocab_size!r}")
        if self.share_encoder_decoder_embeddings and decoder_vocab_size != self.vocab_size:
            raise ValueError(
                f"`decoder_vocab_size` ({decoder_vocab_size}) must equal `vocab_size` ({self.vocab_size}) when "
                "`share_encoder_decoder_embeddings` is True (one embedding serves both): set "
                "share_encoder_decoder_embeddings=False for a separate target vocabulary"
            )

    def validate_token_ids(self):
        """Part of `@strict` validation: every ``*_token_id`` is None or a token of the vocabulary it is used in.

        transformers' own check only warns (configs of other models on the Hub store ids such as -1); a token id of
        this model outside its vocabulary fails in the embedding or in generation, so here it is an error.
        ``pad_token_id`` pads both the source and the target, the others are target tokens.
        """
        target = "vocab_size" if self.share_encoder_decoder_embeddings else "decoder_vocab_size"
        for name in sorted(name for name in vars(self) if name.endswith("_token_id")):
            value = getattr(self, name)
            if value is None:
                continue
            if name == "pad_token_id" and target != "vocab_size":  # pads the source and the target
                limit, within = min(self.vocab_size, self.decoder_vocab_size), "`vocab_size` and `decoder_vocab_size`"
            else:
                limit, within = getattr(self, target), f"`{target}`"
            for token in value if isinstance(value, list) else [value]:
                if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < limit:
                    raise ValueError(f"`{name}` must be a token id below {within} ({limit}), got {value!r}")

    def validate_layer_settings(self):
        """Part of `@strict` validation: dropout probabilities in [0, 1), a known activation, a usable ``init_std``, a
        known `layer_style`."""
        if self.layer_style not in LAYER_STYLES:
            raise ValueError(
                f"`layer_style` must be one of {', '.join(map(repr, LAYER_STYLES))}, got {self.layer_style!r}"
            )
        for name in PROBABILITY_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ValueError(f"`{name}` must be a probability in [0, 1), got {value!r}")
        if self.activation_function not in ACT2FN:
            raise ValueError(
                f"`activation_function` must be one of transformers' activations ({', '.join(sorted(ACT2FN))}), "
                f"got {self.activation_function!r}"
            )
        init_std = self.init_std
        if isinstance(init_std, bool) or not isinstance(init_std, (int, float)) or not 0.0 < init_std < math.inf:
            raise ValueError(f"`init_std` must be a finite number > 0, got {init_std!r}")

    def validate_no_misspelled_fields(self):
        """Part of `@strict` validation: an unknown keyword close to a field's name is a typo, not extra metadata
        (``alph_init=1.2`` would otherwise be stored and ignored)."""
        known = {option.name for option in fields(self)}
        for name in vars(self):
            if name.startswith("_") or name in known:
                continue
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
            if close:
                raise ValueError(f"unknown field `{name}`: did you mean `{close[0]}`?")

    def validate_output_attentions(self):
        """Part of `@strict` validation: `output_attentions` is a bool, whatever the attention implementation."""
        if not isinstance(self.output_attentions, bool):
            raise ValueError(f"`output_attentions` must be True or False, got {self.output_attentions!r}")


def check_generation_settings(
    settings: Mapping[str, object], config: PreTrainedConfig, where: str, prompt_length: int = 1
) -> None:
    """Refuse generation settings that ``generate`` would fail on for a model of ``config``, deep inside it (a
    ZeroDivisionError for ``num_beams`` 0, an IndexError for a token id past the vocabulary or an output longer than
    the decoder's positions).

    Args:
        settings: The generation settings in effect, by name (``GenerationConfig.to_dict()``, or a call's arguments
            over it); others than those checked are ignored.
        config: The model's config: its target vocabulary (``vocab_size``, or ``decoder_vocab_size`` with separate
            embeddings) and ``max_position_embeddings``.
        where: What the settings come from, at the start of the message (e.g. ``"folder: generation config"``).
        prompt_length: Length of the decoder's prompt (its start token, or the ``decoder_input_ids`` given).

    Raises:
        ValueError: naming ``where``, the setting and its value.
    """
    for name, least in GENERATION_COUNTS.items():
        value = settings.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise ValueError(f"{where}: `{name}` must be an integer >= {least}, got {value!r}")
    shared = getattr(config, "share_encoder_decoder_embeddings", True)
    vocab_size = getattr(config, "vocab_size" if shared else "decoder_vocab_size", None)
    for name in sorted(name for name in settings if name.endswith("_token_id")):
        value = settings[name]
        tokens = value if isinstance(value, (list, tuple)) else [value]
        if (
            vocab_size is not None
            and value is not None
            and not all(
                isinstance(token, int) and not isinstance(token, bool) and 0 <= token < vocab_size for token in tokens
            )
        ):
            raise ValueError(
                f"{where}: `{name}` must be a token id below the vocabulary size {vocab_size}, got {value!r}"
            )
    # As in generate: `max_new_tokens` takes precedence over `max_length`.
    name = "max_new_tokens" if settings.get("max_new_tokens") is not None else "max_length"
    limit = settings.get(name)
    if limit is None:
        return
    total = limit + prompt_length if name == "max_new_tokens" else limit
    if total <= prompt_length:
        raise ValueError(
            f"{where}: `max_length`={limit} leaves no room for a token after the decoder's {prompt_length}-token "
            f"start: it must be at least {prompt_length + 1} (or pass max_new_tokens)"
        )
    positions = position_limit(config)
    if positions is not None and total > positions:
        raise ValueError(
            f"{where}: `{name}`={limit} lets a translation grow to {total} tokens with the decoder's start, but the "
            f"decoder has {positions} positions (max_position_embeddings): pass max_new_tokens <= "
            f"{positions - prompt_length}"
        )


__all__ = [
    "AdaptiveEntmaxMarianConfig",
    "AlphaOptions",
    "AlphaSettings",
    "PositionOptions",
    "ScalingOptions",
    "check_generation_settings",
    "position_limit",
]
