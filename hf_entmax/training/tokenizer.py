"""A joint source–target SentencePiece tokenizer trained from text, saved in the transformers format.

SentencePiece leaves things out of its training without an error; here nothing is: lines over its byte limit (the
limit is raised to the longest line), lines holding its reserved character ▅ (trained with it as a space), characters
it would normalise otherwise than the saved tokenizer (both use NFKC), and an alphabet larger than ``vocab_size`` (one
line naming the size needed). What the vocabulary still cannot encode is measured on the training text: a share above
`MAX_UNKNOWN_SHARE` is refused, any smaller one named in a warning.
"""

import io
import logging
import random
import re
from collections import Counter
from collections.abc import Iterable

import sentencepiece
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from ..errors import HfEntmaxValueError


logger = logging.getLogger(__name__)

PAD_TOKEN, EOS_TOKEN, UNK_TOKEN = "<pad>", "</s>", "<unk>"
SPECIAL_TOKENS = (PAD_TOKEN, EOS_TOKEN, UNK_TOKEN)

# SentencePiece's recommendation: a vocabulary covering 99.95% of the characters of text in a language with thousands
# of characters (Japanese, Chinese), the rarest left <unk>, so that they do not crowd out pieces; every character
# of text in other languages.
FULL_COVERAGE = 1.0
RICH_SCRIPT_COVERAGE = 0.9995
# Characters of Chinese, Japanese and Korean: Hangul Jamo, CJK radicals, CJK punctuation with kana and Bopomofo,
# CJK extension A, unified ideographs, Hangul syllables, compatibility ideographs, half-width katakana, and the
# supplementary ideographic planes.
RICH_SCRIPT_CHARACTER = re.compile(
    "[\u1100-\u11ff\u2e80-\u2fdf\u3000-\u31ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff"
    "\uff66-\uff9f\U00020000-\U0003ffff]"
)
# The share of those characters that marks a text as Chinese, Japanese or Korean: one such side of a parallel corpus
# is 15-40% of its characters; names and quotes in text of other languages are far fewer.
RICH_SCRIPT_SHARE = 0.1
# SentencePiece skips every training line longer than this many bytes (its max_sentence_length default).
SENTENCEPIECE_MAX_BYTES = 4192
# SentencePiece marks left-out characters with this one internally, and skips every training line holding it.
SENTENCEPIECE_RESERVED = "\u2585"
# The share of the training text's characters the vocabulary may leave <unk>: 20 × the 0.05% that
# RICH_SCRIPT_COVERAGE leaves by design, far below what a script missing from the vocabulary leaves (the Japanese side
# of a ja–en corpus is a quarter of its characters or more).
MAX_UNKNOWN_SHARE = 0.01
# Sentences the unknown share is measured on: all of a smaller corpus, a random sample of a larger one (some 500,000
# characters, plenty to tell a 1% share from the 0.05% of the coverage).
UNKNOWN_SAMPLE_SIZE = 20_000
# How many of the most frequent unknown characters a message names.
LISTED_CHARACTERS = 5
# SentencePiece's check that the alphabet fits the vocabulary ("... required_chars. 1000 vs 1163.").
ALPHABET_TOO_LARGE = re.compile(r"smaller than required_chars\. (\d+) vs (\d+)")
# Where in its C++ code a SentencePiece check failed, before the check itself.
SENTENCEPIECE_SOURCE = re.compile(r"^\w+: \S+\(\d+\) ")


