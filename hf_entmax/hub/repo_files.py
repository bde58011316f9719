"""Which files of a folder make a model repository: what `hf-entmax push` uploads and what it leaves behind.

Uploaded (see `select_upload_files`): weights in safetensors, configs, tokenizer files, the code the config points to,
the model card and the figures it shows, the license, and the training run's records. Everything else
(``checkpoint-*/``, optimizer and RNG states, ``training_args.bin``, ``.env``, stray files) stays behind. A selected
file must be a regular file of the folder (no symbolic link: `folder_file`) whose name is neither hidden nor that of
a credential (`PRIVATE_PATTERNS`), and pickled weights are refused. `folder_path` and `folder_file` are also what
`export` uses to keep the files it copies inside their folders.
"""

import fnmatch
import json
import os
import posixpath
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

from transformers.dynamic_module_utils import get_relative_imports

from ..common.model_folder import PICKLE_SUFFIXES, check_safetensors_weights
from ..common.outputs import OWN_ENTRIES
from ..common.records import RUN_RECORD_FILES
from ..errors import HfEntmaxFileNotFoundError, HfEntmaxValueError, describe_os_error, one_line


# Top-level files a model repository needs, by name (fnmatch patterns). The code files are not listed: they are
# the modules config.json / tokenizer_config.json point to, with their relative imports (`_code_files`).
UPLOAD_PATTERNS = (
    # Weights: safetensors only (pickled weights are refused, never uploaded).
    "*.safetensors",
    "*.safetensors.index.json",
    # Configuration.
    "config.json",
    "generation_config.json",
    # Tokenizer files, as transformers' tokenizers save them (SentencePiece models are protobuf, not pickles).
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "*vocab*.json",
    "*vocab*.txt",
    "merges.txt",
    "*.spm",
    "*.model",
    # The model card and the license it may link to.
    "README.md",
    "LICENSE",
    "LICENSE.md",
    "LICENSE.txt",
    # The training run's records: plain JSON/text that back the card's numbers.
    *RUN_RECORD_FILES,
)
# What Trainer saves to resume training: skipped like any other non-model file, wherever it is.
TRAINING_STATE_PATTERNS = ("training_args.bin", "optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state*.pth")
# Names never uploaded, in any part of a path (lower case): hidden files and folders (.env, .netrc,
# .git-credentials), and names of keys, tokens, passwords and credentials. The tokenizer files (`TOKENIZER_NAMES`)
# are the only model files with such a word in their name; no other file a model repository holds matches.
PRIVATE_PATTERNS = (
    ".*",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "_netrc",
    "*credential*",
    "*secret*",
    "*password*",
    "*passwd*",
    "*api_key*",
    "*apikey*",
    "*token*",
)
TOKENIZER_NAMES = ("tokenizer*", "special_tokens_map.json", "added_tokens.json")
FIGURE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp")
# Image sources in markdown (``![alt](path "title")``) and HTML (``<img src="path">``).
_IMAGE_REFERENCE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)|<img\b[^>]*?\bsrc\s*=\s*[\"']([^\"']+)[\"']")


@dataclass
class UploadSelection:
    """The files of a folder that `push_folder` uploads, and those it leaves out (paths relative to the folder)."""

    files: list[str]
    skipped: list[str]

    def describe(self, folder: str | os.PathLike) -> str:
        """Two lines for the user: what is uploaded, and what is skipped, grouped by top-level folder (a name with
        control characters is shown escaped, so that it cannot rewrite the terminal)."""
        uploading = f"Uploading {len(self.files)} files from {folder}: {', '.join(map(_shown, self.files))}"
        if not self.skipped:
            return f"{uploading}\nSkipped nothing: every file in the folder belongs in a model repository"
        groups = Counter(_shown(path.split("/")[0]) + "/" if "/" in path else _shown(path) for path in self.skipped)
        skipped = ", ".join(
            f"{name} ({count} file{'s' if count > 1 else ''})" if name.endswith("/") else name
            for name, count in sorted(groups.items())
        )
        return f"{uploading}\nSkipped {len(self.skipped)} files (not part of a model repository): {skipped}"


