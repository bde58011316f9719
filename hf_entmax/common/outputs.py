"""Where commands write, and how, so that nothing of the user's is overwritten and nothing is left half-written.

- Output folders: a command writes only into a folder it created, one an earlier run of the same command wrote (it
  says so in a marker file), or where the user said to overwrite; one writer at a time (a lock file); final outputs
  staged and moved into place, so that a full disk or a kill leaves the earlier outputs whole. `hf-entmax train`
  (and `demo`, and `hf_entmax.training.run.train` from Python) claim their ``--output_dir`` here.
- Output files: written under a temporary name and renamed (`write_text_atomically`, `line_output`), except where
  the path is not a regular file (a terminal, a pipe, /dev/null).
- A failed write is one line naming the folder or file, and for a full disk the free and the needed space.
"""

import contextlib
import errno
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

from filelock import FileLock, Timeout
from safetensors import SafetensorError

from ..errors import HfEntmaxError, HfEntmaxValueError, HfEntmaxWriteError, describe_os_error, one_line
from ..modeling.modeling_adaptive_entmax_marian import plain_file_mode
from .records import framework_versions


# The marker names the command that wrote the folder; the lock is held by the one process writing it. Both are
# hidden files, which `hf-entmax push` never uploads.
MARKER_FILE = ".hf_entmax_output.json"
LOCK_FILE = ".hf_entmax_output.lock"
STAGING_FOLDER = ".hf_entmax_staging"
OWN_ENTRIES = frozenset({MARKER_FILE, LOCK_FILE, STAGING_FOLDER})
# The errno values of a write that failed for want of room: the message then gives the free and the needed space.
_NO_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
# How torch.save reports a write that failed (no errno survives its C++ writer): e.g. "[enforce fail at
# inline_container.cc:672] . unexpected pos 704 vs 598" on a full disk, "PytorchStreamWriter failed writing file".
_TORCH_WRITE_FAILURES = ("inline_container", "PytorchStreamWriter", "file write failed")
# The folders this process holds, by resolved path: a caller that claims a folder and then calls a function that
# claims it again (`hf-entmax train` around `training.run.train`) must not be refused by its own lock.
_HELD: dict[Path, int] = {}