def train_joint_tokenizer(
    texts: Iterable[str], vocab_size: int = 8000, model_max_length: int = 512
) -> PreTrainedTokenizerFast:
    """Train a SentencePiece unigram model on source and target text together, as Marian models use.

    The pieces and their scores are carried into a `tokenizers` Unigram model (NFKC normalisation, "▁" word
    marker), so the result saves as ``tokenizer.json`` and loads with ``AutoTokenizer``, with no sentencepiece
    or protobuf needed to use it. As in Marian, ``<pad>`` has id 0 (it also starts decoding), ``</s>`` (id 1)
    ends every sequence and ``<unk>`` is id 2.

    Every line trains the vocabulary, however long. It holds every character of the text or, when a tenth or more are
    Chinese, Japanese or Korean, the commonest ones that make up 99.95% of it (`character_coverage`, as SentencePiece
    recommends); the characters it leaves ``<unk>`` are named in a warning.

    Args:
        texts: Sentences of both languages.
        vocab_size: Vocabulary size; a corpus too small for it yields fewer pieces instead of failing.
        model_max_length: Longest sequence the tokenizer produces with ``truncation=True``.

    Raises:
        HfEntmaxValueError: If there is no text, ``vocab_size`` cannot hold the text's characters (naming the size
            that can), the vocabulary leaves more than `MAX_UNKNOWN_SHARE` of the text ``<unk>``, or SentencePiece
            fails otherwise.
    """
    texts = list(texts)
    if not any(texts):
        raise HfEntmaxValueError("there is no text to train the tokenizer on")
    coverage = character_coverage(texts)
    model = io.BytesIO()
    try:
        sentencepiece.SentencePieceTrainer.train(
            # SentencePiece skips a line with its reserved character; as a space the rest of the line still counts.
            sentence_iterator=(text.replace(SENTENCEPIECE_RESERVED, " ") for text in texts),
            model_writer=model,
            model_type="unigram",
            vocab_size=vocab_size,
            hard_vocab_limit=False,
            character_coverage=coverage,
            # The saved tokenizer's normalisation: the default nmt_nfkc also turns tabs, zero-width spaces and control
            # characters into spaces or nothing, which the saved tokenizer would not do, leaving them <unk>.
            normalization_rule_name="nfkc",
            # No line is over this (UTF-8 takes at most 4 bytes a character), so SentencePiece skips none.
            max_sentence_length=max(SENTENCEPIECE_MAX_BYTES, 4 * max(map(len, texts))),
            pad_id=0,
            eos_id=1,
            unk_id=2,
            bos_id=-1,
            pad_piece=PAD_TOKEN,
            eos_piece=EOS_TOKEN,
            unk_piece=UNK_TOKEN,
            minloglevel=2,
        )
    except RuntimeError as error:  # sentencepiece reports every failed check of its C++ code as a RuntimeError
        raise HfEntmaxValueError(_training_error(error, vocab_size, coverage)) from None
    processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    pieces = [(processor.id_to_piece(i), processor.get_score(i)) for i in range(processor.get_piece_size())]

    tokenizer = Tokenizer(models.Unigram(pieces, unk_id=processor.unk_id()))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    eos_id = processor.eos_id()
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS_TOKEN}", pair=f"$A $B {EOS_TOKEN}", special_tokens=[(EOS_TOKEN, eos_id)]
    )
    check_unknown_characters(tokenizer, texts, coverage)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        model_max_length=model_max_length,
    )


def character_coverage(texts: list[str]) -> float:
    """SentencePiece's ``character_coverage`` for ``texts``: `RICH_SCRIPT_COVERAGE` when at least `RICH_SCRIPT_SHARE`
    of their characters (spaces left out) are Chinese, Japanese or Korean, else `FULL_COVERAGE`."""
    rich = total = 0
    # Joined a few thousand at a time: one regular-expression pass per chunk instead of per sentence.
    for start in range(0, len(texts), 4096):
        chunk = "".join(texts[start : start + 4096])
        rich += len(RICH_SCRIPT_CHARACTER.findall(chunk))
        total += len(chunk) - chunk.count(" ")
    return RICH_SCRIPT_COVERAGE if rich >= RICH_SCRIPT_SHARE * total else FULL_COVERAGE