def select_upload_files(folder: str | os.PathLike) -> UploadSelection:
    """Split ``folder``'s files into those a model repository needs and the rest.

    Uploaded: top-level files matching `UPLOAD_PATTERNS` (safetensors weights and index, configs, tokenizer files,
    README.md, LICENSE, the run's records), the code files the configs' ``auto_map`` and ``custom_pipelines``
    name (with their relative imports, as transformers fetches them), and the images README.md shows. Everything
    else is skipped: subfolders such as ``checkpoint-*/`` and ``.git/``, Trainer's optimizer/scheduler/RNG states
    and ``training_args.bin``, other code, dotfiles such as ``.env``, links to folders (never followed).

    Raises:
        HfEntmaxFileNotFoundError: no such folder, or README.md shows an image the folder does not have.
        HfEntmaxValueError: a file instead of a folder; a top-level pickle file other than Trainer's states (e.g.
            ``pytorch_model.bin``): it would be weights that unpickle, which hf_entmax never publishes; no
            config.json; no safetensors weights or two sets of them (one stale); a config naming code that is not a
            file of the folder; a file to upload that is a symbolic link (or under one), or whose name is hidden or
            looks like a credential (`PRIVATE_PATTERNS`); a README.md or config that is not UTF-8.
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise HfEntmaxValueError(f"{folder} is a file; push a model folder")
    if not folder.is_dir():
        raise HfEntmaxFileNotFoundError(f"{folder}: no such folder")
    every_file = _folder_entries(folder)
    top_level = [path for path in every_file if "/" not in path]
    if pickled := [
        name
        for name in top_level
        if name.lower().endswith(PICKLE_SUFFIXES) and not _matches(name, TRAINING_STATE_PATTERNS)
    ]:
        raise HfEntmaxValueError(
            f"refusing to upload {folder}: {', '.join(pickled)} would be unpickled when loaded (which runs code); "
            f"write safetensors weights with `hf-entmax export --model {folder} --output <new folder>`, "
            "or move the file out of the folder"
        )
    if "config.json" not in top_level:
        raise HfEntmaxValueError(f"refusing to upload {folder}: it has no config.json, so it is not a model folder")
    check_safetensors_weights(folder, f"refusing to upload {folder}:")

    selected = {name for name in top_level if _matches(name, UPLOAD_PATTERNS)}
    _check_publishable(folder, selected)  # before the configs and the card are read for what they name
    named = _code_files(folder) | _card_figures(folder)
    _check_publishable(folder, named)
    selected |= named
    # hf-entmax's own marker and lock are not the user's files: never uploaded, not worth listing as skipped.
    skipped = [path for path in every_file if path not in selected and path not in OWN_ENTRIES]
    return UploadSelection(files=sorted(selected), skipped=skipped)


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


def looks_private(path: str) -> bool:
    """Whether a part of ``path`` is hidden or named like a key, token, password or credential (`PRIVATE_PATTERNS`;
    the tokenizer files, `TOKENIZER_NAMES`, are not)."""
    return any(
        _matches(part, PRIVATE_PATTERNS) and not _matches(part, TOKENIZER_NAMES) for part in path.lower().split("/")
    )


def _check_publishable(folder: Path, names: set[str]) -> None:
    """Refuse a name that looks private (`looks_private`), or a path that is not a regular file of ``folder``
    (a symbolic link, or under one: `folder_file`)."""
    for name in sorted(names):
        if looks_private(name):
            raise HfEntmaxValueError(
                f"refusing to upload {folder}: {_shown(name)} is named like a hidden file or a credential (key, "
                "token, secret, password), which push never uploads; rename it if it belongs in the model repository, "
                "or move it out of the folder"
            )
        folder_file(folder, name, f"refusing to upload {folder}")


def _folder_entries(folder: Path) -> list[str]:
    """Every file of ``folder`` and its subfolders, and every link (to a file or a folder), as sorted relative POSIX
    paths; links to folders are listed, not followed."""
    entries = []
    for root, folders, files in os.walk(folder):
        relative = Path(root).relative_to(folder)
        links = [name for name in folders if (Path(root) / name).is_symlink()]
        entries += [(relative / name).as_posix() for name in (*files, *links)]
    return sorted(entries)


def _read_text(path: Path, folder: Path) -> str:
    """A text file of the folder to upload; one line when it is not UTF-8 or cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise HfEntmaxValueError(
            f"refusing to upload {folder}: {path.name} is not UTF-8 text (byte {error.object[error.start]:#04x} at "
            f"offset {error.start}); save it as UTF-8, as the Hub shows it"
        ) from None
    except OSError as error:
        raise HfEntmaxValueError(f"refusing to upload {folder}: cannot read {describe_os_error(error)}") from None


