"""Run a model over a sample of sentence pairs and gather the per-head statistics of `statistics`.

The decoder is teacher-forced: on the reference translations when they are given, otherwise on the model's own
greedy translations (generated first), so decoder self-attention and cross-attention are those of real outputs.
"""

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import MarianMTModel, PreTrainedConfig, PreTrainedModel, PreTrainedTokenizerBase
from transformers.models.marian.modeling_marian import shift_tokens_right

from ..common.config import describe_positions
from ..errors import HfEntmaxValueError
from ..modeling.configuration_adaptive_entmax_marian import ATTENTION_TYPES, position_limit
from ..modeling.modeling_adaptive_entmax_marian import (
    AdaptiveEntmaxMarianAttention,
    AdaptiveEntmaxMarianPreTrainedModel,
    asentmax_scale,
)
from .inputs import load_analysable_model, read_alpha_history
from .statistics import (
    allowed_keys,
    attention_density,
    head_divergence,
    largest_weight,
    mass_per_token,
    offset_mass,
    same_word_mass,
    word_ids,
)


SELF_ATTENTION_TYPES = ("encoder_self", "decoder_self")
LAYER_STATISTICS = ("density", "largest_weight", "js_divergence")
# Positions and words are those of the query's own sequence: these exist in self-attention only.
SELF_ATTENTION_STATISTICS = ("previous_token_mass", "next_token_mass", "same_word_mass")
# How many of the most attended tokens are kept per head.
TOP_TOKENS = 3


@dataclass
class QueryScaling:
    """The learned query scaling of one attention type: head h of layer l multiplies a query that may attend to n keys
    by ``asentmax_scale(n, beta[l, h], gamma[l, h], offset)`` before α-entmax (1 in the heads that do not scale).

    ASEntmax per head (``"asentmax"``) learns β and γ; SSMax (``"ssmax"``) is ``s · log(n + 1)``, i.e. β = s, γ = 1
    and no offset; per-token ASEntmax (``"asentmax_per_token"``) computes β and γ from each query token, and here they
    are the means over the real queries of the analysed sentences (its factor at their mean β and γ).

    Attributes:
        beta, gamma: ``(layers, heads)`` β and γ of each head.
        offset: The fixed offset δ (``attention_scaling_offset``; 0 for SSMax).
        key_counts: The fewest and the most keys a query of the analysed sentences may attend to.
        method: ``"asentmax"``, ``"asentmax_per_token"`` or ``"ssmax"``.
        scaled_heads: ``(heads,)`` bool, the heads that scale (NAPE's NoPE heads by default); None: all of them.
        projection_bias: Whether per-token ASEntmax's maps have a bias (``attention_scaling_projection_bias``).
    """

    beta: torch.Tensor
    gamma: torch.Tensor
    offset: float
    key_counts: tuple[int, int]
    method: str = "asentmax"
    scaled_heads: torch.Tensor | None = None
    projection_bias: bool = False

    def factor(self, num_keys: torch.Tensor | int) -> torch.Tensor:
        """The factor of every head at each number of keys: ``(N,)`` or a number → ``(layers, heads, N)``."""
        num_keys = torch.as_tensor(num_keys, dtype=torch.float64).reshape(-1).clamp(min=1.0)  # (N,)
        factor = asentmax_scale(num_keys, self.beta.double()[..., None], self.gamma.double()[..., None], self.offset)
        if self.scaled_heads is None:
            return factor
        return torch.where(self.scaled_heads.view(1, -1, 1), factor, torch.ones((), dtype=factor.dtype))

    def to_dict(self) -> dict[str, Any]:
        per_token = {"projection_bias": self.projection_bias} if self.method == "asentmax_per_token" else {}
        return {
            "method": self.method,
            "beta": self.beta.tolist(),
            "gamma": self.gamma.tolist(),
            "offset": self.offset,
            "key_counts": list(self.key_counts),
            "scaled_heads": None if self.scaled_heads is None else self.scaled_heads.tolist(),
            **per_token,
        }