def check_unknown_characters(tokenizer: Tokenizer, texts: list[str], coverage: float) -> None:
    """Measure which characters of ``texts`` ``tokenizer`` encodes as ``<unk>``: refuse a vocabulary that leaves more
    than `MAX_UNKNOWN_SHARE` of them unknown, and name those it leaves in a warning.

    Args:
        tokenizer: The trained tokenizer (its normaliser and pre-tokenizer set).
        texts: Its training text; a random sample of `UNKNOWN_SAMPLE_SIZE` sentences is measured when longer.
        coverage: The character coverage it was trained with, for the messages.

    Raises:
        HfEntmaxValueError: If more than `MAX_UNKNOWN_SHARE` of the characters are unknown.
    """
    sample = texts if len(texts) <= UNKNOWN_SAMPLE_SIZE else random.Random(0).sample(texts, UNKNOWN_SAMPLE_SIZE)
    unk_id = tokenizer.token_to_id(UNK_TOKEN)
    unknown = Counter()
    for text, encoding in zip(sample, tokenizer.encode_batch(sample, add_special_tokens=False), strict=True):
        # A run of unknown characters is one <unk> token; its offsets give the characters it stands for.
        unknown.update(
            character
            for token_id, (start, end) in zip(encoding.ids, encoding.offsets, strict=True)
            if token_id == unk_id
            for character in text[start:end]
            if character != " "
        )
    if not unknown:
        return
    total = sum(len(text) - text.count(" ") for text in sample)
    share = sum(unknown.values()) / total
    listed = ", ".join(
        f"{character!r} (U+{ord(character):04X})" for character, _ in unknown.most_common(LISTED_CHARACTERS)
    )
    measured = "" if sample is texts else f", measured on {len(sample):,} of its {len(texts):,} sentences"
    if share > MAX_UNKNOWN_SHARE:
        reserved = (
            f"; SentencePiece reserves {SENTENCEPIECE_RESERVED!r} for itself"
            if SENTENCEPIECE_RESERVED in unknown
            else ""
        )
        raise HfEntmaxValueError(
            f"the trained vocabulary has no piece for {share:.1%} of the training text's characters{measured}; they "
            f"would become {UNK_TOKEN} (most often {listed}){reserved}: replace or remove them in the data, or give "
            "a tokenizer that covers them with --tokenizer_name"
        )
    why = (
        f"the rarest characters of Chinese, Japanese or Korean text, left out at SentencePiece's recommended "
        f"character coverage of {coverage:.2%}"
        if coverage < FULL_COVERAGE
        else "characters SentencePiece could not learn"
    )
    characters = "1 character" if len(unknown) == 1 else f"{len(unknown):,} characters"
    logger.warning(
        f"tokenizer: no piece for {characters} of the training text ({share:.3%} of its characters{measured}), "
        f"which become {UNK_TOKEN}: {why} (most often {listed})"
    )


def _training_error(error: RuntimeError, vocab_size: int, coverage: float) -> str:
    """One line for a failed SentencePiece training: the vocabulary size needed, or SentencePiece's own reason."""
    message = " ".join(str(error).split())
    alphabet = ALPHABET_TOO_LARGE.search(message)
    if alphabet is None:
        # "INTERNAL: src/trainer_interface.cc(638) [check] reason": the reason (else the check) is what a user reads.
        check = SENTENCEPIECE_SOURCE.sub("", message)
        return f"training the SentencePiece tokenizer (--vocab_size {vocab_size}) failed: {check.rpartition('] ')[2]}"
    needed = int(alphabet.group(2))
    covered = (
        f"the {coverage:.2%} of its characters SentencePiece keeps for Chinese, Japanese or Korean text"
        if coverage < FULL_COVERAGE
        else "every character"
    )
    return (
        f"--vocab_size {vocab_size} is too small for the training text: a piece for {covered} and the "
        f"{len(SPECIAL_TOKENS)} special tokens need {needed:,}; give --vocab_size {needed} or more (a few thousand "
        "more leave room for pieces longer than one character)"
    )
