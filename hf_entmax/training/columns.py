"""Which column, key or field holds each side of a pair: found by the language codes, ignoring case.

Language codes are compared ignoring case everywhere (`language_key`): ``--source_lang EN --target_lang en`` name
one language and are refused. Flat columns (a .csv/.tsv header, flat JSON records, Parquet and dataset columns) are
found by name: the two language codes in any order and case, else ``source``/``target`` (or ``src``/``tgt``); the keys
of a ``translation`` record or struct by the language codes in any case. Two columns or keys naming one side, or
``source``/``target`` beside a column named by one of the codes, are an error.
"""

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import HfEntmaxValueError


# Column names that tell source from target when the columns are not named by the language codes.
SIDE_NAMES = (("source", "target"), ("src", "tgt"))


def language_key(name: str) -> str:
    """A language code or column name as every comparison of them sees it: without case or surrounding spaces, so
    that ``EN``, ``en`` and ``en `` name one language and match one column."""
    return name.strip().casefold()


def check_language_pair(source_lang: str, target_lang: str) -> None:
    """Check that the language codes can serve as the two keys of a translation row.

    Raises:
        HfEntmaxValueError: If a code is not a non-empty string or both name the same language (in any case).
    """
    for flag, lang in (("--source_lang", source_lang), ("--target_lang", target_lang)):
        if not isinstance(lang, str) or not lang.strip():
            raise HfEntmaxValueError(f"{flag} must be a non-empty language code such as 'de' or 'en', got {lang!r}")
    if language_key(source_lang) == language_key(target_lang):
        same = f"both are {source_lang!r}" if source_lang == target_lang else "codes are compared ignoring case"
        raise HfEntmaxValueError(
            f"--source_lang {source_lang} and --target_lang {target_lang} name the same language ({same}, as "
            "columns are matched); give two different codes"
        )


def find_name(names: Sequence[str], name: str, where: str, what: str) -> int | None:
    """The position of the one entry of ``names`` that is ``name`` by `language_key`, None if there is none.

    Args:
        names: Column names, record keys or struct fields.
        name: The name looked for.
        where: The file (and line) or dataset the names come from, for messages.
        what: What the names are, for messages: ``"columns"``, ``"keys"`` or ``"fields"``.

    Raises:
        HfEntmaxValueError: If several are (``en`` and ``EN``).
    """
    key = language_key(name)
    found = [index for index, candidate in enumerate(names) if language_key(candidate) == key]
    if len(found) > 1:
        listed = ", ".join(repr(names[index]) for index in found)
        raise HfEntmaxValueError(f"{where}: {len(found)} {what} name {name!r} ({listed}); keep one")
    return found[0] if found else None


def side_columns(names: Sequence[str], source_lang: str, target_lang: str, where: str) -> tuple[int, int] | None:
    """Positions of the source and target columns among ``names``: those named by the language codes, else
    ``source``/``target`` or ``src``/``tgt`` (compared by `language_key`); None if no such pair is there.

    Raises:
        HfEntmaxValueError: If two columns name one side, or ``source``/``target`` are used while another column is
            named by one of the language codes (either could hold that side).
    """
    languages = [find_name(names, lang, where, "columns") for lang in (source_lang, target_lang)]
    if None not in languages:
        return languages[0], languages[1]
    for source_name, target_name in SIDE_NAMES:
        sides = [find_name(names, name, where, "columns") for name in (source_name, target_name)]
        if None in sides:
            continue
        for side, language, lang in zip(sides, languages, (source_lang, target_lang), strict=True):
            if language is not None:
                raise HfEntmaxValueError(
                    f"{where}: columns {names[side]!r} and {names[language]!r} could both hold the {lang!r} side; "
                    "rename or remove one"
                )
        return sides[0], sides[1]
    return None


def table_sides(
    table: pa.Table, description: str, source_lang: str, target_lang: str
) -> tuple[pa.ChunkedArray, pa.ChunkedArray]:
    """The source and target string columns of a table (a Parquet file, a dataset): the fields of its
    ``translation`` struct, or two flat columns found by `side_columns`.

    Raises:
        HfEntmaxValueError: If neither is there, a side is named twice, or a side does not hold strings.
    """
    names = table.column_names
    if "translation" in names:
        column = table.column("translation")
        if not pa.types.is_struct(column.type):
            raise HfEntmaxValueError(
                f"{description}: column 'translation' holds {column.type} values, expected records of sentences by "
                "language code (a datasets.Translation feature)"
            )
        fields = [column.type.field(index).name for index in range(column.type.num_fields)]
        where = f"{description}: column 'translation'"
        found = [find_name(fields, lang, where, "fields") for lang in (source_lang, target_lang)]
        missing = [lang for lang, index in zip((source_lang, target_lang), found, strict=True) if index is None]
        if missing:
            raise HfEntmaxValueError(
                f"{description}: column 'translation' has no {' or '.join(map(repr, missing))} field "
                f"(fields: {', '.join(map(repr, fields)) or 'none'})"
            )
        sides = [(f"'translation'.{fields[index]}", pc.struct_field(column, index)) for index in found]
    else:
        columns = side_columns(names, source_lang, target_lang, description)
        if columns is None:
            raise HfEntmaxValueError(
                f"{description}: expected a 'translation' column or columns named {source_lang!r} and "
                f"{target_lang!r} (or 'source' and 'target'); found columns {', '.join(map(repr, names)) or 'none'}"
            )
        sides = [(repr(names[index]), table.column(index)) for index in columns]
    checked = []
    for name, column in sides:
        if pa.types.is_null(column.type):  # a column of missing values only: all its pairs are empty
            column = column.cast(pa.string())
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            raise HfEntmaxValueError(f"{description}: column {name} holds {column.type} values, expected strings")
        checked.append(column)
    return checked[0], checked[1]
