"""AdaptiveEntmaxMarian: Marian with α-entmax attention and a learnable α per head.

Adaptively Sparse Transformers (Correia, Niculae & Martins, 2019) replace softmax attention with
α-entmax and learn α per head, so each head settles between dense (α → 1) and sparse (α = 2).

The model is Marian's encoder–decoder, module for module: the same parameter names (a Marian
checkpoint loads into it) and Marian's own forward passes. What differs:

- every attention module holds ``alpha_logits`` (one per head), or a fixed α from the config;
- attention runs ``entmax_attention_forward`` (also registered with transformers' ``AttentionInterface`` under
  ``ATTENTION_IMPLEMENTATION``, with the mask function it needs), which reads that α;
- optionally: a learned query scaling (ASEntmax, SSMax) and positions inside self-attention (RoPE, ALiBi, NAPE;
  positions.py) instead of Marian's sinusoidal vectors.

The classes below re-declare Marian's constructors so that every attention module is built as an
``AdaptiveEntmaxMarianAttention`` from the start; the attention module writes Marian's forward out (RoPE rotates
between its projection and its cache), the layers' and stacks' forward passes are Marian's.
`AdaptiveEntmaxMarianForCausalLM` is the decoder stack alone, a decoder-only model.

This file is copied to the Hub next to the model, so it needs nothing but torch and transformers.
"""

import json
import math
import os
import re
import shutil
import stat
import sys
from dataclasses import dataclass, fields

import torch
from safetensors import SafetensorError, safe_open
from torch import nn
from transformers import AttentionInterface
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.generation import GenerationMixin
from transformers.masking_utils import AttentionMaskInterface, eager_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutput, CausalLMOutputWithCrossAttentions, Seq2SeqLMOutput
from transformers.models.marian.modeling_marian import (
    MarianAttention,
    MarianDecoder,
    MarianDecoderLayer,
    MarianEncoder,
    MarianEncoderLayer,
    MarianModel,
    MarianMTModel,
    MarianPreTrainedModel,
    MarianSinusoidalPositionalEmbedding,
    shift_tokens_right,
)
from transformers.utils.generic import can_return_tuple
from transformers.utils.output_capturing import OutputRecorder

from .configuration_adaptive_entmax_marian import (
    ATTENTION_TITLES,
    AdaptiveEntmaxMarianConfig,
    AlphaOptions,
    ScalingOptions,
    check_generation_settings,
    position_limit,
)
from .entmax import entmax, is_masked, native_entmax_attention
from .positions import alibi_directions, alibi_slopes, distance_bias, rope_angles, rotate
from .sparsefinder_attention import (
    OperatingPoint,
    PredictedSparsity,
    SparsefinderPredictor,
    apply_predicted_sparsity,
)


ATTENTION_IMPLEMENTATION = "adaptive_entmax"
# Labels with this value are no target token (padding, or positions left out of the loss), as in transformers.
IGNORE_INDEX = -100


def alpha_to_logit(alpha: float) -> float:
    """The ``alpha_logit`` whose ``1 + sigmoid(alpha_logit)`` is ``alpha`` (kept finite at α = 1 and 2)."""
    excess = min(max(alpha - 1.0, 1e-6), 1.0 - 1e-6)
    return math.log(excess / (1.0 - excess))


def asentmax_scale(num_keys: torch.Tensor, beta: torch.Tensor, gamma: torch.Tensor, offset: float) -> torch.Tensor:
    """ASEntmax's factor on a query that may attend to ``num_keys`` keys (n ≥ 1): ``offset + beta · log(n + 1) **
    gamma``, i.e. δ + β_h · log(n + 1)^γ_h per head (the log is positive from n = 1). Broadcasts its arguments, e.g.
    ``(B, 1, Lq, 1)`` keys with ``(1, H, 1, 1)`` β and γ."""
    return offset + beta * torch.log1p(num_keys).pow(gamma)


