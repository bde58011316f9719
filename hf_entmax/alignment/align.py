"""Word alignments from a translation model's cross-attention: `align_pairs`, what `hf-entmax align` runs."""

import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..common.text_files import listed_lines
from ..errors import HfEntmaxValueError
from .heads import HeadChoice, choose_heads
from .links import links_from_weights
from .pharaoh import Links
from .words import QUERY_STEPS, word_cross_attention


logger = logging.getLogger(__name__)

# Heads are chosen on the first pairs only (their attention is kept for it): the score settles within a few hundred
# sentences, and a long file should neither be held in memory nor read twice.
SELECTION_PAIRS = 500


@dataclass(frozen=True)
class Alignments:
    """The word alignments of a corpus and how they were made.

    Attributes:
        links: Per sentence pair, its ``(source word, target word)`` links, 0-based over whitespace-separated words.
        choice: The heads whose mean attention gave the links, the decoder step, and the scores behind the choice.
        threshold: The attention mass a link needs (None: each target word's most attended source word).
        truncated_lines: 1-based numbers of the pairs cut at the model's input length limit.
    """

    links: list[Links]
    choice: HeadChoice
    threshold: float | None
    truncated_lines: list[int]


def check_heads(heads: Sequence[tuple[int, int]], model: PreTrainedModel) -> list[tuple[int, int]]:
    """Refuse ``(layer, head)`` pairs the model's cross-attention does not have, naming the valid range."""
    layers, num_heads = model.config.decoder_layers, model.config.decoder_attention_heads
    if not heads:
        raise HfEntmaxValueError("no heads given: name at least one LAYER:HEAD, or choose them automatically")
    for layer, head in heads:
        if not (0 <= layer < layers and 0 <= head < num_heads):
            raise HfEntmaxValueError(
                f"head {layer}:{head} does not exist: the model's cross-attention has layers 0–{layers - 1} and "
                f"heads 0–{num_heads - 1} (LAYER:HEAD, 0-based)"
            )
    return list(dict.fromkeys(heads))


def check_threshold(threshold: float | None, flag: str = "threshold") -> None:
    """Refuse a link threshold outside [0, 1): no share of attention can exceed 1."""
    if threshold is not None and not 0 <= threshold < 1:
        raise HfEntmaxValueError(f"{flag} must be a share of attention in [0, 1), got {threshold}")


def align_pairs(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sources: Sequence[str],
    targets: Sequence[str],
    heads: Sequence[tuple[int, int]] | None = None,
    threshold: float | None = None,
    batch_size: int = 32,
) -> Alignments:
    """Word-align each source sentence with its translation through the model's cross-attention.

    Args:
        model: An encoder–decoder translation model in eval mode that returns its attention (AdaptiveEntmaxMarian, or
            Marian loaded with eager attention).
        tokenizer: Its tokenizer.
        sources, targets: Line-aligned sentences; words are separated by whitespace.
        heads: ``(layer, head)`` cross-attention heads to align with (their attention averaged); None: chosen without
            gold alignments on the first `SELECTION_PAIRS` pairs (`choose_heads`).
        threshold: Link every source word that gets more than this share of a target word's attention (0: the exact
            support of α-entmax heads); None: its most attended source word only.
        batch_size: Pairs per forward pass.

    Raises:
        HfEntmaxValueError: For lists of different lengths, heads the model does not have, or a bad threshold.
    """
    if len(sources) != len(targets):
        raise HfEntmaxValueError(f"{len(sources)} source sentences for {len(targets)} targets: give one per source")
    if batch_size < 1:
        raise HfEntmaxValueError(f"batch_size must be a positive number of pairs, got {batch_size}")
    check_threshold(threshold)
    if heads is not None:
        heads = check_heads(heads, model)

    attentions = word_cross_attention(model, tokenizer, sources, targets, batch_size)
    selection = list(itertools.islice(attentions, SELECTION_PAIRS))
    choice = choose_heads(selection, heads)
    step = QUERY_STEPS.index(choice.query_step)
    layers = torch.tensor([layer for layer, _ in choice.heads])
    chosen = torch.tensor([head for _, head in choice.heads])

    links, truncated_lines = [], []
    for line_number, attention in enumerate(itertools.chain(selection, attentions), start=1):
        weights = attention.weights[step, layers, chosen].mean(0)  # (target words, source words + 1)
        links.append(links_from_weights(weights, threshold))
        if attention.truncated:
            truncated_lines.append(line_number)
    if truncated_lines:
        logger.warning(
            f"{len(truncated_lines)} pair(s) are longer than the model's input limit: only their first words are "
            f"aligned (lines {listed_lines(truncated_lines)})"
        )
    return Alignments(links, choice, threshold, truncated_lines)


__all__ = ["SELECTION_PAIRS", "Alignments", "align_pairs", "check_heads", "check_threshold"]
