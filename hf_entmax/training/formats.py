"""One local data file of each format read into its sentence pairs, in file order, with the line of each.

- ``.tsv``: one pair per line, ``source<TAB>target``; quotes are ordinary text, as in MT corpora;
- ``.csv``: comma-separated, quoted as the ``csv`` module (and Excel, pandas) write it: a quoted field may hold
  commas, quotes, tabs and line breaks;
- ``.json``/``.jsonl``: JSON lines (one record per line, as transformers' run_translation.py reads), one JSON array of
  records, or one object whose only list-valued key holds the records (``{"data": [...]}``); a record is
  ``{"translation": {"<source_lang>": "...", "<target_lang>": "..."}}`` or flat ``{"<source_lang>": "...", ...}``;
- ``.parquet``: a ``translation`` struct column or two flat columns;
- two plain text files, one sentence per line, line N of the source translating line N of the target.

Columns and keys are found as `hf_entmax.training.columns` says. The first row of a .csv/.tsv file is a header only if
it names the columns so; without one, column 1 is the source and column 2 the target. A first row that names other
language codes is an error; one of plain words ("English", "text_de") above rows that are not is read as a sentence
pair with a warning (short pairs such as "Danke<TAB>Thanks" look the same; a word list gets no warning).

Every text format is decoded by `hf_entmax.common.text_files.iter_lines`, parsed by the standard library (``csv``,
``json``) and Parquet by pyarrow; a malformed file is one line naming the file, the 1-based line and what was expected.
Not ``datasets.load_dataset("csv"/"json")``: it copies each file into its cache, takes the first row as a header
always, fills a record's missing keys with nulls instead of refusing it, and reports a broken line as a row of an
Arrow block ("JSON parse error: ... in row 2"), not as the file's line.
The pairs come back as read, empty ones included: the checks across pairs are `hf_entmax.training.data`'s.
"""

import csv
import json
import logging
import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from ..common.text_files import iter_lines, listed_lines, read_aligned_lines
from ..errors import HfEntmaxFileNotFoundError, HfEntmaxValueError, one_line
from .columns import find_name, language_key, side_columns, table_sides


logger = logging.getLogger(__name__)

SUPPORTED_SUFFIXES = (".tsv", ".csv", ".json", ".jsonl", ".parquet")
# A language code as datasets name columns and translation keys: "de", "eng", "pt_BR", "zh-Hans".
LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(?:[_-][a-z0-9]{2,8})*", re.IGNORECASE)
# A column name of one to three plain words ("English", "text_de", "German text"); a sentence mostly has punctuation,
# non-ASCII letters or more words.
HEADER_LIKE_CELL = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(?: [A-Za-z0-9_-]+){0,2}")
# A .tsv field as a CSV writer quotes one that holds a quote character: wrapped in quotes, the inner ones doubled.
CSV_QUOTED_FIELD = re.compile(r'"(?:[^"]|"")*""(?:[^"]|"")*"')
JSON_DECODER = json.JSONDecoder()
JSON_WHITESPACE = re.compile(r"[ \t\n\r]*")


class Pairs(NamedTuple):
    """The sentence pairs of one input in its order, as read: not stripped, empty and missing sides included."""

    sources: pa.Array | pa.ChunkedArray  # (num_pairs,) strings, null where a side is missing
    targets: pa.Array | pa.ChunkedArray  # (num_pairs,)
    # The 1-based line of each pair in a text file; None for a table, whose pairs are its rows.
    line_numbers: Sequence[int] | None