def target_token_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The translation loss: cross-entropy summed over the target tokens, divided by their number or 1 if none.

    Args:
        logits: ``(batch, target_len, vocab)``.
        labels: ``(batch, target_len)`` token ids, `IGNORE_INDEX` (−100) where there is no target token.

    Returns:
        A scalar: the mean cross-entropy of the target tokens (Marian's loss), and for labels without any target
        token (all −100) 0, whose gradients are zeros, where the mean would be 0 / 0 = NaN.
    """
    labels = labels.to(logits.device)
    total = nn.functional.cross_entropy(
        logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
    )
    # Clamped rather than branched on, so that the forward stays one graph under torch.compile.
    return total / (labels != IGNORE_INDEX).sum().clamp(min=1)


def entmax_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Scaled dot-product attention with α-entmax in place of softmax, one α per head.

    This function prepares the mask, α and the scaled queries; hf_entmax's kernels then run the attention where one
    applies (``native_entmax_attention``: ``hf_entmax.kernels.dispatch`` picks, and says why), and the PyTorch
    operations of `composed_entmax_attention` everywhere else (and without hf_entmax). Every path computes the same
    function up to rounding (the native kernel draws its dropout mask differently, from the same generator), and
    wanted weights are part of the output's autograd graph on every path that returns them.

    Args:
        module: The attention module; its ``alpha()`` gives α per head (a tensor or a float), its
            ``query_scale(mask, key_len, dtype, query_hidden_states)`` the scaling factor of each query
            (softmax_matched's, ASEntmax's or SSMax's; ``None`` without scaling), its ``position_bias`` (optional)
            ALiBi's distance bias, and its ``predicted_sparsity`` (optional) Sparsefinder's graph.
        query: ``(batch, heads, query_len, head_dim)``.
        key, value: ``(batch, heads, key_len, head_dim)``.
        attention_mask: Additive float mask broadcastable to ``(batch, heads, query_len, key_len)``:
            0 keeps a position, the dtype's lowest value masks it. ``None`` masks nothing.
        scaling: Factor applied to the query, ``head_dim ** -0.5`` by default; with query scaling, times the
            module's ``query_scale`` (a factor per head and query).
        dropout: Dropout probability on the attention probabilities, applied in training only.
        kwargs: ``query_start`` (the position of the first query: the tokens already cached),
            ``query_hidden_states`` (the queries' hidden states, for per-token scaling) and ``keys_cached`` (the keys
            are cross-attention's cache, filled at an earlier step: Sparsefinder projects them once) from the module;
            Marian's ``output_attentions`` (or the config's) says whether the weights are wanted.

    Returns:
        ``(output, weights)``: ``output`` is ``(batch, query_len, heads, head_dim)`` and contiguous; ``weights`` is
        ``(batch, heads, query_len, key_len)``: the probabilities, with exact zeros, or in training with dropout the
        weights that multiplied the values (dropped entries 0, the others divided by ``1 − dropout``), which is
        what Marian's eager attention returns. ``None`` from the kernels that never form them (Triton, Sparsefinder's
        gathered pairs), which run only where the weights are not wanted.
    """
    dropout = dropout if module.training else 0.0
    # Scores in float32 even for half-precision models: entmax's threshold needs the precision (float64 stays).
    compute_dtype = torch.promote_types(query.dtype, torch.float32)
    mask = None
    if attention_mask is not None:
        # A half-precision mask's lowest value is not float32's, so it becomes −inf; score + lowest rounds back to
        # lowest for any score below 1e31, which stays masked.
        mask = attention_mask.to(compute_dtype)
        if attention_mask.dtype != compute_dtype:
            mask = mask.masked_fill(is_masked(attention_mask), float("-inf"))
    alpha = module.alpha()
    if isinstance(alpha, torch.Tensor):
        alpha = alpha.view(1, -1, 1, 1)  # (1, H, 1, 1): one α per head
    # α is in [alpha_min, alpha_max] ⊂ [1, 2] by construction (clamped, or validated in the config).
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    query_scale = module.query_scale(
        mask, key.shape[-2], compute_dtype, query_hidden_states=kwargs.get("query_hidden_states")
    )  # None, or (B or 1, H, Lq or 1, 1)
    if query_scale is not None:
        scaling = scaling * query_scale
    scaled_query = query.to(compute_dtype) * scaling  # (B, H, Lq, D)
    config = getattr(module, "config", None)
    weights_wanted = bool(kwargs.get("output_attentions", getattr(config, "output_attentions", False)))
    predicted_sparsity = getattr(module, "predicted_sparsity", None)  # any module with alpha() may call this
    # Sparsefinder's pairs, read off the unscaled queries and the mask (after query_scale, which counts every key the
    # mask allows).
    graph = (
        None
        if predicted_sparsity is None
        else predicted_sparsity.graph(query, key, mask, kwargs.get("query_start", 0), kwargs.get("keys_cached", False))
    )  # (B, H, Lq, Lk) bool, or NearestKeys
    # ALiBi's distance bias joins the additive mask, which every kernel adds to the scores (per head and query): a
    # masked entry stays at or below the mask's floor.
    position_bias = getattr(module, "position_bias", None)
    if position_bias is not None:
        bias = position_bias(kwargs.get("query_start", 0), query.shape[-2], key.shape[-2], compute_dtype, query.device)
        if bias is not None:
            mask = bias if mask is None else mask + bias  # (B or 1, H, Lq, Lk)

    attended = None
    if native_entmax_attention is not None:  # None without hf_entmax (entmax.py imports it)
        attended = native_entmax_attention(scaled_query, key, value, alpha, mask, dropout, weights_wanted, graph)
    if attended is None:
        if graph is not None:
            mask = PredictedSparsity.graph_mask(graph, mask, compute_dtype)
        attended = composed_entmax_attention(scaled_query, key, value, alpha, mask, dropout)
    output, weights = attended
    return output.transpose(1, 2).contiguous(), weights  # (B, Lq, H, D)


def composed_entmax_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    alpha: torch.Tensor | float,
    mask: torch.Tensor | None,
    dropout: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """α-entmax attention of PyTorch operations (the mapping of `entmax`, which takes hf_entmax's kernel where it
    applies).

    Args:
        query: ``(batch, heads, query_len, head_dim)``, already scaled, in the scores' dtype.
        key, value: ``(batch, heads, key_len, head_dim)``.
        alpha: α per head, a float or ``(1, heads, 1, 1)``.
        mask: Additive mask in the query's dtype, broadcastable to ``(batch, heads, query_len, key_len)``, or ``None``.
        dropout: Dropout probability on the probabilities (0: none).

    Returns:
        ``(output, weights)``: ``(batch, heads, query_len, head_dim)`` in the value's dtype and the weights
        ``(batch, heads, query_len, key_len)`` that multiplied the values.
    """
    scores = torch.matmul(query, key.to(query.dtype).transpose(2, 3))
    if mask is not None:
        scores = scores + mask  # (B, H, Lq, Lk)
    probabilities = entmax(scores, alpha, dim=-1, check_alpha=False).to(value.dtype)
    weights = nn.functional.dropout(probabilities, p=dropout, training=dropout > 0.0)
    return torch.matmul(weights, value), weights  # (B, H, Lq, D)


def register_attention() -> None:
    """Make ``ATTENTION_IMPLEMENTATION`` known to transformers (safe to call again).

    The mask interface matters as much as the attention one: without an entry there, Marian's
    layers silently receive ``attention_mask=None`` (no padding mask, no causal mask).
    """
    AttentionInterface.register(ATTENTION_IMPLEMENTATION, entmax_attention_forward)
    AttentionMaskInterface.register(ATTENTION_IMPLEMENTATION, eager_mask)


register_attention()


class AdaptiveEntmaxMarianAttention(MarianAttention):
    """Marian's multi-head attention with one α per head (learned logits, or fixed from the config).

    Projections and key/value caching are Marian's, with RoPE's rotation between them (`forward`); the α-entmax itself
    lives in ``entmax_attention_forward``, which calls ``alpha()``, ``query_scale()`` and ``position_bias()``.
    """

    def __init__(
        self,
        config: AdaptiveEntmaxMarianConfig,
        attention_type: str,
        num_heads: int,
        is_decoder: bool = False,
        is_causal: bool = False,
        layer_idx: int | None = None,
    ):
        super().__init__(
            embed_dim=config.d_model,
            num_heads=num_heads,
            dropout=config.attention_dropout,
            is_decoder=is_decoder,
            is_causal=is_causal,
            config=config,
            layer_idx=layer_idx,
        )
        self.attention_type = attention_type
        self.alpha_settings = config.alpha_settings(attention_type)
        if self.alpha_settings.learn:
            self.alpha_logits = nn.Parameter(torch.zeros(num_heads))
        else:
            self.register_parameter("alpha_logits", None)
        # Positions (positions.py): self-attention rotates (RoPE) or biases (ALiBi, NAPE); so may cross-attention
        # (`cross_attention_positions`), or it has none.
        self.position_type = config.position_embedding_type
        if attention_type == "cross":
            self.position_type = config.cross_attention_positions
        self.rope_theta = float(config.rope_theta)
        self.alibi_slopes = alibi_slopes(self.position_type, num_heads)
        split = attention_type == "encoder_self" and config.encoder_alibi_directions == "split"
        self.alibi_directions = alibi_directions(self.alibi_slopes, split)
        # Query scaling (`query_scale`): ASEntmax's learned temperature (β, γ per head, or from each token), SSMax's
        # s · log n, or softmax_matched's n^(1−α); under NAPE by default on the heads without ALiBi's bias only.
        self.scaling_method = config.scaling_method(attention_type)
        self.scale_offset = float(config.attention_scaling_offset)
        self.scaled_heads = None  # all
        if self.scaling_method != "none" and config.scaled_heads(attention_type) == "nope":
            self.scaled_heads = tuple(slope == 0.0 for slope in self.alibi_slopes)
        for name in ("scale_beta", "scale_gamma"):
            self.register_parameter(name, None)
        self.scale_beta_proj = self.scale_gamma_proj = None
        if self.scaling_method in ("asentmax", "ssmax"):
            self.scale_beta = nn.Parameter(torch.empty(num_heads))
        if self.scaling_method == "asentmax":
            self.scale_gamma = nn.Parameter(torch.empty(num_heads))
        if self.scaling_method == "asentmax_per_token":
            # As the reference: linear maps of each query token's hidden state, with a bias if the config asks.
            bias = config.attention_scaling_projection_bias
            self.scale_beta_proj = nn.Linear(config.d_model, num_heads, bias=bias)
            self.scale_gamma_proj = nn.Linear(config.d_model, num_heads, bias=bias)
        # Sparsefinder's graph for this module (`set_predicted_sparsity`); None attends over every allowed key.
        self.predicted_sparsity = None

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        cache: Cache | None = None,
        attention_mask: torch.Tensor | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Marian's attention, with positions: RoPE rotates the queries and the new keys before the cache keeps the
        keys (in cross-attention with ``cross_attention_positions="rope"``: target queries at their positions, source
        keys from 0); ALiBi's bias (in cross-attention too with "alibi" or "nape") and the query scaling are added by
        `entmax_attention_forward`, which gets the position of the first query (``query_start``) and, for per-token
        scaling, the queries' hidden states.

        Args:
            hidden_states: ``(batch, query_len, d_model)``.
            key_value_states: The encoder's output ``(batch, source_len, d_model)`` for cross-attention, else None.
            cache: The decoder's cache (an ``EncoderDecoderCache``, or a ``DynamicCache`` in the decoder-only model).
            attention_mask: Additive mask ``(batch, 1, query_len, key_len)``, or None.

        Returns:
            ``(output, weights)``: ``(batch, query_len, d_model)`` and as `entmax_attention_forward` returns them.
        """
        is_cross_attention = key_value_states is not None
        input_shape = hidden_states.shape[:-1]
        query = self.q_proj(hidden_states).view(*input_shape, -1, self.head_dim).transpose(1, 2)  # (B, H, Lq, D)
        layer_cache = cache
        if isinstance(cache, EncoderDecoderCache):
            layer_cache = cache.cross_attention_cache if is_cross_attention else cache.self_attention_cache
        # The queries follow the tokens already cached, which is how Marian's decoder numbers its positions.
        query_start = 0
        if layer_cache is not None and not is_cross_attention:
            query_start = layer_cache.get_seq_length(self.layer_idx)
        elif is_cross_attention and isinstance(cache, EncoderDecoderCache):
            # The target positions (of cross-attention's position term, and Sparsefinder's): the layer's
            # self-attention has cached this step's tokens already.
            query_start = cache.self_attention_cache.get_seq_length(self.layer_idx) - input_shape[-1]
        if self.position_type == "rope":
            cos, sin = rope_angles(query, query_start, self.rope_theta)
            query = rotate(query, cos, sin)
        keys_cached = (
            is_cross_attention and isinstance(cache, EncoderDecoderCache) and cache.is_updated.get(self.layer_idx)
        )
        if keys_cached:
            # The encoder's keys and values were cached at the first decoding step.
            key = layer_cache.layers[self.layer_idx].keys
            value = layer_cache.layers[self.layer_idx].values
        else:
            source = key_value_states if is_cross_attention else hidden_states
            source_shape = (*source.shape[:-1], -1, self.head_dim)
            key = self.k_proj(source).view(source_shape).transpose(1, 2)
            value = self.v_proj(source).view(source_shape).transpose(1, 2)
            if self.position_type == "rope":
                # Self-attention's new keys are at the queries' positions; the source's from 0 (its first token).
                key = (
                    rotate(key, *rope_angles(key, 0, self.rope_theta)) if is_cross_attention else rotate(key, cos, sin)
                )
            if layer_cache is not None:
                key, value = layer_cache.update(key, value, self.layer_idx, kwargs=kwargs)
                if is_cross_attention and isinstance(cache, EncoderDecoderCache):
                    cache.is_updated[self.layer_idx] = True
        # Called directly rather than looked up by name: α-entmax is the model, and a copy of this file loaded as
        # remote code in the same process registers its own function under the same name.
        output, weights = entmax_attention_forward(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.dropout if self.training else 0.0,
            scaling=self.scaling,
            query_start=query_start,
            query_hidden_states=hidden_states,
            keys_cached=bool(keys_cached),
            **kwargs,
        )
        output = self.out_proj(output.reshape(*input_shape, -1).contiguous())
        return output, weights

    def initial_alpha_logits(self) -> torch.Tensor:
        """Fresh ``(num_heads,)`` α logits for the configured start: the paper's N(0, 1) for ``"random"`` (α = 1 +
        sigmoid has mean 1.5), else the logit of ``alpha_init`` in every head."""
        if self.alpha_settings.init == "random":
            return torch.randn(self.num_heads)
        return torch.full((self.num_heads,), alpha_to_logit(float(self.alpha_settings.init)))

    @torch.no_grad()
    def reset_alpha_logits(self) -> None:
        """Restart a learned α from the config's ``alpha_init``, overwriting the current (e.g. loaded) logits."""
        if self.alpha_logits is not None:
            self.alpha_logits.copy_(self.initial_alpha_logits())

    @torch.no_grad()
    def init_scaling(self, overwrite: bool = False) -> None:
        """Draw the per-head query-scaling parameters as the reference starts them: ASEntmax's β ~ U(0.1, 1) and
        γ ~ N(0, 0.1²), SSMax's s ~ N(1, 0.01²). (Per-token scaling's maps start as the model's other linear layers.)

        Parameters loaded from a checkpoint are left alone, unless ``overwrite``: a run that changes an attention type
        from SSMax to ASEntmax or back loads SSMax's s as ASEntmax's β (they share a name, not a meaning)."""
        if overwrite:
            for parameter in (self.scale_beta, self.scale_gamma):
                if parameter is not None:
                    parameter._is_hf_initialized = False  # transformers' mark of a loaded weight, which `init` skips
        if self.scaling_method == "asentmax":
            init.uniform_(self.scale_beta, 0.1, 1.0)
            init.normal_(self.scale_gamma, 0.0, 0.1)
        elif self.scaling_method == "ssmax":
            init.normal_(self.scale_beta, 1.0, 0.01)

    def alpha(self) -> torch.Tensor | float:
        """α per head: a ``(num_heads,)`` tensor for a learned α, the configured float for a fixed one."""
        if self.alpha_logits is None:
            return float(self.alpha_settings.init)
        alpha = 1.0 + torch.sigmoid(self.alpha_logits)
        return alpha.clamp(self.alpha_settings.minimum, self.alpha_settings.maximum)

    def query_scale(
        self,
        mask: torch.Tensor | None,
        key_len: int,
        dtype: torch.dtype,
        query_hidden_states: torch.Tensor | None = None,
    ) -> torch.Tensor | None:
        """The factor on each query before α-entmax, for a query that may attend to n keys; ``None`` without scaling.

        - ``"asentmax"``: `asentmax_scale`, ``δ + β_h · log(n + 1) ** γ_h``, a learned temperature per head;
        - ``"asentmax_per_token"``: the same with ``β = softplus(W_β h + b_β)`` and ``γ = 2 · tanh(W_γ h + b_γ)``
          from the query token's hidden state h (ASEntmax's adaptive variant; biases with
          `attention_scaling_projection_bias`);
        - ``"ssmax"``: ``s_h · log(n + 1)``, scalable softmax (`asentmax_scale` with δ = 0 and γ = 1);
        - ``"softmax_matched"``: ``n ** (1 − α_h)``, which makes every head as sharp as softmax at uniform attention
          (why: docs/model.md, "Softmax-matched queries").

        Heads that do not scale (`attention_scaling_heads`, e.g. NAPE's ALiBi heads) get 1.

        n is the number of keys the query may attend to, read from the mask: the real source tokens in encoder
        self-attention and cross-attention, the causal prefix in decoder self-attention (growing by one per step in
        cached decoding). A fully masked (padding) query counts as n = 1.

        Args:
            mask: Additive mask ``(batch, 1, query_len, key_len)`` (0 keeps a key, −inf or the dtype's lowest
                value masks it), or ``None``: every query sees all ``key_len`` keys.
            key_len: Number of keys.
            dtype: Dtype of the result (that of the attention scores).
            query_hidden_states: ``(batch, query_len, d_model)``, the input of the query projection; per-token
                scaling needs it.

        Returns:
            ``(batch or 1, heads or 1, query_len or 1, 1)``, or ``None``.
        """
        if self.scaling_method == "none":
            return None
        if mask is None:
            visible = torch.full((1, 1, 1, 1), float(key_len), dtype=dtype, device=self.k_proj.weight.device)
        else:
            visible = (~is_masked(mask)).sum(-1, keepdim=True).to(dtype)  # (B, 1, Lq, 1)
        visible = visible.clamp(min=1.0)
        if self.scaling_method == "softmax_matched":
            alpha = self.alpha()
            if isinstance(alpha, torch.Tensor):
                alpha = alpha.to(dtype).view(1, -1, 1, 1)
            scale = visible.pow(1.0 - alpha)
        elif self.scaling_method == "asentmax_per_token":
            if query_hidden_states is None:
                raise ValueError("per-token query scaling needs the queries' hidden states (query_hidden_states)")
            # Projected in the model's dtype (its weights'), then in the scores': (B, Lq, H) → (B, H, Lq, 1).
            beta, gamma = (
                projection(query_hidden_states).to(dtype).transpose(1, 2).unsqueeze(-1)
                for projection in (self.scale_beta_proj, self.scale_gamma_proj)
            )
            beta, gamma = nn.functional.softplus(beta), 2.0 * torch.tanh(gamma)
            scale = asentmax_scale(visible, beta, gamma, self.scale_offset)  # (B, H, Lq, 1)
        else:
            beta = self.scale_beta.to(dtype).view(1, -1, 1, 1)
            if self.scaling_method == "ssmax":
                scale = asentmax_scale(visible, beta, torch.ones_like(beta), 0.0)
            else:
                gamma = self.scale_gamma.to(dtype).view(1, -1, 1, 1)
                scale = asentmax_scale(visible, beta, gamma, self.scale_offset)
        if self.scaled_heads is not None:
            scaled = torch.tensor(self.scaled_heads, device=scale.device).view(1, -1, 1, 1)
            scale = torch.where(scaled, scale, torch.ones((), dtype=dtype, device=scale.device))
        return scale

    def position_bias(
        self, query_start: int | torch.Tensor, query_len: int, key_len: int, dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor | None:
        """ALiBi's (or NAPE's) distance bias ``(1, heads, query_len, key_len)`` for queries from position
        ``query_start`` on, or None for positions without one (`positions.distance_bias`)."""
        if self.alibi_slopes is None:
            return None
        return distance_bias(
            self.alibi_slopes, query_start, query_len, key_len, dtype, device, directions=self.alibi_directions
        )


def layer_norm(config: AdaptiveEntmaxMarianConfig) -> nn.Module:
    """The normalisation of the config's `layer_style`: Marian's LayerNorm, or Gemma-2's RMSNorm (ε 1e-6, as Gemma's;
    its weight is Gemma's 1 + w)."""
    if config.layer_style == "gemma2":
        return nn.RMSNorm(config.d_model, eps=1e-6)
    return nn.LayerNorm(config.d_model)


class LayerStyleMixin:
    """What the encoder's and the decoder's layers share beyond Marian's: their sub-layers (attention, cross-attention,
    feed-forward) in the config's `layer_style`, each a residual block around a normalisation.

    - ``"marian"``: ``h = norm(x + f(x))``, after each block (Marian's own forward runs);
    - ``"pre_norm"``: ``h = x + f(norm(x))``, and the stack's output normalised once more (by its last layer);
    - ``"gemma2"``: ``h = x + norm₂(f(norm₁(x)))`` with RMSNorm, a gated feed-forward ``fc2(act(gate) · up)`` (GeGLU
      with ``activation_function="gelu_pytorch_tanh"``, Gemma-2's) and the stack's output normalised once more: the
      layers of ASEntmax's reference (Gemma-2's, which it trains from scratch).

    Each block's norms are ``{block}_layer_norm`` (Marian's names: before the block, or after it in Marian's style) and
    ``{block}_post_norm`` (after the block, Gemma-2's), for blocks ``self_attn``, ``encoder_attn`` and ``final`` (the
    feed-forward, Marian's ``final_layer_norm``).
    """

    def build_sublayers(
        self, config: AdaptiveEntmaxMarianConfig, ffn_dim: int, blocks: tuple[str, ...], last: bool
    ) -> None:
        """The norms of ``blocks``, the feed-forward of width ``ffn_dim`` and, in the ``last`` layer of a
        pre-normalised stack, its closing norm."""
        self.layer_style = config.layer_style
        self.dropout = config.dropout
        self.activation_fn = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout
        self.gated = config.layer_style == "gemma2"
        for block in blocks:
            setattr(self, f"{block}_layer_norm", layer_norm(config))
            if config.layer_style == "gemma2":
                setattr(self, f"{block}_post_norm", layer_norm(config))
        # Gated: fc1 computes the gate and the value side by side.
        self.fc1 = nn.Linear(config.d_model, ffn_dim * (2 if self.gated else 1))
        self.fc2 = nn.Linear(ffn_dim, config.d_model)
        # A pre-normalised stack leaves its residual stream unnormalised: the last layer closes it (as the final norm
        # of pre-norm models), so that the stacks keep Marian's forward.
        self.output_layer_norm = layer_norm(config) if last and config.layer_style != "marian" else None

    def sublayer(self, hidden_states: torch.Tensor, block: str, compute) -> torch.Tensor:
        """One residual block in the layer's style (not Marian's, whose forward is its own): ``compute`` maps
        ``(batch, length, d_model)`` normalised states to the block's output of the same shape."""
        output = compute(getattr(self, f"{block}_layer_norm")(hidden_states))
        post_norm = getattr(self, f"{block}_post_norm", None)
        if post_norm is not None:
            output = post_norm(output)
        return hidden_states + nn.functional.dropout(output, p=self.dropout, training=self.training)

    def feed_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.fc1(hidden_states)
        if self.gated:
            gate, value = hidden_states.chunk(2, dim=-1)
            hidden_states = self.activation_fn(gate) * value
        else:
            hidden_states = self.activation_fn(hidden_states)
        hidden_states = nn.functional.dropout(hidden_states, p=self.activation_dropout, training=self.training)
        return self.fc2(hidden_states)

    def close(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The layer's output: normalised once more in the last layer of a pre-normalised stack."""
        return hidden_states if self.output_layer_norm is None else self.output_layer_norm(hidden_states)


class AdaptiveEntmaxMarianEncoderLayer(LayerStyleMixin, MarianEncoderLayer):
    """Marian's encoder layer with α-entmax self-attention, in the config's `layer_style`."""

    def __init__(self, config: AdaptiveEntmaxMarianConfig, layer_idx: int | None = None):
        GradientCheckpointingLayer.__init__(self)
        self.embed_dim = config.d_model
        self.self_attn = AdaptiveEntmaxMarianAttention(
            config, "encoder_self", config.encoder_attention_heads, layer_idx=layer_idx
        )
        last = layer_idx == config.encoder_layers - 1
        self.build_sublayers(config, config.encoder_ffn_dim, ("self_attn", "final"), last)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor, **kwargs) -> torch.Tensor:
        if self.layer_style == "marian":
            return super().forward(hidden_states, attention_mask, **kwargs)
        hidden_states = self.sublayer(
            hidden_states,
            "self_attn",
            lambda states: self.self_attn(states, attention_mask=attention_mask, **kwargs)[0],
        )
        return self.close(self.sublayer(hidden_states, "final", self.feed_forward))


class AdaptiveEntmaxMarianDecoderLayer(LayerStyleMixin, MarianDecoderLayer):
    """Marian's decoder layer with α-entmax self-attention and cross-attention (self-attention only in a decoder-only
    model), in the config's `layer_style`."""

    def __init__(self, config: AdaptiveEntmaxMarianConfig, layer_idx: int | None = None):
        GradientCheckpointingLayer.__init__(self)
        self.embed_dim = config.d_model
        self.self_attn = AdaptiveEntmaxMarianAttention(
            config,
            "decoder_self",
            config.decoder_attention_heads,
            is_decoder=True,
            is_causal=True,
            layer_idx=layer_idx,
        )
        # The decoder-only model (AdaptiveEntmaxMarianForCausalLM) has no encoder to attend to, and no cross-attention
        # weights; the forward skips the block without encoder states.
        self.encoder_attn = self.encoder_attn_layer_norm = None
        blocks = ("self_attn", "final")
        if config.is_encoder_decoder:
            self.encoder_attn = AdaptiveEntmaxMarianAttention(
                config, "cross", config.decoder_attention_heads, is_decoder=True, layer_idx=layer_idx
            )
            blocks = ("self_attn", "encoder_attn", "final")
        last = layer_idx == config.decoder_layers - 1
        self.build_sublayers(config, config.decoder_ffn_dim, blocks, last)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        use_cache: bool | None = True,
        **kwargs,
    ) -> torch.Tensor:
        if self.layer_style == "marian":
            return super().forward(
                hidden_states,
                attention_mask,
                encoder_hidden_states,
                encoder_attention_mask,
                cache,
                use_cache,
                **kwargs,
            )
        hidden_states = self.sublayer(
            hidden_states,
            "self_attn",
            lambda states: self.self_attn(states, cache=cache, attention_mask=attention_mask, **kwargs)[0],
        )
        if encoder_hidden_states is not None:
            hidden_states = self.sublayer(
                hidden_states,
                "encoder_attn",
                lambda states: self.encoder_attn(
                    states,
                    key_value_states=encoder_hidden_states,
                    attention_mask=encoder_attention_mask,
                    cache=cache,
                    **kwargs,
                )[0],
            )
        return self.close(self.sublayer(hidden_states, "final", self.feed_forward))


