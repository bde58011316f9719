"""A joint source–target SentencePiece tokenizer trained from text, saved in the transformers format."""

import io
from collections.abc import Iterable

import sentencepiece
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast


PAD_TOKEN, EOS_TOKEN, UNK_TOKEN = "<pad>", "</s>", "<unk>"


def train_joint_tokenizer(
    texts: Iterable[str], vocab_size: int = 8000, model_max_length: int = 512
) -> PreTrainedTokenizerFast:
    """Train a SentencePiece unigram model on source and target text together, as Marian models use.

    The pieces and their scores are carried into a `tokenizers` Unigram model (NFKC normalisation, "▁" word
    marker), so the result saves as ``tokenizer.json`` and loads with ``AutoTokenizer``, with no sentencepiece
    or protobuf needed to use it. As in Marian, ``<pad>`` has id 0 (it also starts decoding), ``</s>`` (id 1)
    ends every sequence and ``<unk>`` is id 2.

    Args:
        texts: Sentences of both languages.
        vocab_size: Vocabulary size; a corpus too small for it yields fewer pieces instead of failing.
        model_max_length: Longest sequence the tokenizer produces with ``truncation=True``.
    """
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        model_type="unigram",
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        character_coverage=1.0,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        pad_piece=PAD_TOKEN,
        eos_piece=EOS_TOKEN,
        unk_piece=UNK_TOKEN,
        minloglevel=2,
    )
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
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        model_max_length=model_max_length,
    )
