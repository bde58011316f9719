"""Text files, one sentence a line: the one line reader of hf-entmax (UTF-8, with the file and line of a bad byte)
and the readers built on it, for sentence files, line-aligned pairs of files and every data format that has lines.
"""

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..errors import HfEntmaxFileNotFoundError, HfEntmaxValueError


# How many line numbers a message lists before it abbreviates.
MAX_LISTED_LINES = 10


def iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line_no, text)`` for each line, 1-based, without its line ending; the one decoder of every format.

    Raises:
        HfEntmaxFileNotFoundError: If ``path`` is not a file (named as a data file).
        HfEntmaxValueError: At a line that is not UTF-8, naming the file, the line and the byte.
    """
    if not path.is_file():
        what = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise HfEntmaxFileNotFoundError(f"data file {path} {what}")
    # Binary mode and a per-line decode: a bad byte is reported with its line, and lines split on "\n" only
    # (text mode and str.splitlines would also split on "\x85" or "\u2028", which can occur inside sentences).
    with path.open("rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise HfEntmaxValueError(
                    f"{path} line {line_no}: not valid UTF-8 (byte 0x{raw[error.start]:02x} at byte offset "
                    f"{error.start}); save the file as UTF-8"
                ) from None
            if line_no == 1:
                # Some Windows editors start UTF-8 files with a byte-order mark; it is not part of the sentence.
                text = text.removeprefix("\ufeff")
            yield line_no, text.rstrip("\r\n")


def read_lines(path: str | os.PathLike, flag: str | None = None) -> list[str]:
    """Every line of a UTF-8 text file, empty ones included, without line endings.

    Args:
        path: The file.
        flag: The flag that gave it (``--input``), named in the messages; None names it as a data file.

    Raises:
        HfEntmaxFileNotFoundError: If the file does not exist or is a folder.
        HfEntmaxValueError: If it is not UTF-8 (naming the line).
    """
    file = Path(path)
    if flag is not None and not file.is_file():
        raise HfEntmaxFileNotFoundError(
            f"{flag} {path}: {'a folder, not a file' if file.is_dir() else 'no such file'}"
        )
    return [line for _, line in iter_lines(file)]


def read_sentences(path: str | os.PathLike | None, flag: str | None = None) -> list[str] | None:
    """The non-empty lines of a text file, stripped: one sentence a line. None when no file was given.

    Raises:
        HfEntmaxValueError: If the file has no sentence; the errors of `read_lines`.
    """
    if path is None:
        return None
    sentences = [line.strip() for line in read_lines(path, flag) if line.strip()]
    if not sentences:
        where = f"{flag} {path}: the file has" if flag is not None else f"{path} contains"
        raise HfEntmaxValueError(f"{where} no sentences (expected one sentence a line)")
    return sentences


def read_aligned_lines(
    first: str | os.PathLike,
    second: str | os.PathLike,
    first_flag: str | None = None,
    second_flag: str | None = None,
) -> tuple[list[str], list[str]]:
    """Every line of two line-aligned files: line N of one translates line N of the other.

    Both files are read whole before pairing: a count mismatch is only known at the end, and zipping two streams
    would silently pair misaligned lines up to that point.

    Raises:
        HfEntmaxValueError: If the line counts differ; the errors of `read_lines`.
    """
    first_lines, second_lines = read_lines(first, first_flag), read_lines(second, second_flag)
    if len(first_lines) != len(second_lines):
        first_name = first if first_flag is None else f"{first_flag} {first}"
        second_name = second if second_flag is None else f"{second_flag} {second}"
        raise HfEntmaxValueError(
            f"{first_name} has {len(first_lines)} lines but {second_name} has {len(second_lines)}; the files must "
            "be line-aligned (line N of one translates line N of the other)"
        )
    return first_lines, second_lines


def listed_lines(line_numbers: Sequence[int], total: int | None = None) -> str:
    """The first `MAX_LISTED_LINES` line numbers, comma-separated, then "..." when there are more (``total``
    of them, if more than ``line_numbers`` holds)."""
    shown = line_numbers[:MAX_LISTED_LINES]
    more = ", ..." if max(len(line_numbers), total or 0) > len(shown) else ""
    return ", ".join(map(str, shown)) + more