# --- the load-time check: the config must fit the weights it loads ----------------------------------------------

# The weights that learned query scaling adds to an attention module (`ScalingOptions`): ASEntmax's β and γ per head
# (SSMax's s is its β), or the linear maps that compute them from each token (per-token ASEntmax, a row and a bias per
# head). Training keeps them out of weight decay, and loading and conversion expect them to appear or go where scaling
# is turned on or off.
PROJECTION_BIASES = ("scale_beta_proj.bias", "scale_gamma_proj.bias")
SCALING_PARAMETERS = ("scale_beta", "scale_gamma", "scale_beta_proj.weight", "scale_gamma_proj.weight")
SCALING_PARAMETERS += PROJECTION_BIASES
# What each attention module learns per head: α logits and the scaling's weights.
PER_HEAD_PARAMETERS = ("alpha_logits", *SCALING_PARAMETERS)
# The scaling methods whose modules hold each learned scaling parameter (SSMax's s is named as ASEntmax's β).
_SCALING_METHODS_HOLDING = {
    "scale_beta": "'asentmax' or 'ssmax'",
    "scale_gamma": "'asentmax'",
    "scale_beta_proj.weight": "'asentmax_per_token'",
    "scale_gamma_proj.weight": "'asentmax_per_token'",
    **dict.fromkeys(PROJECTION_BIASES, "'asentmax_per_token'"),
}
# How far a learned α may lie beyond the config's bounds and still be taken as trained with them. α stops at the
# clamp, but the optimiser's momentum carries its logit on for about ten steps of the α learning rate: a few
# thousandths of α at the rates hf-entmax uses. A bound moved further is a config changed after training.
ALPHA_BOUND_TOLERANCE = 0.05
# The settings a caller may change on purpose when loading weights with a config of its own (`hf-entmax train` fixes,
# restarts or rescales α that way); the other fields describe the architecture the weights were trained with.
ATTENTION_OPTION_DEFAULTS = {
    option.name: option.default for option in (*fields(AlphaOptions), *fields(ScalingOptions))
}
_LAYER_KEY = re.compile(r"^(encoder|decoder)\.layers\.(\d+)\.(?:(self_attn|encoder_attn)\.)?")
_ATTENTION_KINDS = {
    ("encoder", "self_attn"): "encoder_self",
    ("decoder", "self_attn"): "decoder_self",
    ("decoder", "encoder_attn"): "cross",
}


