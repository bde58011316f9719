"""Cross-attention summed to words: what a translation model's decoder reads in the source while it writes each target
word, for every layer and head, with the target forced (teacher forcing).

Words are whitespace-separated tokens, as in the Pharaoh alignment format. Each word is tokenized on its own and the
pieces are joined, so every piece belongs to exactly one word of the line; for SentencePiece tokenizers, whose pieces
never cross a space, this is the tokenization of the whole line.
"""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..modeling.pipeline_translation import input_length_limit


# The two decoder steps a target word can be read from. "predicting": the step that outputs the word's first piece
# (its query has not seen the word yet); "reading": the step after, whose input is that piece (Chen et al., 2020,
# "shift-att", found this one aligns better in softmax models).
QUERY_STEPS = ("predicting", "reading")


@dataclass
class WordAttention:
    """The cross-attention of one sentence pair, summed over the source pieces of each word and averaged over the
    target pieces of each word.

    Attributes:
        source_words, target_words: The lines split at whitespace (the target cut where the model's positions end).
        weights: ``(steps, layers, heads, target words, source words + 1)``: for each of `QUERY_STEPS`, the attention
            mass each target word gives each source word; the last column is the mass on the end-of-sentence token
            (no word). Rows sum to 1.
        truncated: Whether words were cut off at the model's input length limit (its position table, or the
            tokenizer's ``model_max_length``).
    """

    source_words: list[str]
    target_words: list[str]
    weights: torch.Tensor
    truncated: bool


@dataclass
class _Line:
    ids: list[int]  # the pieces of the words kept
    word_of_piece: list[int]
    num_words: int  # how many words were kept


def _word_pieces(token_ids: Sequence[Sequence[int]], limit: int | None) -> _Line:
    """The pieces of a line's words (``token_ids``: per word) and the word of each, cut before the word that would
    take the line past ``limit`` pieces."""
    line = _Line([], [], 0)
    for index, pieces in enumerate(token_ids):
        if limit is not None and len(line.ids) + len(pieces) > limit:
            break
        line.ids += pieces
        line.word_of_piece += [index] * len(pieces)
        line.num_words = index + 1
    return line


def _tokenized_words(
    tokenizer: PreTrainedTokenizerBase, lines: Sequence[list[str]], target: bool
) -> list[list[list[int]]]:
    """The piece ids of every word of every line (no special tokens)."""
    flat = [word for words in lines for word in words]
    encoded = (
        tokenizer(text_target=flat, add_special_tokens=False) if target else tokenizer(flat, add_special_tokens=False)
    )["input_ids"]
    per_line, start = [], 0
    for words in lines:
        per_line.append(encoded[start : start + len(words)])
        start += len(words)
    return per_line


def _pad(rows: list[list[int]], value: int) -> torch.Tensor:
    width = max(len(row) for row in rows)
    return torch.tensor([row + [value] * (width - len(row)) for row in rows], dtype=torch.long)


