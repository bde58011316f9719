"""Which cross-attention heads align words, found without gold alignments.

A head that attends along the alignment links each target word to the source word it translates, so across a corpus
the source word it picks predicts the target word well: the pairs it forms look like a bilingual dictionary. A head
that attends by position, or always to the same word or to the end-of-sentence token, forms pairs whose source side
says little about the target side. The score of a head is therefore the mutual information, over the sentence pairs
being aligned, between the (lower-cased) target word and the source word the head attends to most — the end-of-
sentence token counting as one more source "word", so that a head parked there scores zero. It needs no gold data
and no second model; docs/alignment.md compares it with gold on the synthetic pair.
"""

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..errors import HfEntmaxValueError
from .words import QUERY_STEPS, WordAttention


# The most heads averaged into one alignment: beyond a few, weaker heads only blur the best ones.
MAX_COMBINED_HEADS = 4


@dataclass(frozen=True)
class HeadChoice:
    """The heads to align with and how they were chosen.

    Attributes:
        query_step: The decoder step target words are read from (one of `QUERY_STEPS`).
        heads: ``(layer, head)`` cross-attention heads whose attention is averaged.
        scores: ``(steps, layers, heads)`` the score of every single head, in nats.
        score: The score of the chosen heads' average.
        num_pairs: How many sentence pairs the scores were measured on.
    """

    query_step: str
    heads: list[tuple[int, int]]
    scores: torch.Tensor
    score: float
    num_pairs: int


def _word_types(attention: WordAttention) -> tuple[list[str | None], list[str]]:
    """The lower-cased source words, None for the end-of-sentence token after them; the lower-cased target words."""
    source_types = [word.lower() for word in attention.source_words] + [None]
    return source_types, [word.lower() for word in attention.target_words]


def _count(counter: Counter, types: tuple[list[str | None], list[str]], most_attended: list[int]) -> None:
    """Count the (most attended source word, target word) pair of each target word (``types``: `_word_types`)."""
    source_types, target_types = types
    counter.update(zip((source_types[index] for index in most_attended), target_types, strict=True))


def _score(attentions: Sequence[WordAttention], step: int, heads: Sequence[tuple[int, int]]) -> float:
    """The score of the average attention of ``heads`` at decoder step ``step``."""
    layers, indices = torch.tensor([layer for layer, _ in heads]), torch.tensor([head for _, head in heads])
    counts = Counter()
    for attention in attentions:
        most_attended = attention.weights[step, layers, indices].mean(0).argmax(-1).tolist()  # (T,)
        _count(counts, _word_types(attention), most_attended)
    return mutual_information(counts)


def _single_head_scores(attentions: Sequence[WordAttention]) -> torch.Tensor:
    """``(steps, layers, heads)`` the score of every head alone (one pass over the pairs for all of them)."""
    shape = attentions[0].weights.shape[:3]
    counts = [Counter() for _ in range(shape.numel())]
    for attention in attentions:
        types = _word_types(attention)
        most_attended = attention.weights.argmax(-1).reshape(len(counts), -1).tolist()  # (steps·layers·heads, T)
        for counter, indices in zip(counts, most_attended, strict=True):
            _count(counter, types, indices)
    return torch.tensor([mutual_information(counter) for counter in counts], dtype=torch.float64).view(shape)


def choose_heads(attentions: Sequence[WordAttention], heads: Sequence[tuple[int, int]] | None = None) -> HeadChoice:
    """Score every head on the sentence pairs' word-level cross-attention (see the module docstring) and choose.

    Without ``heads``: at the decoder step of the best-scoring head, the heads ranked first, as many (up to
    `MAX_COMBINED_HEADS`) as give their average the highest score. With ``heads``: those, at the step where their
    average scores highest.

    Raises:
        HfEntmaxValueError: If there is no target word to score on.
    """
    if not any(attention.target_words for attention in attentions):
        raise HfEntmaxValueError("no target words to choose alignment heads on: the sentence pairs are empty")
    num_steps, num_layers, num_heads = attentions[0].weights.shape[:3]
    every_head = [(layer, head) for layer in range(num_layers) for head in range(num_heads)]
    scores = _single_head_scores(attentions)
    if heads is not None:
        combined = [_score(attentions, step, heads) for step in range(num_steps)]
        step = max(range(num_steps), key=combined.__getitem__)
        return HeadChoice(QUERY_STEPS[step], list(heads), scores, combined[step], len(attentions))
    step = int(scores.amax((1, 2)).argmax())
    ranked = [every_head[index] for index in scores[step].flatten().argsort(descending=True).tolist()]
    candidates = [ranked[:count] for count in range(1, min(MAX_COMBINED_HEADS, len(ranked)) + 1)]
    combined = [_score(attentions, step, candidate) for candidate in candidates]
    best = max(range(len(candidates)), key=combined.__getitem__)
    return HeadChoice(QUERY_STEPS[step], candidates[best], scores, combined[best], len(attentions))


def mutual_information(pair_counts: Counter) -> float:
    """The mutual information (nats) of the empirical joint distribution given by ``{(x, y): count}``."""
    total = sum(pair_counts.values())
    if total == 0:
        return 0.0
    x_counts, y_counts = Counter(), Counter()
    for (x, y), count in pair_counts.items():
        x_counts[x] += count
        y_counts[y] += count
    return sum(
        count / total * math.log(count * total / (x_counts[x] * y_counts[y])) for (x, y), count in pair_counts.items()
    )


__all__ = ["MAX_COMBINED_HEADS", "HeadChoice", "choose_heads", "mutual_information"]
