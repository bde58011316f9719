"""Hub-ready folders: safetensors weights, config with remote code, tokenizer, generation config, model card.

`export_hub_folder` writes one; `check_folder_loads` proves that it works for someone without hf_entmax, by
loading it in a fresh Python process where hf_entmax cannot be imported and comparing what it computes.
"""

import dataclasses
import os
import posixpath
import re
import shutil
import site
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path, PureWindowsPath

import torch
from safetensors import SafetensorError
from transformers import PreTrainedTokenizerBase

from ..common.model_folder import check_model_folder, load_pretrained, load_tokenizer
from ..common.outputs import (
    check_output_folder,
    file_digests,
    is_write_failure,
    write_failure_error,
    write_marker,
)
from ..errors import (
    HfEntmaxError,
    HfEntmaxFileNotFoundError,
    HfEntmaxValueError,
    HfEntmaxWriteError,
    describe_os_error,
    last_line,
    one_line,
)
from ..modeling.configuration_adaptive_entmax_marian import AdaptiveEntmaxMarianConfig
from ..modeling.modeling_adaptive_entmax_marian import AdaptiveEntmaxMarianMTModel
from .model_card import ModelCardInfo, render_model_card


# The command a Hub-ready folder's marker names, whichever wrote it (`hf-entmax export` or `convert`): either may
# replace the other's folder.
EXPORT_COMMAND = "export"
# `max_shard_size` as people write it (the units of huggingface_hub's parser).
_SHARD_SIZE = re.compile(r"\s*\d+(\.\d+)?\s*[KMGT]B\s*", re.IGNORECASE)
# The only variables of this process the load check's child gets: what Python, torch and the dynamic loader need
# to start as they do here. Nothing else passes (HF_TOKEN, AWS_*, GITHUB_TOKEN, HOME, XDG_*, NETRC, …): the child
# runs the folder's code, and gets a home folder of its own (`load_check_environment`).
_LOAD_CHECK_VARIABLES = (
    "PATH",
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
            max_length=inputs["decoder_input_ids"].shape[1],
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


def folder_path(text: str) -> str | None:
    """``text`` as a normalised relative POSIX path that stays inside a folder, or None when it does not: empty,
    absolute, with a drive, or climbing out with ``..`` (backslashes count as separators, as on Windows)."""
    path = text.replace("\\", "/")
    if not path or path.startswith("/") or PureWindowsPath(text).drive:
        return None
    path = posixpath.normpath(path)
    return None if path in (".", "..") or path.startswith("../") else path


def folder_file(folder: Path, relative: str, name: str) -> Path:
    """``folder / relative`` if it is a regular file of ``folder`` itself: the path stays inside it (`folder_path`)
    and no part of it is a symbolic link, which could lead anywhere on the machine (even to a file of the folder:
    then another name would publish it). What hf-entmax publishes from a folder goes through here.

    Args:
        folder: The folder (itself it may be a link).
        relative: The path inside it, as a file of the folder names it (a report, a card, a config).
        name: How the messages name the folder (``--model <folder>``).

    Raises:
        HfEntmaxValueError: the path leaves the folder, passes through a link, or is not a regular file.
        HfEntmaxFileNotFoundError: nothing is there.
    """
    path = folder_path(relative)
    if path is None:
        raise HfEntmaxValueError(f"{name}: {relative!r} is not a path inside {folder} (absolute, or climbing out)")
    current = folder
    for part in path.split("/"):
        current = current / part
        if current.is_symlink():
            raise HfEntmaxValueError(
                f"{name}: {current.relative_to(folder).as_posix()} is a symbolic link (to {os.readlink(current)}); "
                "only the folder's own files are published: put a copy of the file in its place"
            )
    if not current.exists():
        raise HfEntmaxFileNotFoundError(f"{name}: {path} is not in {folder}")
    if not current.is_file():
        raise HfEntmaxValueError(f"{name}: {path} is not a regular file")
    return current


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


def check_folder_loads(
    folder: str | os.PathLike, sentences: list[str] | None = None, files: Sequence[str] | None = None
) -> float:
    """Check that ``folder`` loads without hf_entmax and computes what hf_entmax computes from it.

    A fresh Python process, where ``import hf_entmax`` fails, loads the folder with
    ``AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)``; its logits on ``sentences``
    (teacher-forced on this process's greedy translations) and its greedy translations are compared with
    those of the folder loaded here by `AdaptiveEntmaxMarianMTModel`.

    The child runs the folder's code, so it gets a scrubbed environment (`load_check_environment`): only the
    variables in `_LOAD_CHECK_VARIABLES` (no tokens, keys or secrets), ``HF_HUB_OFFLINE=1``, an empty home folder of
    its own (so no stored Hub login, ``.netrc``, git or cloud credentials are found where libraries look for them)
    and no standard input. It still runs as you: code you do not trust should not be loaded at all.

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
        HfEntmaxWriteError: if the temporary folder is full or cannot be written.
    """
    folder = Path(folder).resolve()
    try:
        scratch = Path(tempfile.mkdtemp(prefix="hf_entmax_load_check_"))
    except OSError as error:
        raise _scratch_error(folder, error) from None
    try:
        model_folder = folder if files is None else _link_files(folder, files, scratch / "model")
        return _check_model_folder(model_folder, folder, sentences, scratch)
    except (OSError, RuntimeError) as error:
        if isinstance(error, HfEntmaxError) or not is_write_failure(error, scratch):
            raise
        raise _scratch_error(folder, error) from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _scratch_error(folder: Path, error: BaseException) -> HfEntmaxWriteError:
    """The load check of ``folder`` could not write its temporary files (a full or read-only temporary folder)."""
    reason = describe_os_error(error) if isinstance(error, OSError) else one_line(error, 200)
    return HfEntmaxWriteError(
        f"cannot check that {folder} loads: writing to the temporary folder {tempfile.gettempdir()} failed "
        f"({reason}); set TMPDIR to a folder with room"
    )


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
    config = check_model_folder(model_folder, str(folder), (AdaptiveEntmaxMarianConfig.model_type,))
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
        # max_length (16 new tokens after the start token), not max_new_tokens: a saved generation config carries
        # max_length, and generate warns when both are set.
        generated = model.generate(**inputs, num_beams=1, do_sample=False, max_length=17)
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
        env=load_check_environment(scratch / "home"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if completed.returncode != 0:
        raise HfEntmaxValueError(f"{folder} does not load without hf_entmax installed: {last_line(completed.stderr)}")
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


def load_check_environment(home: Path) -> dict[str, str]:
    """The environment of the load check's child: `_LOAD_CHECK_VARIABLES` from this one, the Hub switched off, and
    ``home`` (created empty) as its home folder, HF_HOME inside it: neither a stored Hub login (``HF_HOME/token``)
    nor ``~/.netrc``, ``~/.git-credentials``, ``~/.aws``, ``~/.config`` or a cached module is found there. Python's
    user site-packages, where this process imports from them, stay importable (a path, no secret)."""
    hf_home = home / ".cache" / "huggingface"  # the remote-code module cache (HF_HOME/modules) is fresh too
    hf_home.mkdir(parents=True, exist_ok=True)
    environment = {name: os.environ[name] for name in _LOAD_CHECK_VARIABLES if name in os.environ}
    if site.ENABLE_USER_SITE and "PYTHONUSERBASE" not in environment:  # found through HOME otherwise
        environment["PYTHONUSERBASE"] = site.getuserbase()
    return {
        **environment,
        "HOME": str(home),
        "USERPROFILE": str(home),  # Windows' HOME
        "HF_HOME": str(hf_home),
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "TRANSFORMERS_VERBOSITY": "error",
    }


__all__ = [
    "CHECK_SENTENCES",
    "EXPORT_COMMAND",
    "check_export_target",
    "check_folder_loads",
    "check_shard_size",
    "export_hub_folder",
    "folder_file",
    "folder_path",
    "is_shard_size",
    "load_check_environment",
]