def _code_files(folder: Path) -> set[str]:
    """The top-level modules that ``config.json`` and ``tokenizer_config.json`` load as remote code, with the
    modules they import relatively (``from .entmax import …``), recursively."""
    modules = []
    for config_name in ("config.json", "tokenizer_config.json"):
        if not (folder / config_name).is_file():
            continue
        try:
            config = json.loads(_read_text(folder / config_name, folder))
        except json.JSONDecodeError as error:
            raise HfEntmaxValueError(f"{folder / config_name} is not valid JSON: {one_line(error)}") from None
        references = list((config.get("auto_map") or {}).values())
        references += [task.get("impl") for task in (config.get("custom_pipelines") or {}).values()]
        for reference in references:
            for class_path in reference if isinstance(reference, list) else [reference]:
                # "module.Class"; "other/repo--module.Class" is code from another repo, not from this folder.
                if isinstance(class_path, str) and "--" not in class_path and "." in class_path:
                    module = class_path.rsplit(".", 1)[0]
                    if not module.isidentifier():  # transformers loads "module.Class" from a file of the folder
                        raise HfEntmaxValueError(
                            f"refusing to upload {folder}: {config_name} names the code {class_path!r}, which is not "
                            "a file of the folder (expected module.Class)"
                        )
                    modules.append(module)
    files = set()
    while modules:
        name = f"{modules.pop()}.py"
        if name in files:
            continue
        if not (folder / name).is_file():
            raise HfEntmaxFileNotFoundError(f"refusing to upload {folder}: its config needs {name}, which is missing")
        folder_file(folder, name, f"refusing to upload {folder}")  # before it is read for its imports
        files.add(name)
        modules += get_relative_imports(folder / name)
    return files


def _card_figures(folder: Path) -> set[str]:
    """The images in ``folder`` that README.md shows (relative links; web addresses and paths that leave the folder
    are not files to upload)."""
    readme = folder / "README.md"
    if not readme.is_file():
        return set()
    figures = set()
    for match in _IMAGE_REFERENCE.finditer(_read_text(readme, folder)):
        link = (match.group(1) or match.group(2)).split("#")[0].split("?")[0]
        if "://" in link or link.startswith("data:"):
            continue
        path = folder_path(link)
        if path is None or not path.lower().endswith(FIGURE_SUFFIXES):
            continue
        if not (folder / path).is_file():
            raise HfEntmaxFileNotFoundError(
                f"refusing to upload {folder}: README.md shows {link}, which is not in the folder"
            )
        figures.add(path)
    return figures


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def _shown(name: str) -> str:
    """``name`` as printed: escaped when it holds control characters (a terminal would act on them)."""
    return name if name.isprintable() else ascii(name)


__all__ = [
    "FIGURE_SUFFIXES",
    "PRIVATE_PATTERNS",
    "TOKENIZER_NAMES",
    "TRAINING_STATE_PATTERNS",
    "UPLOAD_PATTERNS",
    "UploadSelection",
    "folder_file",
    "folder_path",
    "looks_private",
    "select_upload_files",
]