@dataclass
class CheckpointSummary:
    """What the load-time check reads of a checkpoint before its weights load.

    Attributes:
        source: The weights file (or the folder of the shards, or "the state dict"), as messages name it.
        shapes: ``{key: shape}`` of every weight, its key without the ``model.`` prefix.
        per_head: ``{key: (heads,) tensor}`` of the `PER_HEAD_PARAMETERS`; meta tensors (their shape only) for a
            pickled checkpoint, which is not read twice.
        saved_config: The ``config.json`` next to the weights, as a dict, or None.
    """

    source: str
    shapes: dict[str, tuple[int, ...]]
    per_head: dict[str, torch.Tensor]
    saved_config: dict | None


def read_checkpoint(state_dict: dict | None, checkpoint_files: list[str] | None) -> CheckpointSummary | None:
    """The shapes and per-head parameters of the weights ``from_pretrained`` is about to load (safetensors headers
    and the few per-head tensors; nothing else is read), or None for a format it does not know (e.g. GGUF)."""
    tensors: dict[str, torch.Tensor] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    saved_config = None
    if state_dict is not None:
        source, tensors = "the state dict", state_dict
    elif checkpoint_files:
        folder = os.path.dirname(checkpoint_files[0])
        source = checkpoint_files[0] if len(checkpoint_files) == 1 else f"{folder} (its weight shards)"
        for path in checkpoint_files:
            if path.endswith(".safetensors"):
                with safe_open(path, framework="pt") as handle:
                    for key in handle.keys():
                        shapes[key] = tuple(handle.get_slice(key).get_shape())
                        if key.endswith(PER_HEAD_PARAMETERS):
                            tensors[key] = handle.get_tensor(key)
            elif path.endswith(".bin"):
                tensors.update(torch.load(path, map_location="meta", weights_only=True))
            else:
                return None
        config_path = os.path.join(folder, "config.json")
        if os.path.isfile(config_path):
            with open(config_path, encoding="utf-8") as file:
                saved_config = json.load(file)
    else:
        return None
    shapes.update((key, tuple(tensor.shape)) for key, tensor in tensors.items())
    return CheckpointSummary(
        source,
        {_without_model_prefix(key): shape for key, shape in shapes.items()},
        {_without_model_prefix(key): tensor for key, tensor in tensors.items() if key.endswith(PER_HEAD_PARAMETERS)},
        saved_config,
    )