@dataclass
class AttentionTypeStatistics:
    """The numbers of one attention type (encoder self, decoder self or cross) of one model.

    Attributes:
        alpha: ``(layers, heads)`` α of each head (1 for softmax).
        density: ``(layers, heads)`` mean fraction of non-zero weights per query, among the keys it may attend to.
        largest_weight: ``(layers, heads)`` mean over queries of the largest weight a query gives.
        js_divergence: ``(layers,)`` mean Jensen–Shannon divergence between the layer's heads, in bits.
        previous_token_mass, next_token_mass: ``(layers, heads)`` mean probability on the key one position
            before / after the query; self-attention only (None for cross-attention); NaN where never defined
            (next token in decoder self-attention).
        same_word_mass: ``(layers, heads)`` mean probability on the other subword pieces of the query's word;
            self-attention only.
        top_tokens: ``[layer][head]`` → the most attended tokens as ``(token, share of the head's attention)``.
        scaling: The learned scaling's β, γ and δ when this attention type scales its queries so, else None.
        scaling_method: The type's query scaling (``attention_scaling``): ``"none"``, ``"softmax_matched"``,
            ``"asentmax"``, ``"asentmax_per_token"`` or ``"ssmax"``; ``"none"`` for a Marian model.
    """

    alpha: torch.Tensor
    density: torch.Tensor
    largest_weight: torch.Tensor
    js_divergence: torch.Tensor
    previous_token_mass: torch.Tensor | None
    next_token_mass: torch.Tensor | None
    same_word_mass: torch.Tensor | None
    top_tokens: list[list[list[tuple[str, float]]]]
    scaling: QueryScaling | None = None
    scaling_method: str = "none"

    def to_dict(self) -> dict[str, Any]:
        """Plain lists for JSON: NaN becomes None; ``"scaling"`` only where the queries are scaled."""
        result: dict[str, Any] = {}
        for name in ("alpha", *LAYER_STATISTICS, *SELF_ATTENTION_STATISTICS):
            values = getattr(self, name)
            result[name] = None if values is None else _nan_to_none(values.tolist())
        result["top_tokens"] = [
            [[{"token": token, "share": share} for token, share in head] for head in layer]
            for layer in self.top_tokens
        ]
        result["scaling_method"] = self.scaling_method
        if self.scaling is not None:
            result["scaling"] = self.scaling.to_dict()
        return result


@dataclass
class AttentionExample:
    """The attention of every head on one sentence pair, for attention maps.

    Attributes:
        source_tokens: The ``S`` source pieces (with ``</s>``).
        target_tokens: The ``T`` decoder input pieces (the start token, then the translation without its last piece).
        attentions: ``{"encoder_self": (layers, heads, S, S), "decoder_self": (layers, heads, T, T),
            "cross": (layers, heads, T, S)}``.
    """

    source_tokens: list[str]
    target_tokens: list[str]
    attentions: dict[str, torch.Tensor]

    def axis_tokens(self, kind: str) -> tuple[list[str], list[str]]:
        """``(query tokens, key tokens)`` of one attention type."""
        queries = self.source_tokens if kind == "encoder_self" else self.target_tokens
        keys = self.target_tokens if kind == "decoder_self" else self.source_tokens
        return queries, keys


