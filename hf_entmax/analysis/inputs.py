"""What an analysis reads: a model folder (AdaptiveEntmaxMarian or plain Marian), its α history, sentence files.

Every problem is reported as one `HfEntmaxError` line naming the file or flag and what was expected.
"""

import json
import os
from pathlib import Path

from transformers import MarianMTModel, PreTrainedModel, PreTrainedTokenizerBase

from ..errors import HfEntmaxFileNotFoundError, HfEntmaxValueError
from ..hub.export import check_safetensors_weights, load_pretrained, load_tokenizer, read_model_config
from ..modeling.configuration_adaptive_entmax_marian import ATTENTION_TYPES, AdaptiveEntmaxMarianConfig
from ..modeling.modeling_adaptive_entmax_marian import AdaptiveEntmaxMarianMTModel
from ..training.data import iter_lines, read_text_pair
from ..training.run import ALPHA_HISTORY_FILE


ANALYSABLE_MODEL_TYPES = (AdaptiveEntmaxMarianConfig.model_type, "marian")


def check_model_folder(folder: str | os.PathLike, flag: str = "model") -> str:
    """Check, without loading anything, that ``folder`` holds an analysable model; return its model type.

    Raises:
        HfEntmaxFileNotFoundError: If the folder or its config.json does not exist.
        HfEntmaxValueError: If config.json is not valid JSON, or the folder holds another kind of model, no
            safetensors weights or two sets of them.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise HfEntmaxFileNotFoundError(f"{flag} {folder}: no such folder")
    model_type = read_model_config(folder, f"{flag} {folder}").get("model_type")
    if model_type not in ANALYSABLE_MODEL_TYPES:
        raise HfEntmaxValueError(
            f"{flag} {folder} holds a {model_type!r} model; expected an AdaptiveEntmaxMarian or Marian model"
        )
    check_safetensors_weights(folder, f"{flag} {folder}")
    return model_type


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
    if check_model_folder(folder, flag) == "marian":
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
    if target_file is not None:
        # The training data reader, so the same checks apply (line counts, UTF-8 with the line number).
        pairs = read_text_pair(source_file, target_file, "source", "target")["translation"][:sample_size]
        return [pair["source"] for pair in pairs], [pair["target"] for pair in pairs]
    sources = [line.strip() for _, line in iter_lines(Path(source_file)) if line.strip()]
    if not sources:
        raise HfEntmaxValueError(f"{source_file} contains no sentences (expected one sentence a line)")
    return sources[:sample_size], None


__all__ = [
    "ANALYSABLE_MODEL_TYPES",
    "check_model_folder",
    "load_analysable_model",
    "read_alpha_history",
    "read_sample",
]
