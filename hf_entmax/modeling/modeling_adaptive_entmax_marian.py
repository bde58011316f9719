"""AdaptiveEntmaxMarian: Marian with α-entmax attention and a learnable α per head.

Adaptively Sparse Transformers (Correia, Niculae & Martins, 2019) replace softmax attention with
α-entmax and learn α per head, so each head settles between dense (α → 1) and sparse (α = 2).

The model is Marian's encoder–decoder, module for module: the same parameter names (a Marian
checkpoint loads into it) and Marian's own forward passes. Two things differ:

- every attention module holds ``alpha_logits`` (one per head), or a fixed α from the config;
- attention is dispatched to ``entmax_attention_forward``, registered with transformers'
  ``AttentionInterface`` under ``ATTENTION_IMPLEMENTATION``, which reads that α.

The classes below re-declare Marian's constructors so that every attention module is built as an
``AdaptiveEntmaxMarianAttention`` from the start; their forward passes are Marian's.

This file is copied to the Hub next to the model, so it needs nothing but torch and transformers.
"""

import math
import os
import shutil
import sys

import torch
from safetensors import SafetensorError
from torch import nn
from transformers import AttentionInterface
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.masking_utils import AttentionMaskInterface, eager_mask
from transformers.modeling_layers import GradientCheckpointingLayer
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
)
from transformers.utils.output_capturing import OutputRecorder

from .configuration_adaptive_entmax_marian import AdaptiveEntmaxMarianConfig
from .entmax import entmax
from .sparsefinder_attention import OperatingPoint, SparsefinderPredictor, apply_predicted_sparsity


try:  # With hf_entmax installed, CPU attention runs fused in its native kernel; this file alone composes it below.
    from hf_entmax.kernels.cpu import native_entmax_attention
except ImportError:
    native_entmax_attention = None
try:  # And CUDA attention in its Triton kernel, which HF_ENTMAX_TRITON=1 turns on.
    from hf_entmax.kernels.gpu import triton_entmax_attention
except ImportError:
    triton_entmax_attention = None


ATTENTION_IMPLEMENTATION = "adaptive_entmax"


