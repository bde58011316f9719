"""Hub-ready folders: safetensors weights, config with remote code, tokenizer, generation config, model card.

`export_hub_folder` writes one; `check_folder_loads` proves that it works for someone without hf_entmax, by
loading it in a fresh Python process where hf_entmax cannot be imported and comparing what it computes.
"""

import dataclasses
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from huggingface_hub.errors import StrictDataclassError
from safetensors import SafetensorError
from transformers import AutoTokenizer, PreTrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

from ..errors import HfEntmaxError, HfEntmaxFileNotFoundError, HfEntmaxValueError
from ..modeling.configuration_adaptive_entmax_marian import AdaptiveEntmaxMarianConfig
from ..modeling.modeling_adaptive_entmax_marian import AdaptiveEntmaxMarianMTModel
from .model_card import ModelCardInfo, render_model_card


# The two ways of storing safetensors weights. A folder holds one: transformers loads model.safetensors when it is
# there and ignores the shards, so a folder with both is one whose other set is stale.
SAFETENSORS_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
# `max_shard_size` as people write it (the units of huggingface_hub's parser).
_SHARD_SIZE = re.compile(r"\s*\d+(\.\d+)?\s*[KMGT]B\s*", re.IGNORECASE)
# Files whose loading unpickles, i.e. can run arbitrary code: never part of a published folder.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".joblib")
# What `hf-entmax train` records next to the model (JSON and text, nothing that runs): they back the card's
# numbers, so `hf-entmax export` copies them and `hf-entmax push` uploads them.
RUN_RECORD_FILES = (
    "training_summary.json",
    "alpha_history.json",
    "all_results.json",
    "train_results.json",
    "eval_results.json",
    "test_results.json",
    "trainer_state.json",
    "generated_predictions.txt",
)
# The only variables of this process the load check's child gets: what Python, torch and the dynamic loader need
# to start as they do here. Nothing else passes (HF_TOKEN, cloud keys, …): the child runs the folder's code.
_LOAD_CHECK_VARIABLES = (
    "PATH",
    "HOME",
    "USERPROFILE",
    "SYSTEMROOT",
    "WINDIR",
    "TMPDIR",
    "TEMP",
    "TMP",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "PYTHONHOME",
    "PYTHONPATH",
    "PYTHONUSERBASE",
    "LD_LIBRARY_PATH",
    "DYLD_LIBRARY_PATH",
    "KMP_DUPLICATE_LIB_OK",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)
# Any text works to compare two implementations of the same model; a few languages, short and long.
CHECK_SENTENCES = [
    "The small dog runs fast.",
    "Zwei Katzen schlafen im Haus, während draußen der Regen fällt.",
    "Le musée ouvre à neuf heures.",
    "a man reads a book",
]
# Here the model may run on the native CPU kernel, there on the PyTorch implementation: both are accurate to
# float32 rounding, which the network amplifies to ~1e-5 in the logits. A different function (a wrong α, a
# lost mask) differs by orders of magnitude more.
_LOAD_CHECK_TOLERANCE = 1e-4

