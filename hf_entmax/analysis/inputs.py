"""What an analysis reads: a model folder (AdaptiveEntmaxMarian or plain Marian), its α history, sentence files.

Every problem is reported as one `HfEntmaxError` line naming the file or flag and what was expected.
"""

import json
import logging
import os
from pathlib import Path

from transformers import MarianMTModel, PreTrainedModel, PreTrainedTokenizerBase

from ..common.model_folder import check_model_folder, load_pretrained, load_tokenizer
from ..common.records import ALPHA_HISTORY_FILE
from ..common.text_files import listed_lines, read_aligned_lines, read_sentences
from ..errors import HfEntmaxValueError
from ..modeling.configuration_adaptive_entmax_marian import ATTENTION_TYPES, AdaptiveEntmaxMarianConfig
from ..modeling.modeling_adaptive_entmax_marian import AdaptiveEntmaxMarianMTModel


logger = logging.getLogger(__name__)

ANALYSABLE_MODEL_TYPES = (AdaptiveEntmaxMarianConfig.model_type, "marian")


def load_analysable_model(
    folder: str | os.PathLike, flag: str = "model"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load an AdaptiveEntmaxMarian or plain (softmax) Marian folder in eval mode, with its tokenizer.

    A Marian model gets eager attention, the implementation that returns its attention probabilities.

    Raises:
        The errors of `check_model_folder`, and HfEntmaxValueError for weights, a config or a tokenizer that cannot
        be loaded.
    """
    name = f"{flag} {folder}"
    if check_model_folder(Path(folder), name, ANALYSABLE_MODEL_TYPES)["model_type"] == "marian":
        model = load_pretrained(MarianMTModel, Path(folder), name, use_safetensors=True, attn_implementation="eager")
    else:
        model = load_pretrained(AdaptiveEntmaxMarianMTModel, Path(folder), name, use_safetensors=True)
    # With the config given, the tokenizer does not load the folder's remote code.
    tokenizer = load_tokenizer(Path(folder), name, config=model.config)
    return model.eval(), tokenizer


def read_alpha_history(folder: str | os.PathLike) -> list[dict] | None:
    """The α per head at every logged training step that `hf-entmax train` wrote, or None without the file.

    Returns:
        ``[{"step": s, "encoder_self": [[α per head] per layer], "decoder_self": …, "cross": …}, …]``.

    Raises:
        HfEntmaxValueError: If the file is not a list of such records.
    """
    path = Path(folder) / ALPHA_HISTORY_FILE
    if not path.is_file():
        return None
    try:
        history = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise HfEntmaxValueError(
            f"{path}: not valid JSON ({error}); expected the file hf-entmax train writes"
        ) from None
    if not isinstance(history, list) or not all(
        isinstance(record, dict) and "step" in record and set(record) - {"step"} <= set(ATTENTION_TYPES)
        for record in history
    ):
        raise HfEntmaxValueError(
            f'{path}: expected a list of {{"step": …, "encoder_self": [[α per head] per layer], …}} records'
        )
    return history or None


def read_sample(
    source_file: str | os.PathLike, target_file: str | os.PathLike | None = None, sample_size: int | None = None
) -> tuple[list[str], list[str] | None]:
    """The first ``sample_size`` sentences (or pairs) of line-aligned UTF-8 text files, one sentence a line.

    Empty lines (pairs with an empty side) are skipped.

    Returns:
        ``(sources, targets)``; ``targets`` is None without a ``target_file``.

    Raises:
        HfEntmaxFileNotFoundError: If a file does not exist.
        HfEntmaxValueError: If a file is not UTF-8 (naming the line), the line counts differ, or there is no
            sentence.
    """
    if sample_size is not None and sample_size < 1:
        raise HfEntmaxValueError(f"--sample_size must be a positive number of sentences, got {sample_size}")
    if target_file is None:
        return read_sentences(source_file)[:sample_size], None
    sources, targets = read_aligned_lines(source_file, target_file)
    pairs = [(source.strip(), target.strip()) for source, target in zip(sources, targets, strict=True)]
    one_sided = [line_no for line_no, pair in enumerate(pairs, start=1) if not all(pair)]
    if one_sided:
        logger.warning(
            f"skipped {len(one_sided)} line(s) with an empty source or target in {source_file} / {target_file} "
            f"(lines {listed_lines(one_sided)})"
        )
    pairs = [pair for pair in pairs if all(pair)][:sample_size]
    if not pairs:
        raise HfEntmaxValueError(f"{source_file} / {target_file} contains no sentence pairs")
    return [source for source, _ in pairs], [target for _, target in pairs]


__all__ = [
    "ANALYSABLE_MODEL_TYPES",
    "load_analysable_model",
    "read_alpha_history",
    "read_sample",
]
