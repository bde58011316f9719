"""The joint SentencePiece tokenizer: character coverage by script, every line trained, the vocabulary size an alphabet
needs, and the <unk> share of the training text (what users see of them is probed in tests/probes_data.py)."""

import logging
import re

import pytest

from hf_entmax.errors import HfEntmaxValueError
from hf_entmax.training import tokenizer as tokenizer_module
from hf_entmax.training.synthetic import generate_pairs
from hf_entmax.training.tokenizer import (
    FULL_COVERAGE,
    RICH_SCRIPT_COVERAGE,
    character_coverage,
    train_joint_tokenizer,
)


ENGLISH = [source for source, _ in generate_pairs(40, seed=2)]
# Chinese-like sentences: 12 ideographs each from the first 200 of U+4E00 on.
CHINESE = ["".join(chr(0x4E00 + (7 * index + 13 * position) % 200) for position in range(12)) for index in range(40)]


def unknown_tokens(tokenizer, text: str) -> int:
    return tokenizer(text)["input_ids"].count(tokenizer.unk_token_id)


def test_coverage_follows_sentencepieces_recommendation_by_script():
    assert character_coverage(CHINESE + ENGLISH) == RICH_SCRIPT_COVERAGE
    # A few Chinese names in English text do not make it Chinese.
    assert character_coverage([*ENGLISH, "北京 and 上海"]) == FULL_COVERAGE
    assert character_coverage(["der kleine hund", "ελληνικά", "русский текст"]) == FULL_COVERAGE


def test_vocabulary_below_the_alphabet_names_the_size_that_fits():
    texts = CHINESE + ENGLISH
    with pytest.raises(
        HfEntmaxValueError, match=r"--vocab_size 100 is too small .* give --vocab_size \d+ or more"
    ) as raised:
        train_joint_tokenizer(texts, vocab_size=100)
    needed = int(re.search(r"give --vocab_size (\d+)", str(raised.value)).group(1))
    # The size named is enough: a piece for every character kept, none longer.
    assert len(train_joint_tokenizer(texts, vocab_size=needed)) == needed


def test_other_sentencepiece_failures_are_one_line():
    with pytest.raises(HfEntmaxValueError, match=r"^training the SentencePiece tokenizer \(--vocab_size 0\) failed: "):
        train_joint_tokenizer(ENGLISH, vocab_size=0)


def test_no_text_is_an_error():
    with pytest.raises(HfEntmaxValueError, match="no text to train the tokenizer on"):
        train_joint_tokenizer(["", ""], vocab_size=50)


def test_lines_over_sentencepieces_byte_limit_train_the_vocabulary():
    long_line = " ".join(["ελληνικό κείμενο"] * 200)  # 6,199 bytes, the only Greek
    assert len(long_line.encode()) > tokenizer_module.SENTENCEPIECE_MAX_BYTES
    tokenizer = train_joint_tokenizer([*ENGLISH, long_line], vocab_size=200)
    assert unknown_tokens(tokenizer, "ελληνικό κείμενο") == 0


def test_rare_characters_left_out_by_the_coverage_are_named(caplog):
    rare = "鬱"  # once, in a text of some thousand Chinese characters
    with caplog.at_level(logging.WARNING, logger="hf_entmax.training.tokenizer"):
        tokenizer = train_joint_tokenizer([*CHINESE * 5, *ENGLISH, rare + CHINESE[0]], vocab_size=400)
    assert unknown_tokens(tokenizer, rare) == 1
    (message,) = caplog.messages
    assert message.startswith("tokenizer: no piece for 1 character of the training text")
    assert "character coverage of 99.95%" in message and "'鬱' (U+9B31)" in message


def test_latin_text_leaves_nothing_unknown(caplog):
    with caplog.at_level(logging.WARNING, logger="hf_entmax.training.tokenizer"):
        tokenizer = train_joint_tokenizer([*ENGLISH, "café naïve Ærø"], vocab_size=200)
    assert not caplog.messages
    assert unknown_tokens(tokenizer, "café naïve Ærø") == 0


def test_an_unknown_share_above_the_limit_is_refused_on_a_sample(monkeypatch):
    monkeypatch.setattr(tokenizer_module, "UNKNOWN_SAMPLE_SIZE", 30)
    texts = [f"{text} ▅▅" for text in ENGLISH]
    message = r"no piece for \d+\.\d% of the training text's characters, measured on 30 of its 40 sentences.*U\+2585"
    with pytest.raises(HfEntmaxValueError, match=message):
        train_joint_tokenizer(texts, vocab_size=200)