# Run in a fresh interpreter: load the folder the way a Hub user would, with hf_entmax made unimportable.
_FRESH_PROCESS_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.modules["hf_entmax"] = None  # as if hf_entmax were not installed
    import torch
    from transformers import AutoModelForSeq2SeqLM

    folder, inputs_path, results_path = sys.argv[1:]
    inputs = torch.load(inputs_path, weights_only=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    if not type(model).__module__.startswith("transformers_modules."):
        raise SystemExit(f"the model was not loaded from the folder's own code but from {type(model).__module__}")
    with torch.no_grad():
        logits = model(**inputs).logits
        generated = model.generate(
            input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], num_beams=1, do_sample=False,
            max_new_tokens=inputs["decoder_input_ids"].shape[1] - 1,
        )
    torch.save({"logits": logits, "generated": generated}, results_path)
    """
)


def export_hub_folder(
    model: AdaptiveEntmaxMarianMTModel,
    tokenizer: PreTrainedTokenizerBase,
    output_dir: str | os.PathLike,
    *,
    card: ModelCardInfo | None = None,
    max_shard_size: str | int = "2GB",
    extra_files: Mapping[str, str | os.PathLike] | None = None,
) -> Path:
    """Write a folder that loads anywhere with ``trust_remote_code=True`` and can be pushed to the Hub as it is.

    Contents: ``model.safetensors`` (or shards and ``model.safetensors.index.json`` above ``max_shard_size``),
    ``config.json`` with ``auto_map`` and the ``custom_pipelines`` translation entry, the flat modeling files,
    ``generation_config.json``, the tokenizer files and ``README.md`` (the model card, from ``card``; its tokenizer
    line defaults to the tokenizer's class and size), plus ``extra_files``: ``{path in the folder: file to copy
    there}``, e.g. the figures the card shows and the training run's records.

    Returns:
        The folder's path.
    """
    output_dir = Path(output_dir)
    check_shard_size(max_shard_size, "max_shard_size")
    check_export_target(output_dir)
    # Written whole into a fresh folder next to the target, then put in its place: no file of an earlier export (an
    # old model.safetensors next to new shards, which loading would prefer) survives, and a failure leaves the old.
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    try:
        # The model's save_pretrained also copies the flat code files and writes auto_map and custom_pipelines.
        model.save_pretrained(staging, max_shard_size=max_shard_size)
        tokenizer.save_pretrained(staging)
        card = card or ModelCardInfo()
        if card.tokenizer is None:
            card = dataclasses.replace(card, tokenizer=f"`{type(tokenizer).__name__}` ({len(tokenizer):,} tokens)")
        render_model_card(model, card).save(staging / "README.md")
        for destination, source in (extra_files or {}).items():
            (staging / destination).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, staging / destination)
        replace_folder(staging, output_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return output_dir


def check_export_target(output_dir: Path) -> None:
    """Refuse a target that is a file, or a non-empty folder that is not an earlier Hub-ready folder of this model
    type: an export replaces its target whole, so anything else in it (a training run's checkpoints, other files)
    would be lost."""
    if output_dir.exists() and not output_dir.is_dir():
        raise HfEntmaxValueError(f"{output_dir} is a file; export into a folder")
    if not output_dir.is_dir() or not any(output_dir.iterdir()):
        return
    from .push import select_upload_files  # push builds on this module

    refusal = (
        f"{output_dir} is not empty and not an earlier AdaptiveEntmaxMarian export, and an export replaces its "
        "folder whole"
    )
    try:
        model_type = read_model_config(output_dir, str(output_dir)).get("model_type")
        skipped = select_upload_files(output_dir).skipped
    except HfEntmaxError:
        model_type, skipped = None, []
    if model_type != AdaptiveEntmaxMarianConfig.model_type:
        raise HfEntmaxValueError(f"{refusal}: export into a new or empty folder")
    if skipped:
        listed = ", ".join(skipped[:5]) + (", …" if len(skipped) > 5 else "")
        raise HfEntmaxValueError(
            f"{refusal} (it holds {listed}, which an export does not write): export into a new or empty folder"
        )


def is_shard_size(value: object) -> bool:
    """Whether ``value`` is a ``max_shard_size``: a positive number of bytes or a size such as ``"500MB"``."""
    if isinstance(value, str):
        return bool(_SHARD_SIZE.fullmatch(value))
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_shard_size(value: object, name: str) -> None:
    """Refuse a ``max_shard_size`` that is not one (see `is_shard_size`).

    Raises:
        HfEntmaxValueError: naming ``name`` (the flag or argument) and the value.
    """
    if not is_shard_size(value):
        raise HfEntmaxValueError(f"{name} must be a size such as 500MB or 2GB, got {value!r}")


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


def load_config(config_class: type[PreTrainedConfig], folder: Path, name: str) -> PreTrainedConfig:
    """``config_class.from_pretrained(folder)``; a config.json whose fields the class refuses is one line.

    Raises:
        HfEntmaxValueError: naming ``name`` and the field.
    """
    try:
        return config_class.from_pretrained(folder)
    except (StrictDataclassError, OSError, ValueError) as error:
        raise HfEntmaxValueError(f"{name}: its config.json is not valid ({_last_line(str(error))})") from None


def load_tokenizer(folder: Path, name: str, **kwargs) -> PreTrainedTokenizerBase:
    """``AutoTokenizer.from_pretrained(folder, **kwargs)``; a folder without a usable tokenizer is one line.

    Raises:
        HfEntmaxValueError: naming ``name``, with the reason and the files a tokenizer needs.
    """
    try:
        return AutoTokenizer.from_pretrained(folder, **kwargs)
    except (OSError, ValueError, TypeError) as error:  # TypeError: a Marian tokenizer without its files
        raise HfEntmaxValueError(
            f"{name}: could not load its tokenizer ({_last_line(str(error)) or type(error).__name__}); a model "
            "folder needs its tokenizer files (tokenizer_config.json with tokenizer.json, or Marian's source.spm, "
            "target.spm and vocab.json)"
        ) from None


def load_pretrained(model_class: type[PreTrainedModel], folder: Path, name: str, **kwargs) -> PreTrainedModel:
    """``model_class.from_pretrained(folder, **kwargs)``, with what can be wrong in a folder as one line.

    Raises:
        HfEntmaxValueError: naming ``name``, for a cut-off or corrupt weights file, a config the model class refuses,
            weights that do not fit, or pickled weights holding more than tensors (torch's ``weights_only`` loader
            refuses them: hf-entmax never unpickles code).
    """
    try:
        return model_class.from_pretrained(folder, **kwargs)
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
            f"{name}: {' / '.join(files) or 'its weights'} could not be read ({_last_line(str(error))}): the file is "
            "cut off or corrupt; write or download it again"
        ) from None
    except (StrictDataclassError, OSError, ValueError, RuntimeError) as error:
        raise HfEntmaxValueError(f"{name} could not be loaded: {_last_line(str(error))}") from None


def replace_folder(new: Path, target: Path) -> None:
    """Put the folder ``new`` in place of ``target`` (which may not exist), by renames on one file system."""
    if not target.exists():
        new.rename(target)
        return
    retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
    retired.rmdir()
    target.rename(retired)
    try:
        new.rename(target)
    except OSError:
        retired.rename(target)
        raise
    shutil.rmtree(retired, ignore_errors=True)


def find_pickle_files(folder: str | os.PathLike) -> list[str]:
    """Paths (relative to ``folder``, sorted) of the files whose loading would unpickle."""
    folder = Path(folder)
    return sorted(
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*")
        if path.is_file() and path.suffix.lower() in PICKLE_SUFFIXES
    )


def check_folder_loads(
    folder: str | os.PathLike, sentences: list[str] | None = None, files: Sequence[str] | None = None
) -> float:
    """Check that ``folder`` loads without hf_entmax and computes what hf_entmax computes from it.

    A fresh Python process, where ``import hf_entmax`` fails, loads the folder with
    ``AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)``; its logits on ``sentences``
    (teacher-forced on this process's greedy translations) and its greedy translations are compared with
    those of the folder loaded here by `AdaptiveEntmaxMarianMTModel`.

    The child runs the folder's code, so it gets a scrubbed environment: only the variables in
    `_LOAD_CHECK_VARIABLES` (no tokens, keys or secrets), ``HF_HUB_OFFLINE=1`` and an empty ``HF_HOME`` (no
    stored Hub login). It still runs as you: code you do not trust should not be loaded at all.

    Args:
        folder: The model folder.
        sentences: Source sentences to compare on (default `CHECK_SENTENCES`).
        files: Only these files of ``folder`` (relative paths), e.g. what `hf-entmax push` uploads: the check
            loads exactly them. Default: the whole folder.

    Returns:
        The largest absolute logit difference (at most 1e-4).

    Raises:
        HfEntmaxValueError: with a one-line reason, if the folder is not a complete AdaptiveEntmaxMarian
            folder, fails to load without hf_entmax, or computes something else there.
    """
    folder = Path(folder).resolve()
    with tempfile.TemporaryDirectory(prefix="hf_entmax_load_check_") as scratch:
        scratch = Path(scratch)
        model_folder = folder if files is None else _link_files(folder, files, scratch / "model")
        return _check_model_folder(model_folder, folder, sentences, scratch)


def _link_files(folder: Path, files: Sequence[str], destination: Path) -> Path:
    """``destination`` holding ``files`` of ``folder`` (links where the system allows them, copies elsewhere)."""
    for name in files:
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            target.symlink_to(folder / name)
        except OSError:  # e.g. Windows without the symlink privilege
            shutil.copyfile(folder / name, target)
    return destination


def _check_model_folder(model_folder: Path, folder: Path, sentences: list[str] | None, scratch: Path) -> float:
    """`check_folder_loads` on ``model_folder``, with ``folder`` in the messages and ``scratch`` for the child."""
    config = read_model_config(model_folder, str(folder))
    if config.get("model_type") != AdaptiveEntmaxMarianConfig.model_type:
        raise HfEntmaxValueError(
            f"{folder} holds a {config.get('model_type')!r} model, not an AdaptiveEntmaxMarian one "
            "(convert a Marian checkpoint with `hf-entmax convert`)"
        )
    if "auto_map" not in config:
        raise HfEntmaxValueError(
            f"{folder}/config.json has no auto_map, so it cannot load without hf_entmax; "
            "write the folder with `hf-entmax export`"
        )
    model = load_pretrained(AdaptiveEntmaxMarianMTModel, model_folder, str(folder), use_safetensors=True).eval()
    # With the config given, the tokenizer does not load the folder's remote code into this process.
    tokenizer = load_tokenizer(model_folder, str(folder), config=model.config)

    inputs = tokenizer(sentences or CHECK_SENTENCES, return_tensors="pt", padding=True, truncation=True)
    with torch.no_grad():
        generated = model.generate(**inputs, num_beams=1, do_sample=False, max_new_tokens=16)
        logits = model(**inputs, decoder_input_ids=generated).logits  # (B, T, vocab)

    torch.save({**inputs, "decoder_input_ids": generated}, scratch / "inputs.pt")
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            _FRESH_PROCESS_SCRIPT,
            str(model_folder),
            str(scratch / "inputs.pt"),
            str(scratch / "out.pt"),
        ],
        cwd=scratch,  # not the project folder: hf_entmax must not be importable from the working directory
        env=load_check_environment(scratch / "hf_home"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    if completed.returncode != 0:
        raise HfEntmaxValueError(f"{folder} does not load without hf_entmax installed: {_last_line(completed.stderr)}")
    loaded = torch.load(scratch / "out.pt", weights_only=True)

    if loaded["logits"].shape != logits.shape:
        raise HfEntmaxValueError(
            f"{folder} loads without hf_entmax but gives logits of shape {tuple(loaded['logits'].shape)} "
            f"instead of {tuple(logits.shape)}"
        )
    difference = (loaded["logits"] - logits).abs().max().item()
    if not difference <= _LOAD_CHECK_TOLERANCE:
        raise HfEntmaxValueError(
            f"{folder} loads without hf_entmax but computes different logits there "
            f"(max difference {difference:.2e} > {_LOAD_CHECK_TOLERANCE:.0e})"
        )
    if not torch.equal(loaded["generated"], generated):
        raise HfEntmaxValueError(f"{folder} loads without hf_entmax but translates differently there")
    return difference


def load_check_environment(hf_home: Path) -> dict[str, str]:
    """The environment of the load check's child: `_LOAD_CHECK_VARIABLES` from this one, the Hub switched off,
    and ``hf_home`` (an empty folder) as HF_HOME, so neither a stored login nor a cached module is found."""
    environment = {name: os.environ[name] for name in _LOAD_CHECK_VARIABLES if name in os.environ}
    return {
        **environment,
        "HF_HOME": str(hf_home),  # the remote-code module cache (HF_HOME/modules) is fresh too
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "TRANSFORMERS_VERBOSITY": "error",
    }


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no message)"


__all__ = [
    "CHECK_SENTENCES",
    "PICKLE_SUFFIXES",
    "RUN_RECORD_FILES",
    "SAFETENSORS_WEIGHTS",
    "check_folder_loads",
    "check_safetensors_weights",
    "check_shard_size",
    "export_hub_folder",
    "find_pickle_files",
    "is_shard_size",
    "load_check_environment",
    "load_config",
    "load_pretrained",
    "load_tokenizer",
    "read_model_config",
]