def _without_model_prefix(key: str) -> str:
    # The bare model's keys are those of the translation model without "model.": either loads the other's weights.
    return key.removeprefix("model.")


# The weights that tell layer styles apart (`LayerStyleMixin`): Gemma-2's norms after each block, the stack's closing
# norm of the pre-normalised styles, and LayerNorm's bias, which RMSNorm lacks.
_LAYER_STYLE_KEYS = ("_post_norm.weight", "output_layer_norm.weight", "_layer_norm.bias")


def _has_stack(expected: dict, key: str) -> bool:
    """Whether the model has the layer block that weight ``key`` belongs to (a decoder-only model loading a translation
    model's weights has no encoder and no cross-attention)."""
    block = re.match(r"^((?:encoder|decoder)\.layers\.\d+\.(?:encoder_attn)?)", key)
    return block is None or any(name.startswith(block[1]) for name in expected)


def _size_field(key: str, dim: int, config: AdaptiveEntmaxMarianConfig) -> str:
    """The config field that sets dimension ``dim`` of the weight ``key`` (without the ``model.`` prefix)."""
    stack = "decoder" if key.startswith("decoder.") else "encoder"
    target = "vocab_size" if config.share_encoder_decoder_embeddings else "decoder_vocab_size"
    if dim == 0 and key.endswith(PER_HEAD_PARAMETERS):
        return f"{stack}_attention_heads"
    if dim == 0 and key.endswith("embed_positions.weight"):
        return "max_position_embeddings"
    if dim == 0 and key in ("shared.weight", "encoder.embed_tokens.weight"):
        return "vocab_size"
    if (dim == 0 and key in ("decoder.embed_tokens.weight", "lm_head.weight")) or key == "final_logits_bias":
        return target
    if (dim == 0 and key.endswith((".fc1.weight", ".fc1.bias"))) or (dim == 1 and key.endswith(".fc2.weight")):
        return f"{stack}_ffn_dim"
    return "d_model"


def _setting_field(config: AdaptiveEntmaxMarianConfig, kind: str, name: str) -> str:
    """The field that decides setting ``name`` (``learn_alpha``, ``attention_scaling``) for attention type ``kind``:
    its per-type override if set, else the global one."""
    override = f"{kind}_{name}"
    return override if getattr(config, override) is not None else name


def check_checkpoint_fits(model: nn.Module, checkpoint: CheckpointSummary) -> None:
    """Refuse weights that the model's config does not fit, before they load, with a message naming the field.

    Always: the number of layers and every size the weights record (vocabularies, ``d_model``, FFN sizes, heads,
    positions when the weights hold them), which transformers would otherwise report in a table and load around
    (a missing layer initialised at random, an extra one dropped) or fail on with a size mismatch.

    When the α and query-scaling settings are those of the ``config.json`` saved with the weights (a folder loaded as
    it is, even with a config.json edited since): the learned parameters must fit them too. Learned α logits or
    ASEntmax parameters that the config has no place for (``learn_alpha`` False, scaling turned off) would be
    dropped; non-finite ones (a diverged run) make every head NaN and every translation empty; a learned α beyond
    ``[alpha_min, alpha_max]`` by more than `ALPHA_BOUND_TOLERANCE` would be clamped to a bound it was not trained
    with. A config whose α settings differ from the saved ones is the caller's on purpose (``hf-entmax train`` fixes
    or restarts α that way), and parameters the weights lack start from the config's initialisation, as for a Marian
    checkpoint.

    Raises:
        ValueError: naming the weights, the config field, its value and what the weights hold.
    """
    config = model.config
    where = checkpoint.source
    expected = {_without_model_prefix(key): tuple(tensor.shape) for key, tensor in model.state_dict().items()}
    fix = "restore the config the weights were saved with (or load them with a config that fits)"
    for stack in ("encoder", "decoder"):
        held = {int(match[2]) for key in checkpoint.shapes if (match := _LAYER_KEY.match(key)) and match[1] == stack}
        layers = getattr(config, f"{stack}_layers")
        if held and any(key.startswith(f"{stack}.layers.") for key in expected) and max(held) + 1 != layers:
            raise ValueError(
                f"{where}: the weights hold {max(held) + 1} {stack} layers, but the config's `{stack}_layers` is "
                f"{layers}: {fix}"
            )
    # Layer styles differ in their norms (pre_norm's from marian's only by the stack's closing norm): weights of
    # another style would load around the difference, or fail on the feed-forward's size, naming the wrong field.
    saved_style = (checkpoint.saved_config or {}).get("layer_style", "marian")
    style_keys = {key for key in checkpoint.shapes if key.endswith(_LAYER_STYLE_KEYS) and _has_stack(expected, key)}
    wanted_keys = {key for key in expected if key.endswith(_LAYER_STYLE_KEYS)}
    if saved_style != config.layer_style:
        raise ValueError(
            f"{where}: the weights were saved with layer_style = {saved_style!r}, but the config's `layer_style` is "
            f"{config.layer_style!r}: {fix}"
        )
    if style_keys != wanted_keys:
        key = min(style_keys ^ wanted_keys)
        held = "hold" if key in style_keys else "lack"
        raise ValueError(
            f"{where}: the weights {held} `{key}`, which the config's `layer_style` {config.layer_style!r} does not "
            f"fit: they were saved with another layer style; {fix}"
        )
    for key, shape in checkpoint.shapes.items():
        wanted = expected.get(key)
        if wanted is None or wanted == shape:
            continue
        dims = [dim for dim, (held, size) in enumerate(zip(shape, wanted, strict=False)) if held != size]
        dim = dims[0] if dims else 0
        name = _size_field(key, dim, config)
        held_size = shape[dim] if dim < len(shape) else shape
        raise ValueError(
            f"{where}: the weights were saved with {name} = {held_size} (`{key}` is {tuple(shape)}), but the "
            f"config's `{name}` is {getattr(config, name)}: {fix}"
        )

    saved = checkpoint.saved_config
    if saved is None or any(
        saved.get(name, default) != getattr(config, name) for name, default in ATTENTION_OPTION_DEFAULTS.items()
    ):
        return
    for key, tensor in checkpoint.per_head.items():
        match = _LAYER_KEY.match(key)
        kind = _ATTENTION_KINDS.get((match[1], match[3])) if match else None
        if kind is None:
            continue
        title = ATTENTION_TITLES[kind].lower()
        parameter = next(name for name in PER_HEAD_PARAMETERS if key.endswith(name))
        if key not in expected:
            if parameter == "alpha_logits":
                field = _setting_field(config, kind, "learn_alpha")
                raise ValueError(
                    f"{where}: the weights hold learned α of {title} (`{key}`), but the config's `{field}` is False "
                    f"(α fixed at {config.alpha_settings(kind).init}): loading would drop what was learned; set "
                    f"`{field}` back to True"
                )
            field = _setting_field(config, kind, "attention_scaling")
            if parameter in PROJECTION_BIASES and config.scaling_method(kind) == "asentmax_per_token":
                raise ValueError(
                    f"{where}: the weights hold a bias of per-token ASEntmax's maps in {title} (`{key}`), but the "
                    "config's `attention_scaling_projection_bias` is False: loading would drop it; set it to True"
                )
            methods = _SCALING_METHODS_HOLDING[parameter]
            raise ValueError(
                f"{where}: the weights hold a learned query scaling of {title} (`{key}`), but the config's `{field}` "
                f"is {getattr(config, field)!r}: loading would drop it; set `{field}` back to {methods}"
            )
        if tensor.is_meta:
            continue
        if not torch.isfinite(tensor).all():
            found, effect = (
                ("NaN", f"every head of {title} would compute NaN, and every translation would be empty")
                if tensor.isnan().any()
                else ("infinite values", "no training run leaves those")
            )
            raise ValueError(
                f"{where}: `{key}` holds {found}: {effect}; these weights are damaged (a run that diverged?): load an "
                "earlier checkpoint"
            )
        if parameter != "alpha_logits":
            continue
        settings = config.alpha_settings(kind)
        alpha = 1.0 + torch.sigmoid(tensor.double())
        lowest, highest = float(alpha.min()), float(alpha.max())
        for bound, value, learned, side, advice in (
            ("alpha_min", settings.minimum, lowest, "below", "at most"),
            ("alpha_max", settings.maximum, highest, "above", "at least"),
        ):
            if abs(learned - value) > ALPHA_BOUND_TOLERANCE and (learned < value) == (side == "below"):
                raise ValueError(
                    f"{where}: a learned α of {title} is {learned:.3f} (`{key}`), {side} the config's `{bound}` "
                    f"({value}): loading would clamp it to {value} and change what the model computes; set `{bound}` "
                    f"to {advice} {learned:.3f} (the model was trained with a wider range)"
                )