def read_marker(folder: Path) -> dict:
    """``folder``'s marker: ``{"command": …}``, and for a folder written whole, ``"files"``: the SHA-256 of every
    file it wrote. ``{}`` when there is none, or it is not ours."""
    try:
        marker = json.loads((folder / MARKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return marker if isinstance(marker, dict) and isinstance(marker.get("command"), str) else {}


def written_by(folder: Path) -> str | None:
    """The command that wrote ``folder`` by its marker (``"train"``), or None: no marker, or one that is not ours."""
    return read_marker(folder).get("command")


def file_digests(folder: Path) -> dict[str, str]:
    """The SHA-256 of every regular file under ``folder`` (not following links), by relative POSIX path; hf-entmax's
    own files (`OWN_ENTRIES`) left out."""
    digests = {}
    for root, folders, files in os.walk(folder):
        relative = Path(root).relative_to(folder)
        folders[:] = [name for name in folders if not (relative == Path(".") and name in OWN_ENTRIES)]
        for name in files:
            path = Path(root) / name
            if (relative == Path(".") and name in OWN_ENTRIES) or not path.is_file() or path.is_symlink():
                continue
            digest = hashlib.sha256()
            with path.open("rb") as file:
                while chunk := file.read(1 << 20):
                    digest.update(chunk)
            digests[(relative / name).as_posix()] = digest.hexdigest()
    return digests


def write_marker(folder: Path, command: str, *, files: dict[str, str] | None = None, flag: str | None = None) -> None:
    """Mark ``folder`` as written by ``command``; ``files`` (see `file_digests`) lets a later run tell the files it
    wrote from files edited or added since."""
    marker = {"command": command, "framework_versions": framework_versions()}
    if files is not None:
        marker["files"] = files
    write_text_atomically(folder / MARKER_FILE, json.dumps(marker, indent=2) + "\n", flag=flag)


def changed_since_written(folder: Path, marker: dict) -> list[str]:
    """The files of ``folder`` edited or added since the command of ``marker`` wrote it (only a marker with
    ``"files"`` can tell; others give ``[]``)."""
    written = marker.get("files")
    if not isinstance(written, dict):
        return []
    return sorted(name for name, digest in file_digests(folder).items() if written.get(name) != digest)


def listed(names: list[str], limit: int = 5) -> str:
    """``names`` sorted, the first ``limit`` of them, for a message."""
    names = sorted(names)
    return ", ".join(names[:limit]) + (", …" if len(names) > limit else "")


def check_output_folder(
    folder: Path,
    command: str,
    flag: str,
    *,
    overwrite: bool = False,
    overwrite_flag: str = "--overwrite_output_dir",
    earlier_output: Callable[[Path], bool] | None = None,
) -> None:
    """Refuse ``folder`` unless ``command`` may write into it: it does not exist, is empty, holds the marker of an
    earlier run of ``command`` (and, where the marker lists the files written, none was edited or added since), or
    passes ``earlier_output`` (outputs written before markers), or ``overwrite``.

    Raises:
        HfEntmaxValueError: naming ``flag``, the folder, what it holds and ``overwrite_flag``.
    """
    if folder.exists() and not folder.is_dir():
        raise HfEntmaxValueError(f"{flag} {folder} is a file; give a folder")
    if overwrite or not folder.is_dir():
        return
    entries = [path.name for path in folder.iterdir() if path.name not in OWN_ENTRIES]
    marker = read_marker(folder)
    if marker.get("command") == command:
        if changed := changed_since_written(folder, marker):
            raise HfEntmaxValueError(
                f"{flag} {folder} holds files edited or added since hf-entmax {command} wrote it ({listed(changed)}): "
                f"writing there would replace them; choose a new folder, or give {overwrite_flag} to write anyway"
            )
        return
    if not entries or (earlier_output is not None and earlier_output(folder)):
        return
    other = marker.get("command")
    origin = f"the output of hf-entmax {other}" if other else f"files that are not from an earlier hf-entmax {command}"
    raise HfEntmaxValueError(
        f"{flag} {folder} holds {origin} ({listed(entries)}): writing there could replace them; choose a new "
        f"folder, or give {overwrite_flag} to write into it anyway"
    )


@contextlib.contextmanager
def claimed_output_folder(
    folder: Path,
    command: str,
    flag: str,
    *,
    overwrite: bool = False,
    earlier_output: Callable[[Path], bool] | None = None,
    main_process: bool = True,
) -> Iterator[Path]:
    """Check ``folder`` (`check_output_folder`), create it, and hold it for ``command`` while the block runs: its
    lock refuses a second writer, its marker tells later runs who wrote it.

    In a distributed run every process checks, and only the main one (``main_process``) creates, locks and marks.

    Raises:
        HfEntmaxValueError: the folder may not be written (see `check_output_folder`), or another process holds it.
        HfEntmaxWriteError: it cannot be created or written (read-only, a file in the path, a full disk).
    """
    held = folder.resolve()
    if held in _HELD:
        _HELD[held] += 1
        try:
            yield folder
        finally:
            _HELD[held] -= 1
        return
    check_output_folder(folder, command, flag, overwrite=overwrite, earlier_output=earlier_output)
    if not main_process:
        yield folder
        return
    make_folder(folder, f"{flag} {folder}")
    try:
        lock = FileLock(folder / LOCK_FILE, timeout=0)
        lock.acquire()
    except Timeout:
        raise HfEntmaxValueError(
            f"{flag} {folder}: another hf-entmax process is writing into it (it holds {folder / LOCK_FILE}); wait for "
            "it to end, or choose another folder"
        ) from None
    except OSError as error:
        raise HfEntmaxWriteError(f"{flag} {folder}: cannot write there ({describe_os_error(error)})") from None
    try:
        # Checked again under the lock: another process may have written the folder between the first check and now.
        check_output_folder(folder, command, flag, overwrite=overwrite, earlier_output=earlier_output)
        write_marker(folder, command, flag=flag)
        _HELD[held] = 1
        yield folder
    finally:
        _HELD.pop(held, None)
        lock.release()


def make_folder(folder: Path, where: str) -> None:
    """Create ``folder`` and its parents (nothing if it exists).

    Raises:
        HfEntmaxWriteError: naming ``where`` (the flag and path the user gave) and the reason: a part of the path is
            a file, the file system is read-only, permission denied, …
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        # mkdir reports a file in the path as "File exists" (of the folder it wanted): name the file instead.
        file = next((parent for parent in (folder, *folder.parents) if parent.exists()), None)
        if file is not None and not file.is_dir():
            raise HfEntmaxWriteError(f"{where}: {file} is a file, not a folder") from None
        raise HfEntmaxWriteError(f"{where}: cannot create {folder} ({describe_os_error(error)})") from None


def write_text_atomically(path: Path, text: str, *, flag: str | None = None) -> None:
    """Write ``text`` (UTF-8) to ``path`` through `line_output`: a kill or a full disk never leaves a cut-off file,
    only the old one or the new one.

    Raises:
        HfEntmaxWriteError: naming ``flag`` (or the file) and the reason.
    """
    with line_output(path, flag) as file:
        file.write(text)


def same_file(first: str | os.PathLike, second: str | os.PathLike) -> bool:
    """Whether two paths name one file: equal once resolved (symbolic links), or hard links to one inode."""
    first, second = Path(first), Path(second)
    if first.resolve() == second.resolve():
        return True
    try:
        return first.exists() and second.exists() and os.path.samefile(first, second)
    except OSError:
        return False


def check_output_files(inputs: dict[str, str | None], outputs: list[tuple[str, str | None, str]]) -> None:
    """Refuse an output file that is a folder, or that names (or links to) an input or an earlier output.

    Args:
        inputs: ``{flag: path}`` of the files a command reads (None: not given).
        outputs: ``(flag, path, what is written there)`` of the files it writes (path None: not given).

    Raises:
        HfEntmaxValueError: naming both flags and what to write elsewhere.
    """
    files = dict(inputs)
    for flag, path, written in outputs:
        if not path:
            continue
        if Path(path).is_dir():
            raise HfEntmaxValueError(f"{flag} {path} is a folder; expected a file name")
        for other_flag, other in files.items():
            if other and same_file(path, other):
                raise HfEntmaxValueError(f"{flag} {path} is the {other_flag} file; write {written} elsewhere")
        files[flag] = path


class OutputFile:
    """A text file being written by `line_output`; a write that fails (a full disk) raises one line."""

    def __init__(self, file: TextIO, where: str, note: str):
        self._file, self._where, self._note = file, where, note
        self.written = False

    def _failed(self, error: OSError) -> HfEntmaxWriteError:
        return HfEntmaxWriteError(f"{self._where}: writing failed, {describe_os_error(error)}{self._note}")

    def write(self, text: str) -> None:
        try:
            self._file.write(text)
        except OSError as error:
            raise self._failed(error) from None
        self.written = self.written or bool(text)

    def flush(self) -> None:
        try:
            self._file.flush()
        except OSError as error:
            raise self._failed(error) from None

    def publish(self, temporary: str | None, path: Path) -> None:
        """Flush and close (a full disk often shows only here, when the buffer reaches the disk), then rename the
        temporary file, if any, over ``path``."""
        try:
            self._file.close()
            if temporary is not None:
                os.replace(temporary, path)
        except OSError as error:
            raise self._failed(error) from None


@contextlib.contextmanager
def line_output(path: Path, flag: str | None = None) -> Iterator[OutputFile]:
    """A UTF-8 text file to write ``path`` through: a temporary file next to it, renamed over ``path`` when the block
    ends, or when it is stopped by Ctrl-C after writing something (what was written is kept). A failed write (a full
    disk) removes the temporary file and leaves the file that was there before unchanged. A path that exists and is
    not a regular file (a terminal, a pipe, /dev/null) is written directly: renaming over it would replace it.

    Raises:
        HfEntmaxWriteError: the file cannot be created or written, naming ``flag`` (or nothing) and the path.
    """
    where = f"{flag} {path}" if flag else str(path)
    temporary = None
    direct = path.exists() and not path.is_file()
    if not direct:
        make_folder(path.parent, where)
    try:
        if direct:
            if path.is_dir():
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
            file = path.open("w", encoding="utf-8")
        else:
            try:
                handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
            except OSError as error:  # named by its folder: the temporary file's name means nothing to the user
                raise OSError(error.errno, error.strerror, str(path.parent)) from None
            # mkstemp makes the file private (0600); the output gets the mode a plain open would give it, or keeps
            # the one of the file it replaces.
            os.fchmod(handle, stat.S_IMODE(path.stat().st_mode) if path.exists() else plain_file_mode())
            file = os.fdopen(handle, "w", encoding="utf-8")
    except OSError as error:
        raise HfEntmaxWriteError(f"{where}: cannot write there ({describe_os_error(error)})") from None
    note = " (the file there before is unchanged)" if temporary is not None and path.exists() else ""
    output = OutputFile(file, where, note)
    try:
        try:
            yield output
        except KeyboardInterrupt:
            if output.written:
                output.publish(temporary, path)
            raise
        output.publish(temporary, path)
    finally:
        with contextlib.suppress(OSError):  # after an error, closing is cleanup: the error raised says what failed
            file.close()
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)


@contextlib.contextmanager
def staged_outputs(folder: Path, *, main_process: bool = True) -> Iterator[Path]:
    """A folder inside ``folder`` to write final outputs into; when the block ends without an error, each file in it
    replaces its namesake in ``folder`` by a rename (whole files only, never a cut-off one), and on an error the
    staged files are removed and ``folder``'s earlier outputs stay as they were.

    Every process of a distributed run gets the same path; only the main one (``main_process``) moves the files.
    """
    staging = folder / STAGING_FOLDER
    if main_process:
        shutil.rmtree(staging, ignore_errors=True)  # a killed run's leftovers
        staging.mkdir()
    try:
        yield staging
        if main_process:
            for path in sorted(staging.rglob("*")):
                if path.is_file():
                    target = folder / path.relative_to(staging)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(path, target)
    finally:
        if main_process:
            shutil.rmtree(staging, ignore_errors=True)


def is_write_failure(error: BaseException, folder: Path) -> bool:
    """Whether ``error`` is a write into ``folder`` that failed: an OSError for a path in it or one of no room or a
    read-only file system, or what safetensors and torch raise for a failed write."""
    if isinstance(error, OSError):
        if error.errno in _NO_SPACE or error.errno == errno.EROFS:
            return True
        path = error.filename
        return path is not None and Path(os.fsdecode(path)).resolve().is_relative_to(folder.resolve())
    if isinstance(error, SafetensorError):
        return "I/O error" in str(error) or "os error" in str(error)
    return isinstance(error, RuntimeError) and any(text in str(error) for text in _TORCH_WRITE_FAILURES)


def format_size(num_bytes: float) -> str:
    """``num_bytes`` in the largest unit that keeps it ≥ 1 (``12.3 MB``), in decimal units as disks are sold."""
    units = ("bytes", "kB", "MB", "GB", "TB")
    size, unit = float(num_bytes), 0
    while size >= 1000 and unit < len(units) - 1:
        size, unit = size / 1000, unit + 1
    return f"{size:.0f} bytes" if unit == 0 else f"{size:.1f} {units[unit]}"


def write_failure_error(
    error: BaseException, folder: Path, flag: str, needed_bytes: int | None = None
) -> HfEntmaxWriteError:
    """The one-line error for a failed write into ``folder`` (an `is_write_failure`), naming ``flag``, the folder
    and, when the disk is the cause, the free space there and ``needed_bytes`` (if known), what the writes need."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        free = None
    no_space = getattr(error, "errno", None) in _NO_SPACE or "No space left" in str(error)
    # torch's writer drops the errno: a full disk is recognised by the space left where it wrote.
    if not no_space and not isinstance(error, OSError) and None not in (free, needed_bytes):
        no_space = free < needed_bytes
    if no_space:
        needed = "" if needed_bytes is None else f", about {format_size(needed_bytes)} needed"
        room = "" if free is None else f" ({format_size(free)} free{needed})"
        reason = f"no space left on the device{room}: free some space or choose another folder"
    elif isinstance(error, OSError):
        reason = describe_os_error(error)
    else:
        reason = one_line(error, 200)
    return HfEntmaxWriteError(f"{flag} {folder}: writing failed, {reason}; the outputs written before are intact")


@contextlib.contextmanager
def write_failures_reported(folder: Path, flag: str, needed_bytes: Callable[[], int] | None = None) -> Iterator[None]:
    """Turn a failed write into ``folder`` inside the block into `write_failure_error` (other errors pass);
    ``needed_bytes`` tells, when asked, the space the block's writes need."""
    try:
        yield
    except HfEntmaxError:
        raise
    except (OSError, RuntimeError, SafetensorError) as error:
        if not is_write_failure(error, folder):
            raise
        raise write_failure_error(error, folder, flag, needed_bytes and needed_bytes()) from error
