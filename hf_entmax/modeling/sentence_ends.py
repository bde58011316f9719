"""Sentence ends: how many sentences a text holds, and a generation constraint that lets no translation stop before
it has as many as its source.

Why the constraint: a model trained on inputs of up to n sentences learns to end its output after about n of them,
and on a paragraph of more it stops early, whatever its attention (docs/benchmarks.md, "Translating joined
sentences"). Forbidding ``</s>`` until the output has as many sentence ends as the input removes that one failure and
leaves every other choice to the model.

This file is copied to the Hub next to the model (the translation pipeline uses it): it needs nothing but torch and
transformers.
"""

import re
from collections.abc import Sequence

import torch
from transformers import LogitsProcessor, PreTrainedTokenizerBase


# The marks that end a sentence: a full stop, question or exclamation mark before a space or the end of a line, or
# a full-width (CJK) one anywhere.
MARKS, FULL_WIDTH_MARKS = ".!?", "。！？"
SENTENCE_END = re.compile(rf"[{re.escape(MARKS)}](?=\s|$)|[{FULL_WIDTH_MARKS}]", re.MULTILINE)
SENTENCE_END_MARKS = tuple(MARKS + FULL_WIDTH_MARKS)


def count_sentence_ends(text: str) -> int:
    """The sentence ends (`SENTENCE_END`) in ``text``."""
    return len(SENTENCE_END.findall(text))


def sentence_end_token_ids(tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """``(n,)`` the ids of the tokens whose text ends with a sentence mark (``"."``, ``"▁."``, ``"etc."``, …): one of
    them in an output is one sentence ended. A mark inside a word (``3.5``) counts too, which can only let an output
    stop earlier, never keep it going."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    special = set(tokenizer.all_special_ids)
    ids = [
        index
        for index, token in enumerate(tokens)
        if token and index not in special and token.rstrip().endswith(SENTENCE_END_MARKS)
    ]
    return torch.tensor(ids, dtype=torch.long)


class SentenceEndsBeforeStop(LogitsProcessor):
    """Forbid the end token while a row's output has fewer sentence ends than its source.

    Args:
        needed: The sentence ends each source of the batch holds (`count_sentence_ends`); each source's rows
            (beams, returned sequences) follow one another, as `generate` expands them.
        end_token_ids: `sentence_end_token_ids` of the tokenizer.
        eos_token_id: The token that ends an output.
    """

    def __init__(self, needed: Sequence[int], end_token_ids: torch.Tensor, eos_token_id: int) -> None:
        self.needed = torch.as_tensor(list(needed), dtype=torch.long)
        self.end_token_ids = end_token_ids
        self.eos_token_id = eos_token_id

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """``input_ids`` ``(rows, length)`` so far and the next token's ``scores`` ``(rows, vocab)`` → the scores
        with the end token at −inf in the rows that may not stop yet."""
        rows_per_source = input_ids.shape[0] // len(self.needed)
        needed = self.needed.to(input_ids.device).repeat_interleave(rows_per_source)  # (rows,)
        written = torch.isin(input_ids, self.end_token_ids.to(input_ids.device)).sum(-1)  # (rows,)
        return scores.masked_fill(
            (written < needed)[:, None] & (torch.arange(scores.shape[-1], device=scores.device) == self.eos_token_id),
            float("-inf"),
        )
