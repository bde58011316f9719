"""Errors that hf_entmax reports to users: one line naming what is wrong and how to fix it."""


class HfEntmaxError(Exception):
    """Base class of the errors hf_entmax raises for bad input; the CLI prints them without a traceback."""


class HfEntmaxValueError(HfEntmaxError, ValueError):
    """A value (argument, field, file content) is not what was expected."""


class HfEntmaxFileNotFoundError(HfEntmaxError, FileNotFoundError):
    """A file or folder the user named does not exist."""


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
