"""Gather what Sparsefinder learns from and is judged on: per attention type, layer and batch, the model's queries and
keys (as its attention function receives them) and the α-entmax probabilities of every head (their support, p > 0,
is what the predictor learns to find).

The sentences go through `hf_entmax.analysis.collect.teacher_forced_attention` (the analysis' tokenization, teacher
forcing and allowed-pair masks); forward hooks on each attention module's query and key projections read the queries
and keys of the same pass, so that they are exactly those the probabilities were computed from.
"""

import functools
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from ..analysis.collect import teacher_forced_attention
from ..errors import HfEntmaxValueError
from ..modeling.modeling_adaptive_entmax_marian import AdaptiveEntmaxMarianAttention, AdaptiveEntmaxMarianMTModel
from ..modeling.positions import rope_angles, rotate


@dataclass
class AttentionBatch:
    """One batch of one attention layer.

    Attributes:
        query: ``(B, H, Lq, D)`` float32 unscaled queries (the query projection's output, split into heads).
        key: ``(B, H, Lk, D)`` float32 keys.
        probabilities: ``(B, H, Lq, Lk)`` float32 α-entmax probabilities, 0 outside the allowed pairs.
        allowed: ``(B, Lq, Lk)`` bool, true where the query may attend to the key (real tokens, not the future).
    """

    query: torch.Tensor
    key: torch.Tensor
    probabilities: torch.Tensor
    allowed: torch.Tensor

    @functools.cached_property
    def support(self) -> torch.Tensor:
        """``(B, H, Lq, Lk)`` bool, true where α-entmax gives the pair a non-zero probability (made once: training
        reads it every epoch, scoring at every operating point)."""
        return self.probabilities > 0


@dataclass
class AttentionSample:
    """The attention of a model on a sample of sentence pairs.

    Attributes:
        layers: ``{attention_type: [[AttentionBatch per batch] per layer]}``.
        num_sentences: How many sentence pairs.
    """

    layers: dict[str, list[list[AttentionBatch]]]
    num_sentences: int


def _split_heads(states: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``(B, L, H·D)`` projection output → ``(B, H, L, D)``, as Marian's attention module splits it."""
    batch, length, _ = states.shape
    return states.view(batch, length, num_heads, -1).transpose(1, 2)


@torch.no_grad()
def collect_attention(
    model: AdaptiveEntmaxMarianMTModel,
    tokenizer: PreTrainedTokenizerBase,
    sources: list[str],
    targets: list[str],
    attention_types: tuple[str, ...],
    *,
    batch_size: int = 16,
    max_length: int = 128,
    description: str = "Collecting attention",
    progress: bool = True,
) -> AttentionSample:
    """Run ``model`` teacher-forced over sentence pairs; keep queries, keys and probabilities of ``attention_types``.

    Args:
        model: An AdaptiveEntmaxMarian model (its eval mode is used; the caller's mode is restored).
        tokenizer: Its tokenizer.
        sources, targets: Line-aligned sentence pairs (the decoder reads the references).
        attention_types: Which of ``encoder_self``, ``decoder_self``, ``cross``.
        batch_size: Sentences per forward pass.
        max_length: Longest source or reference, in tokens.
        description: The progress bar's label.
        progress: Show a progress bar.

    Raises:
        HfEntmaxValueError: For a model that is not AdaptiveEntmaxMarian, or no sentences.
    """
    if not isinstance(model, AdaptiveEntmaxMarianMTModel):
        raise HfEntmaxValueError(f"Sparsefinder needs an AdaptiveEntmaxMarian model, got {type(model).__name__}")
    if not sources:
        raise HfEntmaxValueError("no sentence pairs to collect attention from")
    modules = [
        module
        for module in model.modules()
        if isinstance(module, AdaptiveEntmaxMarianAttention) and module.attention_type in attention_types
    ]
    captured: dict[tuple[str, int, str], torch.Tensor] = {}

    def recorder(module: AdaptiveEntmaxMarianAttention, part: str):
        def hook(_projection, _inputs, output: torch.Tensor) -> None:
            states = _split_heads(output, module.num_heads)
            if module.position_type == "rope":
                # Attention (and with it the predictor's graph) sees them rotated by their positions, which
                # teacher forcing numbers from 0.
                states = rotate(states, *rope_angles(states, 0, module.rope_theta))
            captured[(module.attention_type, module.layer_idx, part)] = states

        return hook

    handles = [
        projection.register_forward_hook(recorder(module, part))
        for module in modules
        for part, projection in (("query", module.q_proj), ("key", module.k_proj))
    ]
    layers: dict[str, list[list[AttentionBatch]]] = {
        kind: [[] for _ in range(sum(module.attention_type == kind for module in modules))] for kind in attention_types
    }
    was_training = model.training
    model.eval()
    try:
        with tqdm(total=len(sources), desc=description, unit="sentence", disable=not progress) as bar:
            for start in range(0, len(sources), batch_size):
                captured.clear()
                forced = teacher_forced_attention(
                    model, tokenizer, sources[start : start + batch_size], targets[start : start + batch_size],
                    max_length,
                )  # fmt: skip
                attentions = forced.attentions()
                for kind in attention_types:
                    for layer, attention in enumerate(attentions[kind]):  # attention: (B, H, Q, K)
                        allowed = forced.allowed[kind]
                        layers[kind][layer].append(
                            AttentionBatch(
                                query=captured[(kind, layer, "query")].float().cpu(),
                                key=captured[(kind, layer, "key")].float().cpu(),
                                probabilities=attention.float().masked_fill(~allowed[:, None], 0.0).cpu(),
                                allowed=allowed.cpu(),
                            )
                        )
                bar.update(len(sources[start : start + batch_size]))
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    return AttentionSample(layers=layers, num_sentences=len(sources))


__all__ = ["AttentionBatch", "AttentionSample", "collect_attention"]
