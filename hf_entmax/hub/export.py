"""Hub-ready folders: safetensors weights, config with remote code, tokenizer, generation config, model card.

`export_hub_folder` writes one, in place of an earlier export only (`check_export_target`). That it loads for someone
without hf_entmax is checked by `hf_entmax.hub.load_check`; which of its files a model repository holds is decided by
`hf_entmax.hub.repo_files`.
"""

import dataclasses
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from safetensors import SafetensorError
from transformers import PreTrainedTokenizerBase

from ..common.outputs import (
    check_output_folder,
    file_digests,
    is_write_failure,
    write_failure_error,
    write_marker,
)
from ..errors import HfEntmaxError, HfEntmaxValueError
from ..modeling.modeling_adaptive_entmax_marian import AdaptiveEntmaxMarianMTModel
from .model_card import ModelCardInfo, render_model_card
from .repo_files import folder_path


# The command a Hub-ready folder's marker names, whichever wrote it (`hf-entmax export` or `convert`): either may
# replace the other's folder.
EXPORT_COMMAND = "export"
# `max_shard_size` as people write it (the units of huggingface_hub's parser).
_SHARD_SIZE = re.compile(r"\s*\d+(\.\d+)?\s*[KMGT]B\s*", re.IGNORECASE)


def export_hub_folder(
    model: AdaptiveEntmaxMarianMTModel,
    tokenizer: PreTrainedTokenizerBase,
    output_dir: str | os.PathLike,
    *,
    card: ModelCardInfo | None = None,
    max_shard_size: str | int = "2GB",
    extra_files: Mapping[str, str | os.PathLike] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a folder that loads anywhere with ``trust_remote_code=True`` and can be pushed to the Hub as it is.

    Contents: ``model.safetensors`` (or shards and ``model.safetensors.index.json`` above ``max_shard_size``),
    ``config.json`` with ``auto_map`` and the ``custom_pipelines`` translation entry, the flat modeling files,
    ``generation_config.json``, the tokenizer files and ``README.md`` (the model card, from ``card``; its tokenizer
    line defaults to the tokenizer's class and size), plus ``extra_files``: ``{path in the folder: file to copy
    there}``, e.g. the figures the card shows and the training run's records. Nothing is written outside
    ``output_dir``: those paths are relative and stay inside it (no absolute path, no ``..``). The sources are
    copied as given: check where they come from first (see `folder_file`). A marker (``.hf_entmax_output.json``,
    never uploaded) records what was written, so that a later export replaces the folder only if nothing in it was
    edited or added since (or with ``overwrite``).

    Returns:
        The folder's path.

    Raises:
        HfEntmaxValueError: a bad ``max_shard_size``, an ``extra_files`` path outside the folder, or a target that
            holds other files, unless ``overwrite`` (see `check_export_target`).
        HfEntmaxWriteError: the folder cannot be written (a full disk, a read-only folder, a file in the path); an
            earlier export there is left as it was.
    """
    output_dir = Path(output_dir)
    check_shard_size(max_shard_size, "max_shard_size")
    copies = {}
    for destination, source in (extra_files or {}).items():
        relative = folder_path(os.fspath(destination))
        if relative is None:
            raise HfEntmaxValueError(
                f"extra_files: {os.fspath(destination)!r} is not a path inside the output folder (it is absolute or "
                "climbs out with ..); give a path relative to the folder"
            )
        copies[relative] = Path(source)
    check_export_target(output_dir, overwrite)
    existing = next((path for path in output_dir.absolute().parents if path.exists()), None)
    if existing is not None and not existing.is_dir():
        raise HfEntmaxValueError(f"{output_dir}: {existing} is a file, so no folder can be made there")
    try:
        _write_hub_folder(model, tokenizer, output_dir, card or ModelCardInfo(), max_shard_size, copies)
    except (OSError, RuntimeError, SafetensorError) as error:
        # Staging lives next to the target, so the failed write names a path in the parent (or the parent itself).
        if isinstance(error, HfEntmaxError) or not is_write_failure(error, output_dir.parent):
            raise
        raise write_failure_error(
            error, output_dir, "Hub-ready folder", _bytes_needed(model, copies.values())
        ) from None
    return output_dir


def _write_hub_folder(
    model: AdaptiveEntmaxMarianMTModel,
    tokenizer: PreTrainedTokenizerBase,
    output_dir: Path,
    card: ModelCardInfo,
    max_shard_size: str | int,
    copies: Mapping[str, Path],
) -> None:
    """`export_hub_folder` after its checks: ``copies`` maps checked paths in the folder to the files to copy."""
    # Written whole into a fresh folder next to the target, then put in its place: no file of an earlier export (an
    # old model.safetensors next to new shards, which loading would prefer) survives, and a failure leaves the old.
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    try:
        # The model's save_pretrained also copies the flat code files and writes auto_map and custom_pipelines.
        model.save_pretrained(staging, max_shard_size=max_shard_size)
        tokenizer.save_pretrained(staging)
        if card.tokenizer is None:
            card = dataclasses.replace(card, tokenizer=f"`{type(tokenizer).__name__}` ({len(tokenizer):,} tokens)")
        render_model_card(model, card).save(staging / "README.md")
        for destination, source in copies.items():
            (staging / destination).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, staging / destination)
        # What the export wrote, file by file: a later export refuses to replace files edited or added since.
        write_marker(staging, EXPORT_COMMAND, files=file_digests(staging))
        replace_folder(staging, output_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _bytes_needed(model: AdaptiveEntmaxMarianMTModel, files) -> int:
    """About what an export of ``model`` with copies of ``files`` writes: its weights and those files."""
    weights = sum(tensor.numel() * tensor.element_size() for tensor in model.state_dict().values())
    return weights + sum(path.stat().st_size for path in files if path.is_file())


def check_export_target(output_dir: Path, overwrite: bool = False) -> None:
    """Refuse a target that is a file, or a non-empty folder other than an earlier export left as it was written:
    an export replaces its target whole, so anything else in it (a training run, files edited or added since the
    export, e.g. an edited card) would be lost, unless ``overwrite``.

    Raises:
        HfEntmaxValueError: naming the folder, the files and ``--overwrite``.
    """
    check_output_folder(
        output_dir, EXPORT_COMMAND, "Hub-ready folder", overwrite=overwrite, overwrite_flag="--overwrite"
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


__all__ = [
    "EXPORT_COMMAND",
    "check_export_target",
    "check_shard_size",
    "export_hub_folder",
    "is_shard_size",
    "replace_folder",
]