class AdaptiveEntmaxMarianPreTrainedModel(MarianPreTrainedModel):
    config: AdaptiveEntmaxMarianConfig
    config_class = AdaptiveEntmaxMarianConfig
    base_model_prefix = "model"
    _no_split_modules = ["AdaptiveEntmaxMarianEncoderLayer", "AdaptiveEntmaxMarianDecoderLayer"]
    # Attention always goes through α-entmax; the fused kernels of other implementations are softmax.
    _supports_sdpa = False
    _supports_flash_attn = False
    _supports_flex_attn = False
    # Traced, the Newton iteration runs a fixed number of steps and the native kernel steps aside, so the forward
    # compiles with fullgraph=True, decoding steps with a static cache included (ASEntmax counts each query's keys from
    # the mask, not the cache's length); tests/test_compile_export.py checks it. transformers' tests of compiled and
    # static-cache generation run only on models that declare it.
    _can_compile_fullgraph = True
    # Marian's loss is a mean over the batch's tokens and ignores `num_items_in_batch`: tell Trainer, so that
    # it scales the loss for gradient accumulation itself (and does not rescale it under DDP).
    accepts_loss_kwargs = False

    def _prepare_generated_length(
        self,
        generation_config,
        has_default_max_length,
        has_default_min_length,
        model_input_name,
        input_ids_length,
        inputs_tensor,
    ):
        """`generate`'s lengths, as transformers sets them, except that a model with relative positions (or none) lets
        the default length (the prompt and `max_length`'s 20 tokens) grow past `max_position_embeddings`: transformers
        caps it there, which would refuse a long prompt that such a model takes, as it has no positions to run out of.
        """
        default_max_length = generation_config.max_length
        generation_config = super()._prepare_generated_length(
            generation_config,
            has_default_max_length,
            has_default_min_length,
            model_input_name,
            input_ids_length,
            inputs_tensor,
        )
        if has_default_max_length and generation_config.max_new_tokens is None and position_limit(self.config) is None:
            generation_config.max_length = default_max_length + input_ids_length
        return generation_config

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *args, **kwargs):
        """As ``PreTrainedModel.from_pretrained``, with the checks that keep a folder from loading as another model.

        Before the weights load, `check_checkpoint_fits` refuses a config that does not fit them (layers, sizes and,
        for the folder's own α settings, the learned α and query scaling); after, `check_generation_settings` refuses
        a generation config that `generate` would fail on. A weights file that cannot be read is named in the error.

        Raises:
            ValueError: naming the file or folder, the field and its value.
            OSError: for weights that cannot be read.
        """
        try:
            loaded = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        except SafetensorError as error:  # its message names no file: a cut-off download reads as a riddle
            where = str(pretrained_model_name_or_path)
            if os.path.isdir(where):
                names = sorted(name for name in os.listdir(where) if name.endswith(".safetensors"))
                where = ", ".join(os.path.join(where, name) for name in names) or where
            raise OSError(
                f"{where}: the safetensors weights cannot be read ({error}); the file is cut off or damaged: "
                "download or save it again"
            ) from error
        model = loaded[0] if isinstance(loaded, tuple) else loaded  # (model, loading info) with output_loading_info
        if getattr(model, "generation_config", None) is not None:  # the bare model does not generate
            where = f"{pretrained_model_name_or_path}: generation config"
            check_generation_settings(model.generation_config.to_dict(), model.config, where)
        return loaded

    @staticmethod
    def _load_pretrained_model(model, state_dict, checkpoint_files, *args, **kwargs):
        # transformers' step that reads the checkpoint into the model it has built: the one place where the final
        # config and the weights to load are both known, before any weight loads (and before transformers' report of
        # keys that do not fit).
        checkpoint = read_checkpoint(state_dict, checkpoint_files)
        if checkpoint is not None:
            check_checkpoint_fits(model, checkpoint)
        return MarianPreTrainedModel._load_pretrained_model(model, state_dict, checkpoint_files, *args, **kwargs)

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, AdaptiveEntmaxMarianAttention) and module.alpha_logits is not None:
            # `init.copy_` leaves logits that were loaded from a checkpoint alone.
            init.copy_(module.alpha_logits, module.initial_alpha_logits())
        if isinstance(module, AdaptiveEntmaxMarianAttention):
            module.init_scaling()

    def _check_and_adjust_attn_implementation(self, attn_implementation: str | None, *args, **kwargs) -> str:
        # α-entmax is the model: whatever a caller asks for, attention goes through it.
        return ATTENTION_IMPLEMENTATION

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs) -> None:
        """Save as any model does, plus what lets anyone load the folder without hf_entmax.

        The folder gets this file and its flat companions (config, entmax, positions, Sparsefinder, translation
        pipeline and its sentence ends); for the translation model an ``auto_map`` for ``AutoConfig``,
        ``AutoModel`` and ``AutoModelForSeq2SeqLM``, and a ``custom_pipelines`` entry that makes
        ``pipeline("translation", model=folder, trust_remote_code=True)`` work; for the decoder-only model an
        ``auto_map`` for ``AutoConfig`` and ``AutoModelForCausalLM``. Arguments are those of
        ``PreTrainedModel.save_pretrained``.
        """
        # Imported here: the pipeline's module loads transformers' pipelines and with them every tokenizer backend,
        # which only saving needs, so that importing the model stays light.
        from .pipeline_translation import TranslationPipeline
        from .sentence_ends import SentenceEndsBeforeStop

        os.makedirs(save_directory, exist_ok=True)
        # One object from each flat file that a saved folder needs (copied, with relative imports intact).
        for source in (
            AdaptiveEntmaxMarianConfig,
            AdaptiveEntmaxMarianMTModel,
            entmax,
            rotate,
            apply_predicted_sparsity,
            TranslationPipeline,
            SentenceEndsBeforeStop,
        ):
            shutil.copy(sys.modules[source.__module__].__file__, save_directory)
        if self.config.is_encoder_decoder:
            self.config.auto_map = {
                "AutoConfig": _class_reference(AdaptiveEntmaxMarianConfig),
                "AutoModel": _class_reference(AdaptiveEntmaxMarianModel),
                "AutoModelForSeq2SeqLM": _class_reference(AdaptiveEntmaxMarianMTModel),
            }
            self.config.custom_pipelines = {
                "translation": {
                    "impl": _class_reference(TranslationPipeline),
                    "pt": ["AutoModelForSeq2SeqLM"],
                    "type": "text",
                }
            }
        else:  # the decoder-only model: transformers' own "text-generation" pipeline serves it
            self.config.auto_map = {
                "AutoConfig": _class_reference(AdaptiveEntmaxMarianConfig),
                "AutoModelForCausalLM": _class_reference(AdaptiveEntmaxMarianForCausalLM),
            }
        weights_before = _safetensors_files(save_directory)
        super().save_pretrained(save_directory, *args, **kwargs)
        # safetensors 0.8 writes through a private temporary file (mode 0600, safetensors#782): the weights would be
        # unreadable to the users who can read the rest of the folder. Each file written now gets the mode a plain
        # write gives it: the replaced file's, or a new file's under the umask.
        for name, written in _safetensors_files(save_directory).items():
            before = weights_before.get(name)
            if before is None or before.st_ino != written.st_ino:
                mode = plain_file_mode() if before is None else stat.S_IMODE(before.st_mode)
                os.chmod(os.path.join(save_directory, name), mode)

    def set_predicted_sparsity(
        self,
        settings: str | OperatingPoint | list | dict | None = None,
        predictor: SparsefinderPredictor | str | os.PathLike | None = None,
    ) -> dict[str, OperatingPoint]:
        """Attend only over the query–key pairs a Sparsefinder predictor predicts (``None``: over all of them again).

        ``model.set_predicted_sparsity("distance:threshold=1.5,window=2")`` restricts every attention type the
        predictor in the model's folder (``sparsefinder.safetensors``, written by ``hf-entmax sparsefinder``) has;
        ``{"cross": "clustering:clusters=4", "decoder_self": "window:size=3"}`` sets each type. Entmax then runs
        over the predicted keys only (the others get exactly zero); a query with none of its keys predicted
        attends over all of them. See ``sparsefinder_attention.py`` for the methods and the spec.

        Args:
            settings: A spec, an ``OperatingPoint``, a ``{attention_type: spec}`` dict, a list of
                ``[TYPE=]SPEC`` strings, or ``None``.
            predictor: A ``SparsefinderPredictor``, its file, or a folder / Hub id with ``sparsefinder.safetensors``
                (default: this model's own, loaded on demand).

        Returns:
            ``{attention_type: OperatingPoint}`` now in use.
        """
        return apply_predicted_sparsity(self, settings, predictor)

    def get_alphas(self) -> dict[str, torch.Tensor]:
        """Current α of every head.

        Returns:
            ``{"encoder_self": (encoder_layers, heads), "decoder_self": (decoder_layers, heads),
            "cross": (decoder_layers, heads)}``, detached float32 tensors on the CPU.
        """
        by_type: dict[str, list[torch.Tensor]] = {"encoder_self": [], "decoder_self": [], "cross": []}
        for module in self.modules():
            if isinstance(module, AdaptiveEntmaxMarianAttention):
                alpha = module.alpha()
                if not isinstance(alpha, torch.Tensor):
                    alpha = torch.full((module.num_heads,), alpha)
                by_type[module.attention_type].append(alpha.detach().float().cpu())
        return {kind: torch.stack(alphas) for kind, alphas in by_type.items() if alphas}

    def get_attention_scales(self) -> dict[str, dict[str, torch.Tensor | float | str]]:
        """Current learned per-head query-scaling parameters (ASEntmax's β and γ, SSMax's s) of every attention type.

        Returns:
            ``{attention_type: {"method": "asentmax" or "ssmax", "beta": (layers, heads), "gamma": (layers, heads),
            "offset": δ, "scaled": (layers, heads) bool}}`` with detached float32 tensors on the CPU: a scaled head
            multiplies a query that may attend to n keys by ``offset + beta * log(n + 1) ** gamma`` (SSMax: β = s,
            γ = 1, δ = 0), a head whose ``scaled`` is False (NAPE's ALiBi heads by default) by 1. Attention types
            without per-head parameters (no scaling, softmax_matched, per-token ASEntmax, whose β and γ come from each
            token) are absent (``{}`` for a model without any).
        """
        by_type: dict[str, dict[str, list]] = {}
        for module in self.modules():
            if not isinstance(module, AdaptiveEntmaxMarianAttention) or module.scaling_method not in (
                "asentmax",
                "ssmax",
            ):
                continue
            scales = by_type.setdefault(
                module.attention_type,
                {"method": module.scaling_method, "beta": [], "gamma": [], "offset": [], "scaled": []},
            )
            beta = module.scale_beta.detach().float().cpu()
            asentmax = module.scaling_method == "asentmax"
            scales["beta"].append(beta)
            scales["gamma"].append(module.scale_gamma.detach().float().cpu() if asentmax else torch.ones_like(beta))
            scales["offset"].append(module.scale_offset if asentmax else 0.0)
            scaled = module.scaled_heads
            scales["scaled"].append(
                torch.ones_like(beta, dtype=torch.bool) if scaled is None else torch.tensor(scaled)
            )
        return {
            kind: {
                "method": scales["method"],
                "beta": torch.stack(scales["beta"]),
                "gamma": torch.stack(scales["gamma"]),
                "offset": scales["offset"][0],
                "scaled": torch.stack(scales["scaled"]),
            }
            for kind, scales in by_type.items()
        }


