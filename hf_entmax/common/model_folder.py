"""The model-folder check: what every command that reads a model folder verifies before loading it, and the loaders
that turn what can be wrong in a folder (a cut-off file, a config the class refuses, a missing tokenizer, pickled
objects) into one line naming the folder.

Training (`--model_name_or_path`), the Hub side (convert, export, the load check, push), the analysis and
`hf-entmax translate` all read folders through this module.
"""

import json
import os
import pickle
import re
from collections.abc import Sequence
from pathlib import Path

from huggingface_hub.errors import StrictDataclassError
from safetensors import SafetensorError
from transformers import AutoTokenizer, PreTrainedConfig, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as transformers_logging

from ..errors import HfEntmaxFileNotFoundError, HfEntmaxValueError, last_line
from ..modeling.configuration_adaptive_entmax_marian import AdaptiveEntmaxMarianConfig, check_generation_settings


# The two ways of storing safetensors weights. A folder holds one: transformers loads model.safetensors when it is
# there and ignores the shards, so a folder with both is one whose other set is stale.
SAFETENSORS_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
# Files whose loading unpickles, i.e. can run arbitrary code: never part of a published folder.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".joblib")
# The model types hf-entmax reads, as messages name them.
MODEL_TYPE_NAMES = {AdaptiveEntmaxMarianConfig.model_type: "AdaptiveEntmaxMarian", "marian": "Marian"}


def read_model_config(folder: Path, name: str) -> dict:
    """The ``config.json`` of a model folder, as a dict.

    Args:
        folder: The model folder.
        name: How the user named it, for the messages (``--model <folder>``).

    Raises:
        HfEntmaxFileNotFoundError: If the folder has no config.json.
        HfEntmaxValueError: If it is not a JSON object (e.g. cut off).
    """
    path = folder / "config.json"
    if not path.is_file():
        raise HfEntmaxFileNotFoundError(f"{name}: no config.json there (not a model folder)")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise HfEntmaxValueError(f"{name}: {path} is not valid JSON ({error}); write the folder again") from None
    if not isinstance(config, dict):
        raise HfEntmaxValueError(f"{name}: {path} holds a JSON {type(config).__name__}, not a config object")
    return config


def check_safetensors_weights(folder: Path, name: str) -> None:
    """Refuse a model folder without safetensors weights, or with both a ``model.safetensors`` and a sharded index
    (transformers would load the first and ignore the shards: one of the two sets is stale).

    Raises:
        HfEntmaxValueError: naming ``name`` and the files.
    """
    present = [weights for weights in SAFETENSORS_WEIGHTS if (folder / weights).is_file()]
    if not present:
        raise HfEntmaxValueError(f"{name} has no safetensors weights (hf-entmax never unpickles weights)")
    if len(present) > 1:
        raise HfEntmaxValueError(
            f"{name} holds two sets of weights, {' and '.join(present)}: transformers loads model.safetensors and "
            "ignores the shards, so one set is stale; remove it (or export the model again into a new folder)"
        )


def check_model_folder(folder: Path, name: str, model_types: Sequence[str]) -> dict:
    """Check, without loading anything, that ``folder`` holds a model of one of ``model_types`` (config.json
    ``model_type``s, see `MODEL_TYPE_NAMES`) with one set of safetensors weights; return its config as a dict.

    Raises:
        HfEntmaxFileNotFoundError: If the folder or its config.json does not exist.
        HfEntmaxValueError: If config.json is not valid JSON, or the folder holds another kind of model (a
            decoder-only one included), no safetensors weights or two sets of them.
    """
    if not folder.is_dir():
        raise HfEntmaxFileNotFoundError(f"{name}: no such folder")
    config = read_model_config(folder, name)
    model_type = config.get("model_type")
    if model_type not in model_types:
        expected = " or ".join(MODEL_TYPE_NAMES[accepted] for accepted in model_types)
        article = "an" if expected[0] in "AEIOU" else "a"
        advice = ": convert it with `hf-entmax convert`" if model_type == "marian" else ""
        raise HfEntmaxValueError(f"{name} holds a {model_type!r} model; expected {article} {expected} model{advice}")
    if config.get("is_encoder_decoder") is False:
        # AdaptiveEntmaxMarianForCausalLM shares the config class (and model_type) of the translation model.
        architecture = ", ".join(config.get("architectures") or ["a decoder stack"])
        raise HfEntmaxValueError(
            f"{name} holds a decoder-only model ({architecture}); this command takes an encoder–decoder (translation) "
            "model: load a decoder-only one with AutoModelForCausalLM"
        )
    check_safetensors_weights(folder, name)
    return config