def alpha_to_logit(alpha: float) -> float:
    """The ``alpha_logit`` whose ``1 + sigmoid(alpha_logit)`` is ``alpha`` (kept finite at α = 1 and 2)."""
    excess = min(max(alpha - 1.0, 1e-6), 1.0 - 1e-6)
    return math.log(excess / (1.0 - excess))


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

    Args:
        module: The attention module; its ``alpha()`` gives α per head (a tensor or a float) and its
            ``query_scale(mask, key_len, dtype)`` the scaling factor of each query (softmax_matched's or ASEntmax's;
            ``None`` without scaling).
        query: ``(batch, heads, query_len, head_dim)``.
        key, value: ``(batch, heads, key_len, head_dim)``.
        attention_mask: Additive float mask broadcastable to ``(batch, heads, query_len, key_len)``:
            0 keeps a position, the dtype's lowest value masks it. ``None`` masks nothing.
        scaling: Factor applied to the query, ``head_dim ** -0.5`` by default; with query scaling, times the
            module's ``query_scale`` (a factor per head and query).
        dropout: Dropout probability on the attention probabilities, applied in training only.
        kwargs: Marian's; ``output_attentions`` (or the config's) says whether the weights are wanted.

    Returns:
        ``(output, weights)``: ``output`` is ``(batch, query_len, heads, head_dim)`` and contiguous; ``weights`` is
        ``(batch, heads, query_len, key_len)``: the probabilities, with exact zeros, or in training with dropout the
        weights that multiplied the values (dropped entries 0, the others divided by ``1 − dropout``), which is
        what Marian's eager attention returns. ``None`` from the Triton kernel and from Sparsefinder's gathered
        attention, which never form them.

    With hf_entmax installed, float32/float64 CPU attention runs fused in its native kernel
    (``native_entmax_attention``, dropout included), equal to the composed operations below up to float32 rounding
    (its dropout mask is drawn differently, from the same generator); and with ``HF_ENTMAX_TRITON=1``, CUDA attention
    without dropout whose weights are not wanted runs in the Triton kernel (``triton_entmax_attention``). With a
    Sparsefinder graph (``module.predicted_sparsity``), attention runs over the graph's pairs only: gathered where
    hf_entmax's kernel does it and it pays (``PredictedSparsity.attend``), else with the other pairs masked.
    """
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    dropout = dropout if module.training else 0.0
    # Scores in float32 even for half-precision models: entmax's threshold needs the precision (float64 stays).
    compute_dtype = torch.promote_types(query.dtype, torch.float32)
    mask = None
    if attention_mask is not None:
        # entmax treats −inf and the dtype's lowest value as masked (exact zeros, and zeros for a fully masked row);
        # score + lowest rounds back to lowest for any score below 1e31. A half-precision mask's lowest value is not
        # float32's, so it becomes −inf.
        mask = attention_mask.to(compute_dtype)
        if attention_mask.dtype != compute_dtype:
            mask = mask.masked_fill(attention_mask <= torch.finfo(attention_mask.dtype).min, float("-inf"))
    alpha = module.alpha()
    if isinstance(alpha, torch.Tensor):
        alpha = alpha.view(1, -1, 1, 1)  # (1, H, 1, 1): one α per head
    # α is in [alpha_min, alpha_max] ⊂ [1, 2] by construction (clamped, or validated in the config).
    query_scale = module.query_scale(mask, key.shape[-2], compute_dtype)  # None, or (B or 1, H, Lq or 1, 1)
    if query_scale is not None:
        scaling = scaling * query_scale
    config = getattr(module, "config", None)
    weights_wanted = bool(kwargs.get("output_attentions", getattr(config, "output_attentions", False)))
    predicted_sparsity = getattr(module, "predicted_sparsity", None)  # any module with alpha() may call this
    if predicted_sparsity is not None:
        # Sparsefinder, after query_scale (which counts the allowed keys): attention over the predicted pairs only,
        # gathered by hf_entmax's kernel where that pays (it forms no weights: None), else with the others masked.
        gathered, mask = predicted_sparsity.attend(
            query, scaling, key, value, alpha, mask, compute_dtype, dropout, weights_wanted
        )
        if gathered is not None:
            return gathered.transpose(1, 2).contiguous(), None  # (B, Lq, H, D)

    fused = None  # each kernel returns None where it does not apply, and says why (hf_entmax.kernels.describe())
    if native_entmax_attention is not None and query.device.type == "cpu":
        fused = native_entmax_attention(query * scaling, key, value, alpha, mask, dropout)
    elif triton_entmax_attention is not None:
        # A half-precision query stays in its dtype (query scaling is float32): the kernel takes q, k, v alike.
        scaled = (query * scaling).to(query.dtype)
        fused = triton_entmax_attention(scaled, key, value, alpha, mask, dropout, weights_wanted)
    if fused is not None:
        output, weights = fused
    else:
        scores = torch.matmul(query.to(compute_dtype) * scaling, key.to(compute_dtype).transpose(2, 3))
        if mask is not None:
            scores = scores + mask  # (B, H, Lq, Lk)
        probabilities = entmax(scores, alpha, dim=-1, check_alpha=False).to(value.dtype)
        weights = nn.functional.dropout(probabilities, p=dropout, training=dropout > 0.0)
        output = torch.matmul(weights, value)  # (B, H, Lq, D)
    return output.transpose(1, 2).contiguous(), weights  # (B, Lq, H, D)


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

    Projections, key/value caching and dispatch are Marian's; the α-entmax itself lives in
    ``entmax_attention_forward``, which calls ``alpha()``.
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
        # Query scaling (`query_scale`): ASEntmax's learned temperature per head (β, γ), or softmax_matched's n^(1−α).
        self.scaling_method = config.scaling_method(attention_type)
        self.scale_offset = float(config.attention_scaling_offset)
        if config.has_learned_scaling(attention_type):
            self.scale_beta = nn.Parameter(torch.empty(num_heads))
            self.scale_gamma = nn.Parameter(torch.empty(num_heads))
        else:
            self.register_parameter("scale_beta", None)
            self.register_parameter("scale_gamma", None)
        # Sparsefinder's graph for this module (`set_predicted_sparsity`); None attends over every allowed key.
        self.predicted_sparsity = None

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

    def alpha(self) -> torch.Tensor | float:
        """α per head: a ``(num_heads,)`` tensor for a learned α, the configured float for a fixed one."""
        if self.alpha_logits is None:
            return float(self.alpha_settings.init)
        alpha = 1.0 + torch.sigmoid(self.alpha_logits)
        return alpha.clamp(self.alpha_settings.minimum, self.alpha_settings.maximum)

    def query_scale(self, mask: torch.Tensor | None, key_len: int, dtype: torch.dtype) -> torch.Tensor | None:
        """The factor on each query before α-entmax, for a query that may attend to n keys; ``None`` without scaling.

        - ``"asentmax"``: ``δ + β_h · log(n + 1) ** γ_h``, a learned temperature per head.
        - ``"softmax_matched"``: ``n ** (1 − α_h)``. Near uniform attention, α-entmax over n keys is n^(α−1) times as
          sharp as softmax on the same scores (its Jacobian there is ``diag(p^(2−α))`` − …, at p = 1/n); the factor
          undoes that, so that every head starts as sharp as softmax whatever its α and the input's length, and α
          shapes how weights fall to zero rather than the temperature.

        n is the number of keys the query may attend to, read from the mask: the real source tokens in encoder
        self-attention and cross-attention, the causal prefix in decoder self-attention (growing by one per step in
        cached decoding). A fully masked (padding) query counts as n = 1.

        Args:
            mask: Additive mask ``(batch, 1, query_len, key_len)`` (0 keeps a key, −inf or the dtype's lowest
                value masks it), or ``None``: every query sees all ``key_len`` keys.
            key_len: Number of keys.
            dtype: Dtype of the result (that of the attention scores).

        Returns:
            ``(batch or 1, heads or 1, query_len or 1, 1)``, or ``None``.
        """
        if self.scaling_method == "none":
            return None
        if mask is None:
            visible = torch.full((1, 1, 1, 1), float(key_len), dtype=dtype, device=self.k_proj.weight.device)
        else:
            visible = (mask > torch.finfo(mask.dtype).min).sum(-1, keepdim=True).to(dtype)  # (B, 1, Lq, 1)
        visible = visible.clamp(min=1.0)
        if self.scaling_method == "softmax_matched":
            alpha = self.alpha()
            if isinstance(alpha, torch.Tensor):
                alpha = alpha.to(dtype).view(1, -1, 1, 1)
            return visible.pow(1.0 - alpha)
        beta, gamma = (parameter.to(dtype).view(1, -1, 1, 1) for parameter in (self.scale_beta, self.scale_gamma))
        return self.scale_offset + beta * torch.log1p(visible).pow(gamma)


class AdaptiveEntmaxMarianEncoderLayer(MarianEncoderLayer):
    """Marian's encoder layer with α-entmax self-attention."""

    def __init__(self, config: AdaptiveEntmaxMarianConfig, layer_idx: int | None = None):
        GradientCheckpointingLayer.__init__(self)
        self.embed_dim = config.d_model
        self.self_attn = AdaptiveEntmaxMarianAttention(
            config, "encoder_self", config.encoder_attention_heads, layer_idx=layer_idx
        )
        self.self_attn_layer_norm = nn.LayerNorm(self.embed_dim)
        self.dropout = config.dropout
        self.activation_fn = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout
        self.fc1 = nn.Linear(self.embed_dim, config.encoder_ffn_dim)
        self.fc2 = nn.Linear(config.encoder_ffn_dim, self.embed_dim)
        self.final_layer_norm = nn.LayerNorm(self.embed_dim)