@dataclass
class ModelAnalysis:
    """What `analyze_model` found about one model's heads.

    Attributes:
        name: Short name used in tables and figures (the folder name by default).
        model_type: ``"adaptive_entmax_marian"`` or ``"marian"`` (softmax).
        num_sentences: Size of the sample.
        decoder_inputs: ``"references"`` (teacher-forced on the given targets) or ``"greedy translations"``.
        attention: The statistics per attention type (``"encoder_self"``, ``"decoder_self"``, ``"cross"``).
        alpha_history: α per head at every logged training step (``alpha_history.json``), if known.
        examples: Attention of a few sentence pairs, for attention maps.
        source: The folder the model was loaded from, if any.
        positions: How the model knows where tokens are, in words (`describe_positions`), if known.
    """

    name: str
    model_type: str
    num_sentences: int
    decoder_inputs: str
    attention: dict[str, AttentionTypeStatistics]
    alpha_history: list[dict] | None = None
    examples: list[AttentionExample] = field(default_factory=list)
    source: str | None = None
    positions: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The numbers as plain JSON-ready data (the examples' attention tensors are left out)."""
        return {
            "name": self.name,
            "model_type": self.model_type,
            "source": self.source,
            "num_sentences": self.num_sentences,
            "decoder_inputs": self.decoder_inputs,
            "positions": self.positions,
            "attention": {kind: statistics.to_dict() for kind, statistics in self.attention.items()},
            "alpha_history": self.alpha_history,
        }


def analyze_model(
    model: str | os.PathLike | PreTrainedModel,
    sources: list[str],
    targets: list[str] | None = None,
    *,
    tokenizer: PreTrainedTokenizerBase | None = None,
    name: str | None = None,
    batch_size: int = 16,
    max_length: int = 128,
    num_examples: int = 3,
    progress: bool = True,
) -> ModelAnalysis:
    """Measure what every attention head does on a sample of sentences (Correia et al. 2019, Section 5).

    Per attention type, layer and head: α, attention density, previous/next-token and same-word mass, the
    most attended tokens, and ASEntmax's β, γ and δ where the queries are scaled; per layer: the Jensen–Shannon
    divergence between heads.

    Args:
        model: An AdaptiveEntmaxMarian or plain Marian (softmax) model, or the folder of one (then α over
            training is read from its ``alpha_history.json`` when there is one). A Marian model object must use
            eager attention (``attn_implementation="eager"``), the one that returns attention probabilities.
        sources: Source sentences.
        targets: Their reference translations; without them the decoder reads the model's greedy translations.
        tokenizer: The model's tokenizer (loaded from the folder when ``model`` is a folder).
        name: Name in tables and figures (default: the folder name, else the model class).
        batch_size: Sentences per forward pass.
        max_length: Longest source, reference or generated translation, in tokens.
        num_examples: How many of the first sentence pairs keep their attention, for attention maps.
        progress: Show a progress bar over the sample.

    Returns:
        The numbers, as a `ModelAnalysis`.

    Raises:
        HfEntmaxValueError: For an empty sample, targets of another length than sources, or a model that is not
            an AdaptiveEntmaxMarian or Marian model.
    """
    source_folder = None
    if isinstance(model, (str, os.PathLike)):
        source_folder = Path(model)
        model, tokenizer = load_analysable_model(source_folder)
    elif tokenizer is None:
        raise HfEntmaxValueError("analyze_model needs the model's tokenizer when given a model object")
    if not isinstance(model, (AdaptiveEntmaxMarianPreTrainedModel, MarianMTModel)):
        raise HfEntmaxValueError(f"expected an AdaptiveEntmaxMarian or Marian model, got {type(model).__name__}")
    is_softmax_marian = not isinstance(model, AdaptiveEntmaxMarianPreTrainedModel)
    if is_softmax_marian and model.config._attn_implementation != "eager":
        raise HfEntmaxValueError(
            f"this Marian model uses {model.config._attn_implementation!r} attention, which returns no attention "
            'probabilities: load it with attn_implementation="eager"'
        )
    if not sources:
        raise HfEntmaxValueError("no source sentences to analyse")
    if targets is not None and len(targets) != len(sources):
        raise HfEntmaxValueError(f"got {len(sources)} source sentences but {len(targets)} targets")

    name = name or (source_folder.resolve().name if source_folder else type(model).__name__)
    was_training = model.training
    model.eval()
    collector = _Collector(model, tokenizer, num_examples)
    try:
        with tqdm(total=len(sources), desc=f"Analysing {name}", unit="sentence", disable=not progress) as bar:
            for start in range(0, len(sources), batch_size):
                batch_targets = None if targets is None else targets[start : start + batch_size]
                collector.add_batch(sources[start : start + batch_size], batch_targets, max_length)
                bar.update(len(sources[start : start + batch_size]))
    finally:
        collector.close()
        model.train(was_training)

    return ModelAnalysis(
        name=name,
        model_type=model.config.model_type,
        num_sentences=len(sources),
        decoder_inputs="greedy translations" if targets is None else "references",
        attention=collector.results(
            model_alphas(model), model_scales(model), model_scaling_methods(model), model_scaled_heads(model)
        ),
        alpha_history=read_alpha_history(source_folder) if source_folder else None,
        examples=collector.examples,
        source=str(source_folder) if source_folder else None,
        positions=describe_positions(model.config),
    )


def model_alphas(model: PreTrainedModel) -> dict[str, torch.Tensor]:
    """α per attention type, ``(layers, heads)`` each; a Marian model's heads are softmax heads, α = 1."""
    if isinstance(model, AdaptiveEntmaxMarianPreTrainedModel):
        return model.get_alphas()
    return {kind: torch.ones(layers_and_heads(model.config, kind)) for kind in ATTENTION_TYPES}


def model_scales(model: PreTrainedModel) -> dict[str, dict[str, torch.Tensor | float]]:
    """The per-head ``{"beta", "gamma", "offset", …}`` of the attention types that scale their queries with them
    (``get_attention_scales()``: SSMax's s as β, γ = 1, no offset); ``{}`` for a model without, and for a Marian
    model."""
    if isinstance(model, AdaptiveEntmaxMarianPreTrainedModel):
        return model.get_attention_scales()
    return {}


def model_scaled_heads(model: PreTrainedModel) -> dict[str, torch.Tensor]:
    """``(heads,)`` bool per attention type whose scaling leaves some heads out (NAPE's ALiBi heads)."""
    if not isinstance(model, AdaptiveEntmaxMarianPreTrainedModel):
        return {}
    heads = {}
    for module in model.modules():
        if isinstance(module, AdaptiveEntmaxMarianAttention) and module.scaled_heads is not None:
            heads[module.attention_type] = torch.tensor(module.scaled_heads)
    return heads


def model_scaling_methods(model: PreTrainedModel) -> dict[str, str]:
    """Each attention type's query scaling (``"none"``, ``"softmax_matched"``, ``"asentmax"``,
    ``"asentmax_per_token"``, ``"ssmax"``); a Marian model's is ``"none"``."""
    if isinstance(model, AdaptiveEntmaxMarianPreTrainedModel):
        return {kind: model.config.scaling_method(kind) for kind in ATTENTION_TYPES}
    return dict.fromkeys(ATTENTION_TYPES, "none")


def layers_and_heads(config: PreTrainedConfig, kind: str) -> tuple[int, int]:
    """``(layers, heads)`` of one attention type of a Marian-style config."""
    if kind == "encoder_self":
        return config.encoder_layers, config.encoder_attention_heads
    return config.decoder_layers, config.decoder_attention_heads


@dataclass
class TeacherForcedAttention:
    """One batch of sentence pairs run through a model teacher-forced, with its attention probabilities.

    Attributes:
        inputs: The tokenized sources, ``{"input_ids": (B, S), "attention_mask": (B, S)}``.
        decoder_input_ids: ``(B, T)`` the decoder's inputs (the start token, then the translation shifted right).
        source_mask, target_mask: ``(B, S)`` and ``(B, T)`` bool, true at real tokens.
        allowed: ``{"encoder_self": (B, S, S), "decoder_self": (B, T, T), "cross": (B, T, S)}`` bool, where each query
            may attend (`allowed_keys`).
        outputs: The model's output, with ``encoder_attentions``, ``decoder_attentions`` and ``cross_attentions``.
    """

    inputs: dict[str, torch.Tensor]
    decoder_input_ids: torch.Tensor
    source_mask: torch.Tensor
    target_mask: torch.Tensor
    allowed: dict[str, torch.Tensor]
    outputs: Any

    def attentions(self) -> dict[str, tuple[torch.Tensor, ...]]:
        """Per attention type, each layer's ``(B, H, Q, K)`` probabilities."""
        return {
            "encoder_self": self.outputs.encoder_attentions,
            "decoder_self": self.outputs.decoder_attentions,
            "cross": self.outputs.cross_attentions,
        }


@torch.no_grad()
def teacher_forced_attention(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sources: list[str],
    targets: list[str] | None,
    max_length: int,
) -> TeacherForcedAttention:
    """Run ``model`` (in eval mode) over one batch, teacher-forced on ``targets`` or, without them, on its own greedy
    translations, returning every attention probability.

    Args:
        max_length: Longest source, reference or generated translation, in tokens (at most the model's positions,
            where they are a table).
    """
    config = model.config
    positions = position_limit(config)
    if positions is not None:
        # Positions beyond the position embeddings do not exist (the start token takes one more).
        max_length = min(max_length, positions - 1)
    encoded = dict(tokenizer(sources, return_tensors="pt", padding=True, truncation=True, max_length=max_length))
    inputs = {key: encoded[key].to(model.device) for key in ("input_ids", "attention_mask")}
    if targets is not None:
        labels = tokenizer(
            text_target=targets, return_tensors="pt", padding=True, truncation=True, max_length=max_length
        ).to(model.device)
        target_mask = labels["attention_mask"].bool()  # (B, T)
        decoder_input_ids = shift_tokens_right(labels["input_ids"], config.pad_token_id, config.decoder_start_token_id)
    else:
        # max_length counts the start token; max_new_tokens would clash with a saved config's max_length
        generated = model.generate(**inputs, num_beams=1, do_sample=False, max_length=max_length + 1)
        decoder_input_ids, next_tokens = generated[:, :-1], generated[:, 1:]  # (B, T)
        # Positions after the first end-of-sequence token are padding.
        is_eos = (next_tokens == config.eos_token_id).long()
        target_mask = (is_eos.cumsum(-1) - is_eos) == 0  # (B, T)
    outputs = model(
        **inputs,
        decoder_input_ids=decoder_input_ids,
        decoder_attention_mask=target_mask.long(),
        output_attentions=True,
        use_cache=False,
    )

    source_mask = inputs["attention_mask"].bool()  # (B, S)
    allowed = {
        "encoder_self": allowed_keys(source_mask, source_mask),  # (B, S, S)
        "decoder_self": allowed_keys(target_mask, target_mask, causal=True),  # (B, T, T)
        "cross": allowed_keys(target_mask, source_mask),  # (B, T, S)
    }
    return TeacherForcedAttention(inputs, decoder_input_ids, source_mask, target_mask, allowed, outputs)


class _Sum:
    """A running sum of per-query values and of how many queries counted, for one layer."""

    def __init__(self) -> None:
        self.total = torch.zeros((), dtype=torch.float64)
        self.count = torch.zeros((), dtype=torch.float64)

    def add(self, values: torch.Tensor, counted: torch.Tensor) -> None:
        """``values`` ``(B, H, Q)`` or ``(B, Q)``; ``counted`` ``(B, Q)``."""
        weights = counted[:, None] if values.dim() == 3 else counted  # broadcast over heads
        dims = (0, 2) if values.dim() == 3 else (0, 1)
        self.total = self.total + (values.double() * weights).sum(dims).cpu()
        self.count = self.count + weights.sum(dims).double().cpu()

    def mean(self) -> torch.Tensor:
        return (self.total / self.count).float()  # NaN where no query counted


class _Collector:
    """Accumulates the statistics of every layer over batches, and the attention of the first examples."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, num_examples: int) -> None:
        self.model, self.tokenizer, self.num_examples = model, tokenizer, num_examples
        config = model.config
        self.vocab_size = max(config.vocab_size, getattr(config, "decoder_vocab_size", None) or 0, len(tokenizer))
        special_ids = {config.pad_token_id, config.eos_token_id, config.decoder_start_token_id}
        self.special_tokens = set(tokenizer.all_special_tokens) | set(
            tokenizer.convert_ids_to_tokens([token_id for token_id in special_ids if token_id is not None])
        )
        shapes = {kind: layers_and_heads(config, kind) for kind in ATTENTION_TYPES}
        self.sums = {
            kind: {name: [_Sum() for _ in range(shapes[kind][0])] for name in _statistics_of(kind)}
            for kind in ATTENTION_TYPES
        }
        # Per layer: (heads, vocabulary) attention mass received by each token type.
        self.token_mass = {
            kind: torch.zeros(*shapes[kind], self.vocab_size, dtype=torch.float64) for kind in ATTENTION_TYPES
        }
        # The fewest and the most keys a real query may attend to: the lengths ASEntmax's factor was applied at.
        self.key_counts: dict[str, tuple[int, int] | None] = dict.fromkeys(ATTENTION_TYPES)
        self.examples: list[AttentionExample] = []
        # Per-token ASEntmax has no β, γ per head: they are measured, per head and averaged over the real queries,
        # from what its maps W_β h and W_γ h give in each teacher-forced pass (the last call of a batch).
        self.token_scales: dict[str, dict[str, list[_Sum]]] = {}
        self._projected: dict[tuple[str, int, str], torch.Tensor] = {}
        self._hooks = []
        layers = dict.fromkeys(ATTENTION_TYPES, 0)
        for module in model.modules():
            if not isinstance(module, AdaptiveEntmaxMarianAttention):
                continue
            kind, layer = module.attention_type, layers[module.attention_type]
            layers[kind] += 1
            if module.scale_beta_proj is None:
                continue
            self.token_scales.setdefault(kind, {"beta": [], "gamma": []})
            for name, projection in (("beta", module.scale_beta_proj), ("gamma", module.scale_gamma_proj)):
                self.token_scales[kind][name].append(_Sum())
                self._hooks.append(projection.register_forward_hook(self._keeper((kind, layer, name))))

    def _keeper(self, key: tuple[str, int, str]):
        def keep(module: torch.nn.Module, inputs: tuple, output: torch.Tensor) -> None:
            self._projected[key] = output.detach()  # (B, Q, H)

        return keep

    def close(self) -> None:
        """Remove the hooks the collector put on the model."""
        for hook in self._hooks:
            hook.remove()

    @torch.no_grad()
    def add_batch(self, sources: list[str], targets: list[str] | None, max_length: int) -> None:
        tokenizer = self.tokenizer
        forced = teacher_forced_attention(self.model, tokenizer, sources, targets, max_length)
        inputs, decoder_input_ids = forced.inputs, forced.decoder_input_ids
        source_mask, target_mask, allowed = forced.source_mask, forced.target_mask, forced.allowed
        key_ids = {
            "encoder_self": inputs["input_ids"],
            "decoder_self": decoder_input_ids,
            "cross": inputs["input_ids"],
        }
        words = {
            "encoder_self": self._word_ids(inputs["input_ids"]),
            "decoder_self": self._word_ids(decoder_input_ids),
        }
        query_masks = {"encoder_self": source_mask, "decoder_self": target_mask, "cross": target_mask}
        for (kind, layer, name), projected in self._projected.items():
            # As the model computes them: β = softplus(W_β h + b_β), γ = 2·tanh(W_γ h + b_γ) (hooked after the bias).
            values = torch.nn.functional.softplus(projected) if name == "beta" else 2.0 * torch.tanh(projected)
            self.token_scales[kind][name][layer].add(values.transpose(1, 2), query_masks[kind])  # (B, H, Q)
        attentions = forced.attentions()
        for kind, layers in attentions.items():
            num_keys = allowed[kind].sum(-1)  # (B, Q)
            num_keys = num_keys[num_keys > 0].tolist()  # of the real queries
            earlier = list(self.key_counts[kind] or ())
            if num_keys or earlier:
                self.key_counts[kind] = (min(num_keys + earlier), max(num_keys + earlier))
            sums = self.sums[kind]
            for layer, attention in enumerate(layers):  # attention: (B, H, Q, K)
                attention = attention.float()
                sums["density"][layer].add(*attention_density(attention, allowed[kind]))
                sums["largest_weight"][layer].add(*largest_weight(attention, allowed[kind]))
                sums["js_divergence"][layer].add(*head_divergence(attention, allowed[kind]))
                if kind in SELF_ATTENTION_TYPES:
                    sums["previous_token_mass"][layer].add(*offset_mass(attention, allowed[kind], -1))
                    sums["next_token_mass"][layer].add(*offset_mass(attention, allowed[kind], 1))
                    sums["same_word_mass"][layer].add(*same_word_mass(attention, allowed[kind], words[kind]))
                mass = mass_per_token(attention, allowed[kind], key_ids[kind], self.vocab_size).cpu()  # (H, V)
                self.token_mass[kind][layer] += mass

        for row in range(len(sources)):
            if len(self.examples) >= self.num_examples:
                break
            source_row, target_row = source_mask[row], target_mask[row]
            crops = {"encoder_self": (source_row, source_row), "decoder_self": (target_row, target_row),
                     "cross": (target_row, source_row)}  # fmt: skip
            self.examples.append(
                AttentionExample(
                    source_tokens=tokenizer.convert_ids_to_tokens(inputs["input_ids"][row][source_row].tolist()),
                    target_tokens=tokenizer.convert_ids_to_tokens(decoder_input_ids[row][target_row].tolist()),
                    attentions={
                        kind: torch.stack([layer[row][:, crops[kind][0]][:, :, crops[kind][1]] for layer in layers])
                        .float()
                        .cpu()
                        for kind, layers in attentions.items()
                    },  # (layers, heads, Q, K)
                )
            )

    def _word_ids(self, token_ids: torch.Tensor) -> torch.Tensor:
        """``(B, L)`` token ids → ``(B, L)`` word index of each piece, −1 for special tokens and padding."""
        rows = [word_ids(self.tokenizer.convert_ids_to_tokens(row), self.special_tokens) for row in token_ids.tolist()]
        return torch.tensor(rows, dtype=torch.long, device=token_ids.device)

    def results(
        self,
        alphas: dict[str, torch.Tensor],
        scales: dict[str, dict[str, torch.Tensor | float]],
        scaling_methods: dict[str, str],
        scaled_heads: dict[str, torch.Tensor] | None = None,
    ) -> dict[str, AttentionTypeStatistics]:
        scaled_heads = scaled_heads or {}
        offset = getattr(self.model.config, "attention_scaling_offset", 0.0)
        scales = scales | {
            kind: {name: torch.stack([total.mean() for total in sums]) for name, sums in measured.items()}
            | {"offset": offset}
            for kind, measured in self.token_scales.items()
        }
        results = {}
        for kind in ATTENTION_TYPES:
            sums = self.sums[kind]
            stacked = {name: torch.stack([total.mean() for total in layers]) for name, layers in sums.items()}
            queries = torch.stack([total.count.reshape(()) for total in sums["density"]])  # (layers,)
            top_tokens = []
            for layer, mass in enumerate(self.token_mass[kind]):
                shares = mass / queries[layer]  # (H, V)
                values, indices = shares.topk(min(TOP_TOKENS, shares.shape[-1]), dim=-1)  # (H, k)
                top_tokens.append(
                    [
                        list(zip(self.tokenizer.convert_ids_to_tokens(ids), [round(v, 4) for v in row], strict=True))
                        for ids, row in zip(indices.tolist(), values.tolist(), strict=True)
                    ]
                )
            results[kind] = AttentionTypeStatistics(
                alpha=alphas[kind].float(),
                density=stacked["density"],
                largest_weight=stacked["largest_weight"],
                js_divergence=stacked["js_divergence"],
                previous_token_mass=stacked.get("previous_token_mass"),
                next_token_mass=stacked.get("next_token_mass"),
                same_word_mass=stacked.get("same_word_mass"),
                top_tokens=top_tokens,
                scaling=None
                if kind not in scales
                else QueryScaling(
                    beta=scales[kind]["beta"].float(),
                    gamma=scales[kind]["gamma"].float(),
                    offset=float(scales[kind]["offset"]),
                    key_counts=self.key_counts[kind],
                    method=scaling_methods[kind],
                    scaled_heads=scaled_heads.get(kind),
                    projection_bias=getattr(self.model.config, "attention_scaling_projection_bias", False),
                ),
                scaling_method=scaling_methods[kind],
            )
        return results


def _statistics_of(kind: str) -> tuple[str, ...]:
    return LAYER_STATISTICS + (SELF_ATTENTION_STATISTICS if kind in SELF_ATTENTION_TYPES else ())


def _nan_to_none(values: Any) -> Any:
    if isinstance(values, list):
        return [_nan_to_none(value) for value in values]
    return None if values != values else values  # NaN is the only value unequal to itself


__all__ = [
    "AttentionExample",
    "AttentionTypeStatistics",
    "ModelAnalysis",
    "QueryScaling",
    "TeacherForcedAttention",
    "analyze_model",
    "layers_and_heads",
    "model_alphas",
    "model_scaled_heads",
    "model_scales",
    "model_scaling_methods",
    "teacher_forced_attention",
]