@torch.no_grad()
def word_cross_attention(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sources: Sequence[str],
    targets: Sequence[str],
    batch_size: int = 32,
) -> Iterator[WordAttention]:
    """Teacher-force ``model`` on each (source, target) pair and sum its cross-attention to words.

    Args:
        model: An encoder–decoder translation model in eval mode whose forward returns ``cross_attentions`` with
            ``output_attentions=True`` (AdaptiveEntmaxMarian, or Marian with eager attention).
        tokenizer: Its tokenizer.
        sources, targets: Line-aligned sentences; each must have at least one word.
        batch_size: Pairs per forward pass.

    Yields:
        One `WordAttention` per pair, in order.
    """
    config = model.config
    length_limit = input_length_limit(config, tokenizer)
    # The limit holds the end-of-sentence token too (and, for the decoder, the start token).
    limit = None if length_limit is None else length_limit[0] - 1
    eos, pad, start = config.eos_token_id, config.pad_token_id, config.decoder_start_token_id
    for first in range(0, len(sources), batch_size):
        source_words = [line.split() for line in sources[first : first + batch_size]]
        target_words = [line.split() for line in targets[first : first + batch_size]]
        source_lines = [_word_pieces(ids, limit) for ids in _tokenized_words(tokenizer, source_words, False)]
        target_lines = [_word_pieces(ids, limit) for ids in _tokenized_words(tokenizer, target_words, True)]
        input_ids = _pad([[*line.ids, eos] for line in source_lines], pad)  # (B, S)
        decoder_input_ids = _pad([[start, *line.ids] for line in target_lines], pad)  # (B, T): labels shifted right
        outputs = model(
            input_ids=input_ids.to(model.device),
            attention_mask=_lengths_mask(source_lines).to(model.device),
            decoder_input_ids=decoder_input_ids.to(model.device),
            decoder_attention_mask=_lengths_mask(target_lines).to(model.device),
            output_attentions=True,
            use_cache=False,
        )
        attention = torch.stack(outputs.cross_attentions, dim=1).float().cpu()  # (B, layers, heads, T, S)
        weights = _summed_to_words(attention, source_lines, target_lines)  # (steps, B, layers, heads, V, W + 1)
        num_words = weights.shape[-1] - 1
        for row, (source, target) in enumerate(zip(source_lines, target_lines, strict=True)):
            columns = [*range(source.num_words), num_words]  # the row's words, then the end of sentence
            yield WordAttention(
                source_words=source_words[row][: source.num_words],
                target_words=target_words[row][: target.num_words],
                weights=weights[:, row, :, :, : target.num_words, columns],
                truncated=source.num_words < len(source_words[row]) or target.num_words < len(target_words[row]),
            )


def _summed_to_words(attention: torch.Tensor, source_lines: list[_Line], target_lines: list[_Line]) -> torch.Tensor:
    """``(B, layers, heads, T, S)`` piece attention → ``(steps, B, layers, heads, V, W + 1)``: summed over the pieces
    of each of the W source words (the last column: the end-of-sentence token) and averaged over the pieces of each of
    the V target words, for each of `QUERY_STEPS`."""
    batch_size, _, _, num_queries, num_keys = attention.shape
    num_source_words = max(line.num_words for line in source_lines)
    num_target_words = max(line.num_words for line in target_lines)
    to_source_words = torch.zeros(batch_size, num_keys, num_source_words + 1)
    from_target_words = torch.zeros(len(QUERY_STEPS), batch_size, num_target_words, num_queries)
    for row, (source, target) in enumerate(zip(source_lines, target_lines, strict=True)):
        to_source_words[row, torch.arange(len(source.ids)), torch.tensor(source.word_of_piece, dtype=torch.long)] = 1
        to_source_words[row, len(source.ids), -1] = 1  # the end-of-sentence token
        word_of_piece = torch.tensor(target.word_of_piece, dtype=torch.long)
        for step in range(len(QUERY_STEPS)):
            # Label i is predicted at step i and read (as the decoder's input) at step i + 1.
            from_target_words[step, row, word_of_piece, torch.arange(len(target.ids)) + step] = 1
    # The mean over each target word's pieces (a word without pieces gets zeros).
    from_target_words /= from_target_words.sum(-1, keepdim=True).clamp(min=1.0)
    by_source_word = attention @ to_source_words[:, None, None]  # (B, layers, heads, T, W + 1)
    return from_target_words[:, :, None, None] @ by_source_word  # (steps, B, layers, heads, V, W + 1)


def _lengths_mask(lines: list[_Line]) -> torch.Tensor:
    """``(B, L)`` 1 at each line's pieces and the token after them (end of sentence, or the decoder's start token
    before them), 0 at padding."""
    return _pad([[1] * (len(line.ids) + 1) for line in lines], 0)


__all__ = ["QUERY_STEPS", "WordAttention", "word_cross_attention"]