class AdaptiveEntmaxMarianDecoderLayer(MarianDecoderLayer):
    """Marian's decoder layer with α-entmax self-attention and cross-attention."""

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
        self.dropout = config.dropout
        self.activation_fn = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout
        self.self_attn_layer_norm = nn.LayerNorm(self.embed_dim)
        self.encoder_attn = AdaptiveEntmaxMarianAttention(
            config, "cross", config.decoder_attention_heads, is_decoder=True, layer_idx=layer_idx
        )
        self.encoder_attn_layer_norm = nn.LayerNorm(self.embed_dim)
        self.fc1 = nn.Linear(self.embed_dim, config.decoder_ffn_dim)
        self.fc2 = nn.Linear(config.decoder_ffn_dim, self.embed_dim)
        self.final_layer_norm = nn.LayerNorm(self.embed_dim)


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

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *args, **kwargs):
        """As ``PreTrainedModel.from_pretrained``; a weights file that cannot be read is named in the error."""
        try:
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        except SafetensorError as error:  # its message names no file: a cut-off download reads as a riddle
            where = str(pretrained_model_name_or_path)
            if os.path.isdir(where):
                names = sorted(name for name in os.listdir(where) if name.endswith(".safetensors"))
                where = ", ".join(os.path.join(where, name) for name in names) or where
            raise OSError(
                f"{where}: the safetensors weights cannot be read ({error}); the file is cut off or damaged: "
                "download or save it again"
            ) from error

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, AdaptiveEntmaxMarianAttention) and module.alpha_logits is not None:
            # `init.copy_` leaves logits that were loaded from a checkpoint alone.
            init.copy_(module.alpha_logits, module.initial_alpha_logits())
        if isinstance(module, AdaptiveEntmaxMarianAttention) and module.scale_beta is not None:
            # ASEntmax's reference start: β ~ U(0.1, 1), γ ~ N(0, 0.1²).
            init.uniform_(module.scale_beta, 0.1, 1.0)
            init.normal_(module.scale_gamma, 0.0, 0.1)

    def _check_and_adjust_attn_implementation(self, attn_implementation: str | None, *args, **kwargs) -> str:
        # α-entmax is the model: whatever a caller asks for, attention goes through it.
        return ATTENTION_IMPLEMENTATION

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs) -> None:
        """Save as any model does, plus what lets anyone load the folder without hf_entmax.

        The folder gets this file and its flat companions (config, entmax, translation pipeline),
        an ``auto_map`` for ``AutoConfig``, ``AutoModel`` and ``AutoModelForSeq2SeqLM``, and a
        ``custom_pipelines`` entry that makes ``pipeline("translation", model=folder,
        trust_remote_code=True)`` work. Arguments are those of ``PreTrainedModel.save_pretrained``.
        """
        # Imported here: the pipeline's module loads transformers' pipelines and with them every tokenizer backend,
        # which only saving needs, so that importing the model stays light.
        from .pipeline_translation import TranslationPipeline

        os.makedirs(save_directory, exist_ok=True)
        # One object from each flat file that a saved folder needs (copied, with relative imports intact).
        for source in (
            AdaptiveEntmaxMarianConfig,
            AdaptiveEntmaxMarianMTModel,
            entmax,
            apply_predicted_sparsity,
            TranslationPipeline,
        ):
            shutil.copy(sys.modules[source.__module__].__file__, save_directory)
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
        super().save_pretrained(save_directory, *args, **kwargs)

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
            predictor: A ``SparsefinderPredictor``, or a folder / Hub id with ``sparsefinder.safetensors``
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

    def get_attention_scales(self) -> dict[str, dict[str, torch.Tensor | float]]:
        """Current ASEntmax parameters of every attention type that scales its queries.

        Returns:
            ``{attention_type: {"beta": (layers, heads), "gamma": (layers, heads), "offset": δ}}`` with detached
            float32 tensors on the CPU; a head multiplies a query that may attend to n keys by
            ``offset + beta * log(n + 1) ** gamma``. Attention types without scaling are absent (``{}`` for a model
            without any).
        """
        by_type: dict[str, dict[str, list]] = {}
        for module in self.modules():
            if isinstance(module, AdaptiveEntmaxMarianAttention) and module.scale_beta is not None:
                scales = by_type.setdefault(module.attention_type, {"beta": [], "gamma": [], "offset": []})
                scales["beta"].append(module.scale_beta.detach().float().cpu())
                scales["gamma"].append(module.scale_gamma.detach().float().cpu())
                scales["offset"].append(module.scale_offset)
        return {
            kind: {
                "beta": torch.stack(scales["beta"]),
                "gamma": torch.stack(scales["gamma"]),
                "offset": scales["offset"][0],
            }
            for kind, scales in by_type.items()
        }


def _build_stack(
    stack: nn.Module, config: AdaptiveEntmaxMarianConfig, vocab_size: int, layers: list[nn.Module], layerdrop: float
) -> None:
    """Give an encoder or decoder its embeddings and layers, under the names Marian's forward reads."""
    stack.dropout = config.dropout
    stack.layerdrop = layerdrop
    stack.padding_idx = config.pad_token_id
    stack.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
    stack.embed_tokens = nn.Embedding(vocab_size, config.d_model, stack.padding_idx)
    stack.embed_positions = MarianSinusoidalPositionalEmbedding(
        config.max_position_embeddings, config.d_model, stack.padding_idx
    )
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


def _class_reference(cls: type) -> str:
    """``"module.Class"`` as config.json's ``auto_map`` names a class in a flat remote-code folder."""
    return f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"


__all__ = [
    "AdaptiveEntmaxMarianAttention",
    "AdaptiveEntmaxMarianMTModel",
    "AdaptiveEntmaxMarianModel",
    "AdaptiveEntmaxMarianPreTrainedModel",
    "entmax_attention_forward",
]
