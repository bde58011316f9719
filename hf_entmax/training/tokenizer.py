"""A joint source–target subword tokenizer trained from text, saved in the transformers format."""

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast


PAD_TOKEN, EOS_TOKEN, UNK_TOKEN = "<pad>", "</s>", "<unk>"


def train_joint_tokenizer(
    texts: Iterable[str], vocab_size: int = 8000, model_max_length: int = 512
) -> PreTrainedTokenizerFast:
    """Train a unigram subword tokenizer, SentencePiece-style, on source and target text together.

    Text is NFKC-normalised and split on whitespace with SentencePiece's "▁" word marker, so decoding
    restores the original spacing. As in Marian, every sequence ends with ``</s>`` and ``<pad>`` has id 0
    (it also starts decoding).

    Args:
        texts: Sentences of both languages.
        vocab_size: Target vocabulary size (smaller corpora may yield fewer pieces).
        model_max_length: Longest sequence the tokenizer will produce with ``truncation=True``.

    Returns:
        A tokenizer that ``save_pretrained`` writes as ``tokenizer.json`` and ``AutoTokenizer`` loads back.
    """
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD_TOKEN, EOS_TOKEN, UNK_TOKEN],
        unk_token=UNK_TOKEN,
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    eos_id = tokenizer.token_to_id(EOS_TOKEN)
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