def find_pickle_files(folder: str | os.PathLike) -> list[str]:
    """Paths (relative to ``folder``, sorted) of the files whose loading would unpickle."""
    folder = Path(folder)
    return sorted(
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*")
        if path.is_file() and path.suffix.lower() in PICKLE_SUFFIXES
    )


def load_config(config_class: type[PreTrainedConfig], folder: Path, name: str) -> PreTrainedConfig:
    """``config_class.from_pretrained(folder)``; a config.json whose fields the class refuses is one line.

    Raises:
        HfEntmaxValueError: naming ``name`` and the field.
    """
    try:
        return config_class.from_pretrained(folder)
    except (StrictDataclassError, OSError, ValueError) as error:
        raise HfEntmaxValueError(f"{name}: its config.json is not valid ({last_line(str(error))})") from None


def load_tokenizer(folder: Path, name: str, **kwargs) -> PreTrainedTokenizerBase:
    """``AutoTokenizer.from_pretrained(folder, **kwargs)``; a folder without a usable tokenizer is one line.

    Raises:
        HfEntmaxValueError: naming ``name``, with the reason and the files a tokenizer needs.
    """
    try:
        return AutoTokenizer.from_pretrained(folder, **kwargs)
    except (OSError, ValueError, TypeError) as error:  # TypeError: a Marian tokenizer without its files
        raise HfEntmaxValueError(
            f"{name}: could not load its tokenizer ({last_line(str(error)) or type(error).__name__}); a model "
            "folder needs its tokenizer files (tokenizer_config.json with tokenizer.json, or Marian's source.spm, "
            "target.spm and vocab.json)"
        ) from None


def load_pretrained(
    model_class: type[PreTrainedModel], folder: Path, name: str, *, progress: bool = True, **kwargs
) -> PreTrainedModel:
    """``model_class.from_pretrained(folder, **kwargs)``, with what can be wrong in a folder as one line.

    ``progress=False`` hides transformers' progress bar while the weights load.

    Raises:
        HfEntmaxValueError: naming ``name``, for a cut-off or corrupt weights file, a config the model class refuses,
            weights that do not fit (AdaptiveEntmaxMarian's load-time check: layers, sizes, learned α), a generation
            config that ``generate`` would fail on (``num_beams`` 0, a token id past the vocabulary, more tokens than
            the decoder's positions), or pickled weights holding more than tensors (torch's ``weights_only`` loader
            refuses them: hf-entmax never unpickles code).
    """
    hide_bar = not progress and transformers_logging.is_progress_bar_enabled()
    if hide_bar:
        transformers_logging.disable_progress_bar()
    try:
        loaded = model_class.from_pretrained(folder, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded  # (model, loading info) with output_loading_info
        if getattr(model, "generation_config", None) is not None:
            # AdaptiveEntmaxMarian's from_pretrained has checked it already; MarianMTModel's does not.
            check_generation_settings(model.generation_config.to_dict(), model.config, f"{folder}: generation config")
        return loaded
    except pickle.UnpicklingError as error:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(error))
        files = ", ".join(path for path in find_pickle_files(folder) if "/" not in path) or "its pickled weights"
        raise HfEntmaxValueError(
            f"{name}: torch's weights_only loader refuses {files}: it holds {found.group(1) if found else 'objects'}, "
            "not only tensors, and hf-entmax never runs code from a checkpoint (not even with --allow_pickle)"
        ) from None
    except SafetensorError as error:
        files = [weights for weights in SAFETENSORS_WEIGHTS if (folder / weights).is_file()]
        raise HfEntmaxValueError(
            f"{name}: {' / '.join(files) or 'its weights'} could not be read ({last_line(str(error))}): the file is "
            "cut off or corrupt; write or download it again"
        ) from None
    except (StrictDataclassError, OSError, ValueError, RuntimeError) as error:
        raise HfEntmaxValueError(f"{name} could not be loaded: {last_line(str(error))}") from None
    finally:
        if hide_bar:
            transformers_logging.enable_progress_bar()