class NoAbsolutePositions(nn.Module):
    """What Marian's stacks add to the token embeddings as positions (``embed_positions``) when positions act inside
    self-attention instead (RoPE, ALiBi, NAPE) or nowhere: nothing."""

    def forward(self, *args, **kwargs) -> float:
        return 0.0


def _build_stack(
    stack: nn.Module, config: AdaptiveEntmaxMarianConfig, vocab_size: int, layers: list[nn.Module], layerdrop: float
) -> None:
    """Give an encoder or decoder its embeddings and layers, under the names Marian's forward reads."""
    stack.dropout = config.dropout
    stack.layerdrop = layerdrop
    stack.padding_idx = config.pad_token_id
    stack.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
    stack.embed_tokens = nn.Embedding(vocab_size, config.d_model, stack.padding_idx)
    if config.has_absolute_positions():
        stack.embed_positions = MarianSinusoidalPositionalEmbedding(
            config.max_position_embeddings, config.d_model, stack.padding_idx
        )
    else:
        stack.embed_positions = NoAbsolutePositions()
    stack.layers = nn.ModuleList(layers)
    stack.gradient_checkpointing = False


class AdaptiveEntmaxMarianEncoder(AdaptiveEntmaxMarianPreTrainedModel, MarianEncoder):
    """Marian's encoder built from α-entmax layers."""

    _can_record_outputs = {
        "hidden_states": AdaptiveEntmaxMarianEncoderLayer,
        "attentions": AdaptiveEntmaxMarianAttention,
    }

    def __init__(self, config: AdaptiveEntmaxMarianConfig):
        MarianPreTrainedModel.__init__(self, config)
        self.max_source_positions = config.max_position_embeddings
        layers = [AdaptiveEntmaxMarianEncoderLayer(config, layer_idx=i) for i in range(config.encoder_layers)]
        _build_stack(self, config, config.vocab_size, layers, config.encoder_layerdrop)
        self.post_init()


