"""Errors that hf_entmax reports to users: one line naming what is wrong and how to fix it."""

import errno
import os


class HfEntmaxError(Exception):
    """Base class of the errors hf_entmax raises for bad input; the CLI prints them without a traceback."""


class HfEntmaxValueError(HfEntmaxError, ValueError):
    """A value (argument, field, file content) is not what was expected."""


class HfEntmaxFileNotFoundError(HfEntmaxError, FileNotFoundError):
    """A file or folder the user named does not exist."""


class HfEntmaxWriteError(HfEntmaxError, OSError):
    """Writing an output failed (a full disk, a read-only folder, a path under a file); what was there before is
    intact, and the message says which folder or file and what it needs."""


class HfEntmaxInterrupted(HfEntmaxError):
    """The user stopped a command (Ctrl-C); the message says what was kept. The CLI exits with 130 (128 + SIGINT)."""


# What an OSError a user can cause means, in the words of a message. Others keep the system's own words.
_OS_ERROR_REASONS = {
    errno.ENOSPC: "no space left on the device (the disk is full)",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EISDIR: "it is a folder, not a file",
    errno.ENOENT: "no such file or folder",
    errno.EEXIST: "it already exists",
    errno.ENAMETOOLONG: "the name is too long",
    errno.EFBIG: "the file is too large for this file system",
    errno.EMFILE: "too many open files",
}


def describe_os_error(error: OSError) -> str:
    """``error`` on one line: the path(s) it names and the reason in plain words, e.g.
    ``/data/out.txt: the file system is read-only``."""
    reason = _OS_ERROR_REASONS.get(error.errno) or error.strerror or one_line(error)
    paths = [os.fsdecode(path) for path in (error.filename, error.filename2) if path is not None]
    return f"{' -> '.join(paths)}: {reason}" if paths else reason


def one_line(error: BaseException, limit: int | None = 300, *, cause: bool = False) -> str:
    """``error``'s message on one line (white space folded), cut at ``limit`` characters (None: whole).

    With ``cause``, the message of the error it was raised from follows in parentheses: libraries such as datasets
    wrap the informative error in a generic one.
    """
    message = " ".join(str(error).split())
    if cause and error.__cause__ is not None:
        message += f" ({' '.join(str(error.__cause__).split())})"
    return message if limit is None else message[:limit]


def last_line(text: str) -> str:
    """The last non-empty line of ``text``, stripped: the error of a traceback, the reason of a multi-line message."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no message)"