def read_pairs(path: Path, source_lang: str, target_lang: str) -> Pairs:
    """The pairs of one ``.tsv``, ``.csv``, ``.json``/``.jsonl`` or ``.parquet`` file (format by suffix).

    Args:
        path: The file; see the module docstring for each layout. Columns and keys of other languages are ignored.
        source_lang: Language code of the source side, e.g. ``"de"``.
        target_lang: Language code of the target side, e.g. ``"en"``.

    Raises:
        HfEntmaxFileNotFoundError: If the file does not exist.
        HfEntmaxValueError: If the suffix is not supported, or a line, record or column is malformed (naming the
            file and the line).
    """
    if not path.exists():
        raise HfEntmaxFileNotFoundError(f"data file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return _read_parquet(path, source_lang, target_lang)
    if suffix in (".tsv", ".csv"):
        return _pairs_of_lines(_parse_delimited(path, "\t" if suffix == ".tsv" else ",", source_lang, target_lang))
    if suffix in (".json", ".jsonl"):
        return _pairs_of_lines(_parse_json(path, source_lang, target_lang))
    raise HfEntmaxValueError(
        f"{path}: unsupported file format {path.suffix or '(no suffix)'!r}; supported are "
        f"{', '.join(SUPPORTED_SUFFIXES)} and folders written by Dataset.save_to_disk (for two plain text files, "
        "one sentence per line, use a source/target file pair instead)"
    )


def read_aligned_pairs(source_path: Path, target_path: Path) -> Pairs:
    """The pairs of two plain text files, one sentence per line, line N of one translating line N of the other.

    Raises:
        HfEntmaxFileNotFoundError: If either file does not exist.
        HfEntmaxValueError: If a file is not UTF-8 (naming the line) or the line counts differ.
    """
    sources, targets = read_aligned_lines(source_path, target_path)
    return _pairs_of_lines(
        (line_no, source, target)
        for line_no, (source, target) in enumerate(zip(sources, targets, strict=True), start=1)
    )


def _pairs_of_lines(rows: Iterable[tuple[int, str, str]]) -> Pairs:
    """`Pairs` from the ``(line_no, source, target)`` rows of a text file."""
    line_numbers, sources, targets = [], [], []
    for line_no, source, target in rows:
        line_numbers.append(line_no)
        sources.append(source)
        targets.append(target)
    return Pairs(pa.array(sources, pa.string()), pa.array(targets, pa.string()), line_numbers)


# --- .tsv and .csv -----------------------------------------------------------------------------------------------


def _delimited_records(path: Path, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """``(first line, cells)`` of each record: a .tsv line split at tabs, a .csv record as the csv module reads it."""
    if delimiter == "\t":
        for line_no, line in iter_lines(path):
            yield line_no, line.split("\t")
        return
    # The csv module needs the line ends to keep line breaks inside quoted fields; strict mode makes a stray quote
    # an error instead of silently dropping it.
    reader = csv.reader((line + "\n" for _, line in iter_lines(path)), strict=True, skipinitialspace=True)
    line_no = 1
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            problem = str(error)
            if "new-line character" in problem:
                problem = "a carriage return inside an unquoted field"
            raise HfEntmaxValueError(
                f"{path} line {line_no}: malformed CSV ({problem}); a field with commas, quotes or line breaks "
                'must be quoted, its quotes doubled: "He said ""hi"", then left"'
            ) from None
        yield line_no, cells
        line_no = reader.line_num + 1


def _parse_delimited(path: Path, delimiter: str, source_lang: str, target_lang: str) -> Iterator[tuple[int, str, str]]:
    kind, separator = ("tab-separated", "<TAB>") if delimiter == "\t" else ("comma-separated", ",")
    columns = None  # (source position, target position), fixed by the first non-blank record
    width, header_line = 2, None
    # The first record when it is plain words like a header but does not name the columns; whether it was a header
    # is judged by the next complete pair: rows of plain words throughout are a word list, not a header over data.
    header_like = None
    csv_quoted_lines = []
    for line_no, cells in _delimited_records(path, delimiter):
        if not any(cell.strip() for cell in cells):
            # A blank line (often a trailing one) is an empty pair, skipped like any other.
            yield line_no, "", ""
            continue
        first_record = columns is None
        if first_record:
            columns = _header_columns(cells, f"{path} line {line_no}", source_lang, target_lang)
            if columns is not None:
                width, header_line = len(cells), line_no
                continue
            columns = (0, 1)
        if len(cells) != width:
            expected = (
                f"{width} {kind} columns as in the header on line {header_line}"
                if header_line is not None
                else f"2 {kind} columns (source, target)"
            )
            raise HfEntmaxValueError(f"{path} line {line_no}: expected {expected}, found {len(cells)}")
        if first_record:
            header_like = (line_no, cells) if _is_header_like(cells) else None
        elif header_like is not None and all(cells[column].strip() for column in columns):
            if not _is_header_like(cells):
                first_line, names = header_like
                logger.warning(
                    f"{path} line {first_line} ({', '.join(repr(name.strip()) for name in names)}) looks like a "
                    "header but names neither the languages nor source/target, so it is read as a sentence pair; if "
                    f"it is a header, name its columns {source_lang}{separator}{target_lang}"
                )
            header_like = None
        if delimiter == "\t" and any(CSV_QUOTED_FIELD.fullmatch(cells[column].strip()) for column in columns):
            csv_quoted_lines.append(line_no)
        source_column, target_column = columns
        yield line_no, cells[source_column], cells[target_column]
    if csv_quoted_lines:
        listed = listed_lines(csv_quoted_lines)
        logger.warning(
            f"{path}: {len(csv_quoted_lines)} line(s) have CSV-quoted fields (lines {listed}); a .tsv file is read "
            "literally, so their quotes stay in the text: write it without quoting (pandas: quoting=csv.QUOTE_NONE) "
            "or as .csv"
        )


def _header_columns(cells: list[str], where: str, source_lang: str, target_lang: str) -> tuple[int, int] | None:
    """Source and target positions if the first record of a .csv/.tsv file is a header, None if it is a pair.

    Raises:
        HfEntmaxValueError: If the record is a header of language codes other than the pair asked for.
    """
    header = side_columns(cells, source_lang, target_lang, where)
    if header is not None:
        return header
    names = [cell.strip() for cell in cells]
    asked = {language_key(source_lang), language_key(target_lang)}
    # Both cells codes and one of them ours: a header for another pair (a pair of sentences could hardly be that).
    if all(LANGUAGE_CODE.fullmatch(name) for name in names) and asked & {language_key(name) for name in names}:
        raise HfEntmaxValueError(
            f"{where}: the header names the languages {', '.join(map(repr, names))}, but --source_lang {source_lang} "
            f"--target_lang {target_lang} asks for columns {source_lang!r} and {target_lang!r}"
        )
    return None


def _is_header_like(cells: list[str]) -> bool:
    return all(HEADER_LIKE_CELL.fullmatch(cell.strip()) for cell in cells)


# --- .json and .jsonl --------------------------------------------------------------------------------------------


def _parse_json(path: Path, source_lang: str, target_lang: str) -> Iterator[tuple[int, str, str]]:
    lines = [line for _, line in iter_lines(path)]
    first = next((index for index, line in enumerate(lines) if line.strip()), None)
    if first is not None:
        first_line = lines[first].strip()
        single_line = not any(line.strip() for line in lines[first + 1 :])
        # A document (an array or object, over one line or several) unless the first line holds a value of its own,
        # or was meant to (it ends like one): then the file is JSON lines, and a broken record is reported at its line.
        if single_line or not (_is_json(first_line) or first_line.endswith(("}", "]"))):
            yield from _parse_json_document(path, "\n".join(lines), source_lang, target_lang)
            return
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            yield line_no, "", ""
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise _invalid_json(path, line_no, error) from None
        yield line_no, *_record_pair(record, f"{path} line {line_no}", source_lang, target_lang)


def _parse_json_document(path: Path, text: str, source_lang: str, target_lang: str) -> Iterator[tuple[int, str, str]]:
    """The pairs of one JSON value: an array of records, an object holding them in a list, or one record."""
    line_starts = [0, *(match.end() for match in re.finditer("\n", text))]
    start = JSON_WHITESPACE.match(text).end()
    try:
        # The standard library finds every syntax error, with its line and column.
        document, end = JSON_DECODER.raw_decode(text, start)
        records = [(start, None, document)]
        if isinstance(document, list):
            records = _json_members(text, start)
        elif isinstance(document, dict):
            where = f"{path} line {bisect_right(line_starts, start)}"
            if not _is_record(document, where, source_lang, target_lang):
                # An object holding the records under a key, as datasets' json loader reads with field="key".
                lists = [member for member in _json_members(text, start) if isinstance(member[2], list)]
                if len(lists) > 1:
                    keys = ", ".join(repr(key) for _, key, _ in lists)
                    raise HfEntmaxValueError(
                        f"{path}: the JSON object holds several lists ({keys}); expected the records in one list, "
                        "a JSON array, or JSON lines"
                    )
                if lists:
                    records = _json_members(text, lists[0][0])
        trailing = JSON_WHITESPACE.match(text, end).end()
        if trailing < len(text):  # what json.loads would refuse after the value
            raise json.JSONDecodeError("Extra data", text, trailing)
    except json.JSONDecodeError as error:
        raise _invalid_json(path, error.lineno, error) from None
    for offset, _, record in records:
        line_no = bisect_right(line_starts, offset)
        yield line_no, *_record_pair(record, f"{path} line {line_no}", source_lang, target_lang)


def _invalid_json(path: Path, line_no: int, error: json.JSONDecodeError) -> HfEntmaxValueError:
    return HfEntmaxValueError(f"{path} line {line_no}: invalid JSON ({error.msg} at column {error.colno})")


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def _json_members(text: str, start: int) -> list[tuple[int, str | None, object]]:
    """``(offset, key, value)`` of each element of the JSON array (key None) or member of the object at
    ``text[start]``, which the standard library has parsed without error.

    The standard library tells no positions of what it decodes, and a bad record is reported at its line: this walk
    decodes the members one at a time to learn where each starts. Duplicate keys stay, as written.
    """
    closing = "]" if text[start] == "[" else "}"
    members = []
    index = JSON_WHITESPACE.match(text, start + 1).end()
    while text[index] != closing:
        key = None
        if closing == "}":
            key, index = JSON_DECODER.raw_decode(text, index)
            index = JSON_WHITESPACE.match(text, text.index(":", index) + 1).end()
        value, end = JSON_DECODER.raw_decode(text, index)
        members.append((index, key, value))
        index = JSON_WHITESPACE.match(text, end).end()
        if text[index] == ",":
            index = JSON_WHITESPACE.match(text, index + 1).end()
    return members


def _is_record(record: dict, where: str, source_lang: str, target_lang: str) -> bool:
    return "translation" in record or side_columns(list(record), source_lang, target_lang, where) is not None


def _record_pair(record: object, where: str, source_lang: str, target_lang: str) -> tuple[str, str]:
    """The (source, target) of a JSON record: ``{"translation": {lang: ...}}`` or flat ``{lang: ...}``."""
    if isinstance(record, dict) and "translation" in record:
        translation = record["translation"]
        if not isinstance(translation, dict):
            raise HfEntmaxValueError(
                f'{where}: "translation" must map language codes to sentences, got {type(translation).__name__}'
            )
        keys = list(translation)
        found = [find_name(keys, lang, f'{where}: "translation"', "keys") for lang in (source_lang, target_lang)]
        missing = [lang for lang, index in zip((source_lang, target_lang), found, strict=True) if index is None]
        if missing:
            raise HfEntmaxValueError(
                f'{where}: "translation" has no {" or ".join(map(repr, missing))} key (keys present: '
                f"{', '.join(map(repr, translation)) or 'none'})"
            )
        sides = [(f'"translation"[{keys[index]!r}]', translation[keys[index]]) for index in found]
    else:
        keys = list(record) if isinstance(record, dict) else []
        columns = side_columns(keys, source_lang, target_lang, where) if isinstance(record, dict) else None
        if columns is None:
            found = f"keys {keys}" if isinstance(record, dict) else f"a JSON {type(record).__name__}"
            raise HfEntmaxValueError(
                f'{where}: expected an object with a "translation" key or keys "{source_lang}" and "{target_lang}", '
                f'like {{"translation": {{"{source_lang}": "...", "{target_lang}": "..."}}}} or '
                f'{{"{source_lang}": "...", "{target_lang}": "..."}}; found {found}'
            )
        sides = [(f"key {keys[column]!r}", record[keys[column]]) for column in columns]
    for name, value in sides:
        if value is not None and not isinstance(value, str):
            raise HfEntmaxValueError(f"{where}: {name} must be a string, got {type(value).__name__}")
        if isinstance(value, str) and any("\ud800" <= character <= "\udfff" for character in value):
            # JSON can escape half a UTF-16 pair ("\ud800"), which is no character: no tokenizer can encode it.
            raise HfEntmaxValueError(f"{where}: {name} holds a lone surrogate escape (\\ud800–\\udfff), not text")
    # A null is a missing sentence, skipped like an empty one (as a missing .csv cell or Parquet null).
    return sides[0][1] or "", sides[1][1] or ""


# --- .parquet ----------------------------------------------------------------------------------------------------


def _read_parquet(path: Path, source_lang: str, target_lang: str) -> Pairs:
    # pyarrow directly: datasets.load_dataset("parquet") would first copy the file into its cache.
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as error:
        raise HfEntmaxValueError(
            f"{path}: not a readable Parquet file ({one_line(error, None, cause=True)})"
        ) from None
    return Pairs(*table_sides(table, str(path), source_lang, target_lang), None)