class AdaptiveEntmaxMarianDecoder(AdaptiveEntmaxMarianPreTrainedModel, MarianDecoder):
    """Marian's decoder built from α-entmax layers."""

    _can_record_outputs = {
        "hidden_states": AdaptiveEntmaxMarianDecoderLayer,
        "attentions": OutputRecorder(AdaptiveEntmaxMarianAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(AdaptiveEntmaxMarianAttention, index=1, layer_name="encoder_attn"),
    }

    def __init__(self, config: AdaptiveEntmaxMarianConfig):
        MarianPreTrainedModel.__init__(self, config)
        self.max_target_positions = config.max_position_embeddings
        layers = [AdaptiveEntmaxMarianDecoderLayer(config, layer_idx=i) for i in range(config.decoder_layers)]
        _build_stack(self, config, config.decoder_vocab_size, layers, config.decoder_layerdrop)
        self.post_init()


class AdaptiveEntmaxMarianModel(AdaptiveEntmaxMarianPreTrainedModel, MarianModel):
    """The bare AdaptiveEntmaxMarian encoder–decoder, outputting the decoder's hidden states."""

    def __init__(self, config: AdaptiveEntmaxMarianConfig):
        MarianPreTrainedModel.__init__(self, config)
        if config.share_encoder_decoder_embeddings:
            self.shared = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
            self._tied_weights_keys = {
                "decoder.embed_tokens.weight": "shared.weight",
                "encoder.embed_tokens.weight": "shared.weight",
            }
        else:
            self._tied_weights_keys = None
        self.encoder = AdaptiveEntmaxMarianEncoder(config)
        self.decoder = AdaptiveEntmaxMarianDecoder(config)
        self.post_init()


class AdaptiveEntmaxMarianMTModel(AdaptiveEntmaxMarianPreTrainedModel, MarianMTModel):
    """AdaptiveEntmaxMarian with a language-modelling head, for translation (like `MarianMTModel`)."""

    def __init__(self, config: AdaptiveEntmaxMarianConfig):
        MarianPreTrainedModel.__init__(self, config)
        self.model = AdaptiveEntmaxMarianModel(config)
        if config.share_encoder_decoder_embeddings:
            self._tied_weights_keys = {
                "lm_head.weight": "model.shared.weight",
                "model.decoder.embed_tokens.weight": "model.shared.weight",
                "model.encoder.embed_tokens.weight": "model.shared.weight",
            }
        target_vocab_size = config.vocab_size if config.share_encoder_decoder_embeddings else config.decoder_vocab_size
        self.final_logits_bias = nn.Buffer(torch.zeros((1, target_vocab_size)))
        self.lm_head = nn.Linear(config.d_model, target_vocab_size, bias=False)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple[torch.Tensor] | BaseModelOutput | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        """`MarianMTModel.forward`, with the loss of `target_token_loss`: the mean cross-entropy of the target tokens
        (labels other than −100), and 0 with zero gradients for labels without any, where Marian's mean is NaN.

        Shapes as Marian's: ``input_ids`` ``(batch, source_len)``, ``labels`` ``(batch, target_len)``, ``logits``
        ``(batch, target_len, vocab)``.
        """
        if labels is not None:
            # As Marian: teacher forcing on the labels shifted right, and no cache to fill.
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = shift_tokens_right(
                    labels, self.config.pad_token_id, self.config.decoder_start_token_id
                )
        # A cache passed under its old name (past_key_values) stays in kwargs for Marian to rename.
        cache_kwargs = {} if cache is None else {"cache": cache}
        outputs = super().forward(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            return_dict=True,
            **cache_kwargs,
            **kwargs,
        )
        if labels is None:
            return outputs
        return Seq2SeqLMOutput(loss=target_token_loss(outputs.logits, labels), **outputs)

    @staticmethod
    def _reorder_cache(cache: Cache, beam_idx: torch.LongTensor) -> Cache:
        """Beam search's reordering of the cache (``beam_idx``: ``(batch · beams,)``), of the decoder's self-attention
        only.

        Beam search moves beams only among the beams of one input (``beam_idx`` adds each input's offset), and
        cross-attention's cache holds the encoder's states repeated for each beam of an input, the same in every beam
        of it: transformers' default reorders them too, a copy of the whole source cache at every step that changes
        nothing (a fifth of beam search's time on 117-token inputs). Kept as they are, they also stay the same
        tensors, so Sparsefinder projects an input's source keys once.
        """
        if isinstance(cache, EncoderDecoderCache):
            cache.self_attention_cache.reorder_cache(beam_idx)
        else:
            cache.reorder_cache(beam_idx)
        return cache


class AdaptiveEntmaxMarianDecoderWrapper(AdaptiveEntmaxMarianPreTrainedModel):
    """The decoder under the name ``decoder``, so that the decoder-only model's weights are ``model.decoder.*`` as in
    the translation model and in `MarianForCausalLM`."""

    def __init__(self, config: AdaptiveEntmaxMarianConfig):
        MarianPreTrainedModel.__init__(self, config)
        self.decoder = AdaptiveEntmaxMarianDecoder(config)
        self.post_init()

    def forward(self, *args, **kwargs):
        return self.decoder(*args, **kwargs)


class AdaptiveEntmaxMarianForCausalLM(AdaptiveEntmaxMarianPreTrainedModel, GenerationMixin):
    """AdaptiveEntmaxMarian's decoder alone with a language-modelling head: a decoder-only model (like
    `MarianForCausalLM`), with α-entmax self-attention and the same α, query scaling and position options.

    It reads the config's decoder fields (``decoder_layers``, ``decoder_attention_heads``, ``decoder_ffn_dim``,
    ``decoder_vocab_size``, the ``decoder_self_*`` α and scaling settings) and sets ``is_decoder=True``,
    ``is_encoder_decoder=False``, and the encoder's layer and head counts to the decoder's. Sequence-to-sequence
    tasks are one sequence, e.g. ``<bos> source <sep> target <eos>``, with the loss on the target (labels −100
    elsewhere), as ASEntmax's reference trains its synthetic tasks.

    Unlike `MarianForCausalLM`, labels are the inputs themselves, shifted inside the model (the convention of GPT-2
    and Llama, which transformers' language-modelling collators follow): ``labels[:, t]`` is predicted at ``t − 1``.
    """

    _tied_weights_keys = {"lm_head.weight": "model.decoder.embed_tokens.weight"}

    def __init__(self, config: AdaptiveEntmaxMarianConfig):
        config.is_decoder = True
        config.is_encoder_decoder = False
        # transformers reads a Marian config's `num_hidden_layers` and `num_attention_heads` from its encoder fields
        # (to size caches, e.g.); there is no encoder here, so they take the decoder's sizes.
        config.encoder_layers = config.decoder_layers
        config.encoder_attention_heads = config.decoder_attention_heads
        if config.cross_attention_positions != "none":
            raise ValueError(
                f"`cross_attention_positions`={config.cross_attention_positions!r} positions cross-attention, which a "
                "decoder-only model does not have: leave it 'none'"
            )
        MarianPreTrainedModel.__init__(self, config)
        self.model = AdaptiveEntmaxMarianDecoderWrapper(config)
        self.lm_head = nn.Linear(config.d_model, config.decoder_vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.decoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.decoder.embed_tokens = value

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> CausalLMOutputWithCrossAttentions:
        """Next-token logits of every position (or of the last ``logits_to_keep``), and with ``labels`` the loss.

        Args:
            input_ids: ``(batch, length)`` token ids (padded on the left for batched generation).
            attention_mask: ``(batch, length)``, 1 for tokens and 0 for padding (with a cache: of the whole sequence).
            cache: The key/value cache of earlier steps (a ``DynamicCache``), when decoding one token at a time.
            labels: ``(batch, length)``: the inputs, −100 where no prediction counts (a task's prompt, padding).
                The logits at position t − 1 are scored against ``labels[:, t]``.
            logits_to_keep: Keep the logits of the last this many positions only (0: all).

        Returns:
            ``logits`` ``(batch, length or logits_to_keep, vocab)``; ``loss``: the mean cross-entropy of the label
            tokens (`target_token_loss`: 0 with zero gradients for labels without any).
        """
        if labels is not None:
            use_cache = False
        cache_kwargs = {} if cache is None else {"cache": cache}
        outputs = self.model.decoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **cache_kwargs,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        if isinstance(logits_to_keep, int) and logits_to_keep > 0:
            hidden_states = hidden_states[:, -logits_to_keep:]
        elif isinstance(logits_to_keep, torch.Tensor):
            hidden_states = hidden_states[:, logits_to_keep]
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            loss = target_token_loss(logits[:, :-1], labels[:, 1:])
        return CausalLMOutputWithCrossAttentions(
            loss=loss,
            logits=logits,
            cache=outputs.cache,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


def plain_file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: 0666 less the process' umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _safetensors_files(folder: str | os.PathLike) -> dict[str, os.stat_result]:
    """``{name: stat}`` of the ``*.safetensors`` files directly in ``folder``."""
    with os.scandir(folder) as entries:
        return {entry.name: entry.stat() for entry in entries if entry.name.endswith(".safetensors")}


def _class_reference(cls: type) -> str:
    """``"module.Class"`` as config.json's ``auto_map`` names a class in a flat remote-code folder."""
    return f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"


__all__ = [
    "PROJECTION_BIASES",
    "SCALING_PARAMETERS",
    "AdaptiveEntmaxMarianAttention",
    "AdaptiveEntmaxMarianForCausalLM",
    "AdaptiveEntmaxMarianMTModel",
    "AdaptiveEntmaxMarianModel",
    "AdaptiveEntmaxMarianPreTrainedModel",
    "asentmax_scale",
    "composed_entmax_attention",
    "entmax_attention_forward",
]
