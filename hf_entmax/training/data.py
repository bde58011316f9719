"""Parallel text from local files, saved datasets and the Hub, as ``datasets`` objects shaped like the Hub's
translation datasets.

Every reader returns a :class:`datasets.Dataset` with one ``translation`` column whose rows are
``{source_lang: str, target_lang: str}`` (a :class:`datasets.Translation` feature, as in wmt16 or opus), so the
training script preprocesses every input the same way. Supported inputs:

- ``.tsv``: one pair per line, ``source<TAB>target``; quotes are ordinary text, as in MT corpora;
- ``.csv``: comma-separated, quoted as the ``csv`` module (and Excel, pandas) write it: a quoted field may hold
  commas, quotes, tabs and line breaks;
- ``.json``/``.jsonl``: JSON lines (one record per line, as transformers' run_translation.py reads), one JSON array of
  records, or one object whose only list-valued key holds the records (``{"data": [...]}``); a record is
  ``{"translation": {"<source_lang>": "...", "<target_lang>": "..."}}`` or flat ``{"<source_lang>": "...", ...}``;
- ``.parquet``: a ``translation`` struct column or two flat columns;
- a folder written by ``Dataset.save_to_disk`` (a ``translation`` column or two flat columns);
- two plain text files, one sentence per line, line N of the source translating line N of the target;
- a dataset named by ``--dataset_name``: a Hub id, a folder written by ``DatasetDict.save_to_disk`` (or
  ``Dataset.save_to_disk``, which becomes the train split), or a folder ``datasets.load_dataset`` reads; its splits
  ``train``, ``validation`` (or ``valid``, ``dev``, ``val``) and ``test`` are used.

Language codes are compared ignoring case everywhere (`language_key`): ``--source_lang EN --target_lang en`` name
one language and are refused. Flat columns (a .csv/.tsv header, flat JSON records, Parquet and dataset columns) are
found by name: the two language codes in any order and case, else ``source``/``target`` (or ``src``/``tgt``); the keys
of a ``translation`` record or struct by the language codes in any case. Two columns or keys naming one side, or
``source``/``target`` beside a column named by one of the codes, are an error. The first row of a .csv/.tsv file is a
header only if it names the columns so; without one, column 1 is the source and column 2 the target. A first row that
names other language codes is an error; one of plain words ("English", "text_de") above rows that are not is read as
a sentence pair with a warning (short pairs such as "Danke<TAB>Thanks" look the same; a word list gets no warning).

Bad input fails before any training starts, with one line naming the file, the 1-based line (or row) and what was
expected. Pairs with an empty source or target (missing cells and JSON nulls included) are skipped with one warning
per file that says how many of how many; a file whose every pair has the same text on both sides is an error (the
same column or file read twice), one where more than half do is warned about.
"""

import csv
import json
import logging
import os
import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from datasets import Dataset, DatasetDict, Features, Translation
from transformers import PreTrainedTokenizerBase

from ..common.hub_ids import is_hub_id
from ..common.text_files import MAX_LISTED_LINES, iter_lines, listed_lines, read_aligned_lines
from ..errors import HfEntmaxFileNotFoundError, HfEntmaxValueError, one_line
from . import synthetic
from .arguments import DataArguments


logger = logging.getLogger(__name__)

PathLike = str | os.PathLike
SUPPORTED_SUFFIXES = (".tsv", ".csv", ".json", ".jsonl", ".parquet")
SPLITS = ("train", "validation", "test")
# The split names datasets use for the three splits of a run (compared in lower case).
SPLIT_ALIASES = {
    "train": "train",
    "validation": "validation",
    "valid": "validation",
    "dev": "validation",
    "val": "validation",
    "test": "test",
}
# Column names that tell source from target when the columns are not named by the language codes.
SIDE_NAMES = (("source", "target"), ("src", "tgt"))
# A language code as datasets name columns and translation keys: "de", "eng", "pt_BR", "zh-Hans".
LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(?:[_-][a-z0-9]{2,8})*", re.IGNORECASE)
# A column name of one to three plain words ("English", "text_de", "German text"); a sentence mostly has punctuation,
# non-ASCII letters or more words.
HEADER_LIKE_CELL = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(?: [A-Za-z0-9_-]+){0,2}")
# A .tsv field as a CSV writer quotes one that holds a quote character: wrapped in quotes, the inner ones doubled.
CSV_QUOTED_FIELD = re.compile(r'"(?:[^"]|"")*""(?:[^"]|"")*"')
JSON_DECODER = json.JSONDecoder()
JSON_WHITESPACE = re.compile(r"[ \t\n\r]*")


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


def read_parallel_file(path: PathLike, source_lang: str, target_lang: str) -> Dataset:
    """Read sentence pairs from one file (format by suffix) or a folder written by ``Dataset.save_to_disk``.

    Args:
        path: A ``.tsv``, ``.csv``, ``.json``/``.jsonl`` or ``.parquet`` file, or a saved-dataset folder (see the
            module docstring for each layout); columns and keys of other languages are ignored.
        source_lang: Language code of the source side, e.g. ``"de"``.
        target_lang: Language code of the target side, e.g. ``"en"``.

    Returns:
        A dataset with one ``translation`` column of ``{source_lang: str, target_lang: str}`` rows.

    Raises:
        HfEntmaxFileNotFoundError: If the path does not exist.
        HfEntmaxValueError: If the suffix is not supported, a line, row or column is malformed, a folder is not a
            saved dataset, or no pair is left after skipping empty ones.
    """
    check_language_pair(source_lang, target_lang)
    path = Path(path)
    if path.is_dir():
        saved = load_saved_dataset(path)
        if isinstance(saved, DatasetDict):
            raise HfEntmaxValueError(
                f"{path} holds a DatasetDict (splits {', '.join(map(repr, saved))}), not one split: give it as "
                f"--dataset_name, or give one split's folder (e.g. {path / next(iter(saved))}) as the split's file"
            )
        return dataset_to_translation(saved, str(path), source_lang, target_lang)
    if not path.exists():
        raise HfEntmaxFileNotFoundError(f"data file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return _read_parquet(path, source_lang, target_lang)
    if suffix in (".tsv", ".csv"):
        pairs = _parse_delimited(path, "\t" if suffix == ".tsv" else ",", source_lang, target_lang)
    elif suffix in (".json", ".jsonl"):
        pairs = _parse_json(path, source_lang, target_lang)
    else:
        raise HfEntmaxValueError(
            f"{path}: unsupported file format {path.suffix or '(no suffix)'!r}; supported are "
            f"{', '.join(SUPPORTED_SUFFIXES)} and folders written by Dataset.save_to_disk (for two plain text files, "
            "one sentence per line, use a source/target file pair instead)"
        )
    return _dataset_from_lines(pairs, str(path), source_lang, target_lang)


def read_text_pair(source_path: PathLike, target_path: PathLike, source_lang: str, target_lang: str) -> Dataset:
    """Read sentence pairs from two plain text files, one sentence per line, line N translating line N.

    Args:
        source_path: The source-language file.
        target_path: The target-language file, with exactly as many lines.
        source_lang: Language code of the source side, used as the row key.
        target_lang: Language code of the target side, used as the row key.

    Returns:
        A dataset with one ``translation`` column of ``{source_lang: str, target_lang: str}`` rows.

    Raises:
        HfEntmaxFileNotFoundError: If either file does not exist.
        HfEntmaxValueError: If a file is not UTF-8, the line counts differ, or no pair is left after skipping
            empty ones.
    """
    check_language_pair(source_lang, target_lang)
    source_path, target_path = Path(source_path), Path(target_path)
    sources, targets = read_aligned_lines(source_path, target_path)
    pairs = (
        (line_no, source, target)
        for line_no, (source, target) in enumerate(zip(sources, targets, strict=True), start=1)
    )
    return _dataset_from_lines(pairs, f"{source_path} / {target_path}", source_lang, target_lang)


def load_local_splits(
    *,
    train_file: PathLike | None = None,
    validation_file: PathLike | None = None,
    test_file: PathLike | None = None,
    train_source_file: PathLike | None = None,
    train_target_file: PathLike | None = None,
    validation_source_file: PathLike | None = None,
    validation_target_file: PathLike | None = None,
    test_source_file: PathLike | None = None,
    test_target_file: PathLike | None = None,
    source_lang: str,
    target_lang: str,
) -> DatasetDict:
    """Build the splits given as local files, each from one file (or saved-dataset folder) or a source/target pair.

    The argument names are the training command's flags (``--train_file``, ``--train_source_file``, ...).

    Returns:
        A ``DatasetDict`` with a ``"train"``, ``"validation"`` and/or ``"test"`` entry for each split given.

    Raises:
        HfEntmaxValueError: If no split is given, a split is given both as one file and as a pair, or only one
            file of a pair is given; any error of :func:`read_parallel_file` and :func:`read_text_pair`.
        HfEntmaxFileNotFoundError: If a file given does not exist (naming its flag).
    """
    check_language_pair(source_lang, target_lang)
    given = {
        "train": (train_file, train_source_file, train_target_file),
        "validation": (validation_file, validation_source_file, validation_target_file),
        "test": (test_file, test_source_file, test_target_file),
    }
    # Check every split's arguments before reading any file, so a typo in the last flag does not wait
    # for the training file to load.
    for split, (file, source_file, target_file) in given.items():
        if file is not None and (source_file is not None or target_file is not None):
            raise HfEntmaxValueError(
                f"give either --{split}_file or --{split}_source_file with --{split}_target_file, not both"
            )
        if (source_file is None) != (target_file is None):
            present, missing = ("source", "target") if target_file is None else ("target", "source")
            raise HfEntmaxValueError(
                f"--{split}_{present}_file was given without --{split}_{missing}_file; give both files of the pair"
            )
    if all(value is None for values in given.values() for value in values):
        raise HfEntmaxValueError(
            "no local data files given: pass --train_file (or --train_source_file with --train_target_file), "
            "and the same for validation/test as needed"
        )
    for split, paths in given.items():
        for flag, path in zip((f"{split}_file", f"{split}_source_file", f"{split}_target_file"), paths, strict=True):
            if path is not None and not Path(path).exists():
                raise HfEntmaxFileNotFoundError(f"--{flag} {path}: no such file or folder")

    splits = DatasetDict()
    for split, (file, source_file, target_file) in given.items():
        if file is not None:
            splits[split] = read_parallel_file(file, source_lang, target_lang)
        elif source_file is not None:
            splits[split] = read_text_pair(source_file, target_file, source_lang, target_lang)
    return splits


def load_named_dataset(dataset_name: str, config_name: str | None, source_lang: str, target_lang: str) -> DatasetDict:
    """The splits of ``--dataset_name``: a Hub id, a folder written by ``save_to_disk``, or a dataset folder.

    A folder holding ``dataset_dict.json`` or ``state.json`` is read with ``datasets.load_from_disk`` (a single
    ``Dataset`` becomes the train split); another folder, or a Hub id, with ``datasets.load_dataset``. Splits named
    ``valid``/``dev``/``val`` serve as validation; splits of other names are left out with a warning.

    Returns:
        A ``DatasetDict`` with ``"train"``, ``"validation"`` and/or ``"test"`` entries, each with one ``translation``
        column of ``{source_lang: str, target_lang: str}`` rows.

    Raises:
        HfEntmaxFileNotFoundError: If the name is a path to a folder that does not exist.
        HfEntmaxValueError: If the dataset cannot be loaded (offline, for a Hub id), has none of the three splits,
            two splits serving as one, or a split without a ``translation`` column or flat language columns.
    """
    check_language_pair(source_lang, target_lang)
    folder = Path(dataset_name).expanduser()
    if folder.is_dir() and _is_saved_dataset(folder):
        if config_name is not None:
            raise HfEntmaxValueError(
                f"--dataset_config_name {config_name!r} does not apply to {folder}, a dataset written by save_to_disk"
            )
        loaded = load_saved_dataset(folder)
    elif folder.is_dir():
        loaded = _load_with_datasets(
            str(folder),
            config_name,
            f"the dataset folder {folder} with datasets.load_dataset",
            "Data files can also be given one per split as --train_file/--validation_file/--test_file",
        )
    elif folder.exists():
        raise HfEntmaxValueError(
            f"--dataset_name {dataset_name!r} is a file, not a dataset: give it as --train_file "
            "(or --validation_file/--test_file)"
        )
    elif not is_hub_id(dataset_name):
        # Not a Hub id (those are "name" or "owner/name"): asking the Hub would only retry and fail.
        raise HfEntmaxFileNotFoundError(f"--dataset_name {dataset_name!r}: no such folder")
    else:
        loaded = _load_with_datasets(
            dataset_name,
            config_name,
            f"--dataset_name {dataset_name!r} (config {config_name!r})",
            "Offline, use local files instead",
        )
    if isinstance(loaded, Dataset):
        loaded = DatasetDict({"train": loaded})
    return DatasetDict(
        {
            split: dataset_to_translation(
                loaded[name], f"dataset {dataset_name!r} split {name!r}", source_lang, target_lang
            )
            for split, name in _choose_splits(list(loaded), dataset_name).items()
        }
    )


def load_parallel_data(data_args: DataArguments) -> tuple[DatasetDict, str, str]:
    """The raw splits (a ``translation`` column each) and the (source, target) language codes."""
    if data_args.dataset_config_name is not None and data_args.dataset_name is None:
        raise HfEntmaxValueError("--dataset_config_name needs --dataset_name (local files have no configurations)")
    if data_args.uses_synthetic_data():
        source_lang = data_args.source_lang or synthetic.SOURCE_LANG
        target_lang = data_args.target_lang or synthetic.TARGET_LANG
        asked = (language_key(source_lang), language_key(target_lang))
        if asked != (synthetic.SOURCE_LANG, synthetic.TARGET_LANG):
            raise HfEntmaxValueError(
                f"without data arguments the built-in synthetic pair is used, which translates "
                f"{synthetic.SOURCE_LANG} -> {synthetic.TARGET_LANG}; got --source_lang {source_lang} "
                f"--target_lang {target_lang}. Give --train_file (or a dataset) to train another pair"
            )
        # Its rows are keyed by its own codes, whatever their case on the command line.
        splits = synthetic.synthetic_splits(num_train=data_args.synthetic_train_size)
        return splits, synthetic.SOURCE_LANG, synthetic.TARGET_LANG

    if data_args.source_lang is None or data_args.target_lang is None:
        raise HfEntmaxValueError(
            "--source_lang and --target_lang are required with a dataset or local files "
            "(e.g. --source_lang de --target_lang en)"
        )
    check_language_pair(data_args.source_lang, data_args.target_lang)
    if data_args.dataset_name is not None:
        if data_args.local_files():
            raise HfEntmaxValueError(
                f"give either --dataset_name or local files, not both (got --dataset_name and "
                f"{', '.join('--' + name for name in data_args.local_files())})"
            )
        raw = load_named_dataset(
            data_args.dataset_name, data_args.dataset_config_name, data_args.source_lang, data_args.target_lang
        )
    else:
        raw = load_local_splits(
            **data_args.local_files(), source_lang=data_args.source_lang, target_lang=data_args.target_lang
        )
    return raw, data_args.source_lang, data_args.target_lang


def load_saved_dataset(folder: Path) -> Dataset | DatasetDict:
    """What ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk`` wrote into ``folder``.

    Raises:
        HfEntmaxValueError: If the folder holds no saved dataset or it cannot be read.
    """
    if not _is_saved_dataset(folder):
        raise HfEntmaxValueError(
            f"{folder} is a folder but not a dataset written by save_to_disk (it has no "
            f"{datasets.config.DATASETDICT_JSON_FILENAME} or {datasets.config.DATASET_STATE_JSON_FILENAME}); "
            f"give a data file ({', '.join(SUPPORTED_SUFFIXES)}) or such a folder"
        )
    try:
        return datasets.load_from_disk(str(folder))
    except Exception as error:  # datasets and pyarrow raise many kinds; all mean "could not read it"
        raise HfEntmaxValueError(
            f"could not read the saved dataset {folder}: {one_line(error, None, cause=True)}"
        ) from error


def dataset_to_translation(dataset: Dataset, description: str, source_lang: str, target_lang: str) -> Dataset:
    """A dataset's pairs as one ``translation`` column, from its ``translation`` column or two flat columns.

    Args:
        dataset: Any dataset with a ``translation`` column of ``{language: sentence}`` records (the Hub's
            translation datasets) or flat columns named by the language codes (or ``source``/``target``).
        description: What the dataset is, for messages (e.g. ``"dataset 'wmt16' split 'train'"``).
        source_lang: Language code of the source side.
        target_lang: Language code of the target side.

    Raises:
        HfEntmaxValueError: If the columns are missing or do not hold strings, or no pair is left after skipping
            empty ones.
    """
    check_language_pair(source_lang, target_lang)
    # The arrow format hands over the (memory-mapped) table without turning rows into Python objects.
    sources, targets = _table_sides(dataset.with_format("arrow")[:], description, source_lang, target_lang)
    return _build_dataset(sources, targets, description, source_lang, target_lang)


def limit_samples(dataset: Dataset, max_samples: int | None) -> Dataset:
    """Keep the first ``max_samples`` rows, like run_translation's ``--max_train_samples`` (``None`` keeps all).

    Raises:
        HfEntmaxValueError: If ``max_samples`` is not a positive integer or ``None``.
    """
    if max_samples is None:
        return dataset
    if isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < 1:
        raise HfEntmaxValueError(f"max_samples must be a positive integer or None, got {max_samples!r}")
    if max_samples >= len(dataset):
        return dataset
    return dataset.select(range(max_samples))


def report_truncation(
    raw: DatasetDict,
    tokenized: DatasetDict,
    tokenizer: PreTrainedTokenizerBase,
    data_args: DataArguments,
    source_lang: str,
    target_lang: str,
) -> dict[str, dict[str, int]]:
    """Count the examples the length limits cut, and say so in one warning per split that has any.

    Sources (``--source_prefix`` included) are measured against ``--max_source_length``; targets against
    ``--max_target_length`` in the train split, ``--val_max_target_length`` in validation and test (where the cut
    targets are also the references BLEU is scored against). Only the examples that reach a limit in ``tokenized``
    are tokenized again, without truncation, so the count costs little unless most examples reach it.

    Args:
        raw: The raw splits, a ``translation`` column each.
        tokenized: The same splits tokenized with truncation (``input_ids`` and ``labels``), of the first
            ``--max_*_samples`` examples.
        tokenizer: The tokenizer they were tokenized with.
        data_args: The run's data arguments, their lengths resolved.
        source_lang: Language code of the source side.
        target_lang: Language code of the target side.

    Returns:
        Per split, ``{"examples": ..., "truncated_sources": ..., "truncated_targets": ...}`` (for the run's summary).

    Raises:
        HfEntmaxValueError: If ``--source_prefix`` alone fills ``--max_source_length``.
    """
    prefix = data_args.source_prefix or ""
    prefix_tokens = len(tokenizer(prefix, add_special_tokens=False)["input_ids"]) if prefix else 0
    if prefix_tokens + 1 >= data_args.max_source_length:
        raise HfEntmaxValueError(
            f"--source_prefix {prefix!r} takes {prefix_tokens} tokens and </s> 1, which leaves no room for the source "
            f"within --max_source_length {data_args.max_source_length}; give --max_source_length "
            f"{prefix_tokens + 2} or more"
        )

    # verbose=False: transformers would warn of a sequence longer than the model, which is what is counted.
    def source_ids(pairs: list[dict]) -> list[list[int]]:
        return tokenizer([prefix + pair[source_lang] for pair in pairs], verbose=False)["input_ids"]

    def target_ids(pairs: list[dict]) -> list[list[int]]:
        return tokenizer(text_target=[pair[target_lang] for pair in pairs], verbose=False)["input_ids"]

    counts = {}
    for name, features in tokenized.items():
        max_samples, max_target_length = data_args.split_limits(name)
        pairs = limit_samples(raw[name], max_samples)
        counts[name] = {"examples": len(features)}
        cut = []
        for side, column, flag, limit, encode in (
            ("sources", "input_ids", "--max_source_length", data_args.max_source_length, source_ids),
            ("targets", "labels", data_args.target_length_flag(name), max_target_length, target_ids),
        ):
            lengths = pc.list_value_length(features.with_format("arrow")[column])
            at_limit = pc.indices_nonzero(pc.greater_equal(lengths, limit)).to_pylist()
            full_lengths = [len(ids) for ids in encode(pairs.select(at_limit)["translation"])] if at_limit else []
            num_cut = counts[name][f"truncated_{side}"] = sum(length > limit for length in full_lengths)
            if num_cut:
                cut.append(
                    f"{flag} {limit} cuts {num_cut:,} of the {len(features):,} {name} {side} "
                    f"({num_cut / len(features):.1%}; the longest has {max(full_lengths):,} tokens)"
                )
        if cut:
            logger.warning(f"truncation: {' and '.join(cut)}")
    return counts


def _side_columns(names: Sequence[str], source_lang: str, target_lang: str, where: str) -> tuple[int, int] | None:
    """Positions of the source and target columns among ``names``: those named by the language codes, else
    ``source``/``target`` or ``src``/``tgt`` (compared by `language_key`); None if no such pair is there.

    Raises:
        HfEntmaxValueError: If two columns name one side, or ``source``/``target`` are used while another column is
            named by one of the language codes (either could hold that side).
    """
    languages = [_find_name(names, lang, where, "columns") for lang in (source_lang, target_lang)]
    if None not in languages:
        return languages[0], languages[1]
    for source_name, target_name in SIDE_NAMES:
        sides = [_find_name(names, name, where, "columns") for name in (source_name, target_name)]
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


def _find_name(names: Sequence[str], name: str, where: str, what: str) -> int | None:
    """The position of the one entry of ``names`` that is ``name`` by `language_key`, None if there is none.

    Raises:
        HfEntmaxValueError: If several are (``en`` and ``EN``), naming them as ``what`` ("columns", "keys").
    """
    key = language_key(name)
    found = [index for index, candidate in enumerate(names) if language_key(candidate) == key]
    if len(found) > 1:
        listed = ", ".join(repr(names[index]) for index in found)
        raise HfEntmaxValueError(f"{where}: {len(found)} {what} name {name!r} ({listed}); keep one")
    return found[0] if found else None


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
    header = _side_columns(cells, source_lang, target_lang, where)
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


def _parse_json(path: Path, source_lang: str, target_lang: str) -> Iterator[tuple[int, str, str]]:
    lines = [line for _, line in iter_lines(path)]
    first = next((index for index, line in enumerate(lines) if line.strip()), None)
    if first is None:
        yield from _parse_json_lines(path, lines, source_lang, target_lang)
        return
    first_line = lines[first].strip()
    single_line = not any(line.strip() for line in lines[first + 1 :])
    # JSON lines when the first line holds a value of its own, or was meant to (it ends like one): then a broken
    # record is reported at its own line. A document (an array or object over several lines) opens otherwise.
    if not single_line and (_is_json(first_line) or first_line.endswith(("}", "]"))):
        yield from _parse_json_lines(path, lines, source_lang, target_lang)
        return
    text = "\n".join(lines)
    line_starts = [0, *(match.end() for match in re.finditer("\n", text))]
    start = JSON_WHITESPACE.match(text).end()
    try:
        if text.startswith("[", start):
            records, end = _json_members(text, start)
        else:
            record, end = JSON_DECODER.raw_decode(text, start)
            records = [(start, None, record)]
            where = f"{path} line {bisect_right(line_starts, start)}"
            if isinstance(record, dict) and not _is_record(record, where, source_lang, target_lang):
                # An object holding the records under a key, as datasets' json loader reads with field="key".
                lists = [member for member in _json_members(text, start)[0] if isinstance(member[2], list)]
                if len(lists) > 1:
                    keys = ", ".join(repr(key) for _, key, _ in lists)
                    raise HfEntmaxValueError(
                        f"{path}: the JSON object holds several lists ({keys}); expected the records in one list, "
                        "a JSON array, or JSON lines"
                    )
                if lists:
                    records, _ = _json_members(text, lists[0][0])
        trailing = JSON_WHITESPACE.match(text, end).end()
        if trailing < len(text):
            raise json.JSONDecodeError("Extra data", text, trailing)
    except json.JSONDecodeError as error:
        raise HfEntmaxValueError(
            f"{path} line {error.lineno}: invalid JSON ({error.msg} at column {error.colno})"
        ) from None
    for offset, _, record in records:
        line_no = bisect_right(line_starts, offset)
        yield line_no, *_record_pair(record, f"{path} line {line_no}", source_lang, target_lang)


def _parse_json_lines(
    path: Path, lines: list[str], source_lang: str, target_lang: str
) -> Iterator[tuple[int, str, str]]:
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            yield line_no, "", ""
            continue
        where = f"{path} line {line_no}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise HfEntmaxValueError(f"{where}: invalid JSON ({error.msg} at column {error.colno})") from None
        yield line_no, *_record_pair(record, where, source_lang, target_lang)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def _json_members(text: str, start: int) -> tuple[list[tuple[int, str | None, object]], int]:
    """``(offset, key, value)`` of each element of the JSON array (key None) or object starting at ``text[start]``,
    and the offset after it. Decoding member by member keeps each record's offset, hence its line for messages.

    Raises:
        json.JSONDecodeError: With the position of the first syntax error.
    """
    closing = "]" if text[start] == "[" else "}"
    members = []
    index = JSON_WHITESPACE.match(text, start + 1).end()
    if text.startswith(closing, index):
        return members, index + 1
    while True:
        key = None
        if closing == "}":
            if not text.startswith('"', index):
                raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, index)
            key, index = JSON_DECODER.raw_decode(text, index)
            index = JSON_WHITESPACE.match(text, index).end()
            if not text.startswith(":", index):
                raise json.JSONDecodeError("Expecting ':' delimiter", text, index)
            index = JSON_WHITESPACE.match(text, index + 1).end()
        value, end = JSON_DECODER.raw_decode(text, index)
        members.append((index, key, value))
        index = JSON_WHITESPACE.match(text, end).end()
        if text.startswith(closing, index):
            return members, index + 1
        if not text.startswith(",", index):
            raise json.JSONDecodeError("Expecting ',' delimiter", text, index)
        index = JSON_WHITESPACE.match(text, index + 1).end()


def _is_record(record: dict, where: str, source_lang: str, target_lang: str) -> bool:
    return "translation" in record or _side_columns(list(record), source_lang, target_lang, where) is not None


def _record_pair(record: object, where: str, source_lang: str, target_lang: str) -> tuple[str, str]:
    """The (source, target) of a JSON record: ``{"translation": {lang: ...}}`` or flat ``{lang: ...}``."""
    if isinstance(record, dict) and "translation" in record:
        translation = record["translation"]
        if not isinstance(translation, dict):
            raise HfEntmaxValueError(
                f'{where}: "translation" must map language codes to sentences, got {type(translation).__name__}'
            )
        keys = list(translation)
        found = [_find_name(keys, lang, f'{where}: "translation"', "keys") for lang in (source_lang, target_lang)]
        missing = [lang for lang, index in zip((source_lang, target_lang), found, strict=True) if index is None]
        if missing:
            raise HfEntmaxValueError(
                f'{where}: "translation" has no {" or ".join(map(repr, missing))} key (keys present: '
                f"{', '.join(map(repr, translation)) or 'none'})"
            )
        sides = [(f'"translation"[{keys[index]!r}]', translation[keys[index]]) for index in found]
    else:
        keys = list(record) if isinstance(record, dict) else []
        columns = _side_columns(keys, source_lang, target_lang, where) if isinstance(record, dict) else None
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
    # A null is a missing sentence, skipped like an empty one (as a missing .csv cell or Parquet null).
    return sides[0][1] or "", sides[1][1] or ""


def _read_parquet(path: Path, source_lang: str, target_lang: str) -> Dataset:
    # pyarrow directly: datasets.load_dataset("parquet") would first copy the file into its cache.
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as error:
        raise HfEntmaxValueError(
            f"{path}: not a readable Parquet file ({one_line(error, None, cause=True)})"
        ) from None
    sources, targets = _table_sides(table, str(path), source_lang, target_lang)
    return _build_dataset(sources, targets, str(path), source_lang, target_lang)


def _table_sides(
    table: pa.Table, description: str, source_lang: str, target_lang: str
) -> tuple[pa.ChunkedArray, pa.ChunkedArray]:
    """The source and target string columns of a table: fields of its ``translation`` struct, or flat columns."""
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
        found = [_find_name(fields, lang, where, "fields") for lang in (source_lang, target_lang)]
        missing = [lang for lang, index in zip((source_lang, target_lang), found, strict=True) if index is None]
        if missing:
            raise HfEntmaxValueError(
                f"{description}: column 'translation' has no {' or '.join(map(repr, missing))} field "
                f"(fields: {', '.join(map(repr, fields)) or 'none'})"
            )
        sides = [(f"'translation'.{fields[index]}", pc.struct_field(column, index)) for index in found]
    else:
        columns = _side_columns(names, source_lang, target_lang, description)
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


def _dataset_from_lines(
    pairs: Iterable[tuple[int, str, str]], description: str, source_lang: str, target_lang: str
) -> Dataset:
    """A translation dataset from the ``(line_no, source, target)`` pairs of a text file."""
    line_numbers, sources, targets = [], [], []
    for line_no, source, target in pairs:
        line_numbers.append(line_no)
        sources.append(source)
        targets.append(target)
    return _build_dataset(
        pa.array(sources, pa.string()),
        pa.array(targets, pa.string()),
        description,
        source_lang,
        target_lang,
        line_numbers,
    )


def _build_dataset(
    sources: pa.Array | pa.ChunkedArray,
    targets: pa.Array | pa.ChunkedArray,
    description: str,
    source_lang: str,
    target_lang: str,
    line_numbers: Sequence[int] | None = None,
) -> Dataset:
    """Pair two string columns into a translation dataset, stripped, skipping pairs with an empty or missing side.

    Args:
        sources: One string (or null) per pair, shape ``(num_pairs,)``.
        targets: The same for the target side.
        description: Where the pairs come from, for messages.
        source_lang: Language code of the source side.
        target_lang: Language code of the target side.
        line_numbers: The 1-based line of each pair in a text file; None for a table, whose pairs are rows.
    """
    # Arrow's whitespace is Python's str.isspace set; the work stays in arrow, so a Hub-sized split is not turned
    # into Python objects.
    sources, targets = (pc.utf8_trim_whitespace(pc.fill_null(side, "")) for side in (sources, targets))
    empty = pc.or_(pc.equal(pc.utf8_length(sources), 0), pc.equal(pc.utf8_length(targets), 0))
    num_skipped = pc.sum(empty).as_py() or 0
    noun = "line" if line_numbers is not None else "row"

    def positions(mask: pa.ChunkedArray | pa.Array, total: int) -> str:
        first = pc.indices_nonzero(mask)[:MAX_LISTED_LINES].to_pylist()
        numbers = [line_numbers[index] if line_numbers is not None else index + 1 for index in first]
        return f"{noun if total == 1 else noun + 's'} {listed_lines(numbers, total)}"

    if num_skipped:
        logger.warning(
            f"skipped {num_skipped:,} of {len(empty):,} {noun}s ({num_skipped / len(empty):.1%}) with an empty source "
            f"or target in {description} ({positions(empty, num_skipped)})"
        )
    if num_skipped == len(empty):
        raise HfEntmaxValueError(
            f"{description} contains no sentence pairs"
            + (f" ({num_skipped} {noun}s had an empty source or target)" if num_skipped else f" (no {noun}s at all)")
        )
    # Both sides the same text: one column (or file) read as both, which would train a model to copy.
    same = pc.and_(pc.equal(sources, targets), pc.invert(empty))
    num_same, num_pairs = pc.sum(same).as_py() or 0, len(empty) - num_skipped
    if num_same == num_pairs:
        raise HfEntmaxValueError(
            f"{description}: every pair has the same {source_lang!r} and {target_lang!r} text "
            f"({positions(same, num_same)}): the source and target columns (or files) hold the same sentences"
        )
    if num_same > num_pairs / 2:
        logger.warning(
            f"{num_same:,} of the {num_pairs:,} pairs in {description} have the same {source_lang!r} and "
            f"{target_lang!r} text ({positions(same, num_same)}); check that the source and target columns hold "
            "different languages"
        )
    pairs = pa.table({"source": sources, "target": targets}).filter(pc.invert(empty))
    translation = pa.chunked_array(
        [pa.StructArray.from_arrays(batch.columns, names=[source_lang, target_lang]) for batch in pairs.to_batches()]
    )
    # The Translation feature is the one wmt16/opus use, so Hub and local data go through the same preprocessing.
    features = Features({"translation": Translation(languages=[source_lang, target_lang])})
    return Dataset.from_dict({"translation": translation}, features=features)


def _choose_splits(split_names: list[str], dataset_name: str) -> dict[str, str]:
    """The dataset's split serving as each of ours (train, validation, test, in this order) by name."""
    chosen, ignored = {}, []
    for name in split_names:
        split = SPLIT_ALIASES.get(name.lower())
        if split is None:
            ignored.append(name)
        elif split in chosen:
            raise HfEntmaxValueError(
                f"dataset {dataset_name!r} has splits {chosen[split]!r} and {name!r}, which would both serve as the "
                f"{split} split; keep one"
            )
        else:
            chosen[split] = name
    if not chosen:
        raise HfEntmaxValueError(
            f"dataset {dataset_name!r} has none of the splits train, validation (or valid, dev, val) and test "
            f"(splits: {', '.join(map(repr, split_names)) or 'none'})"
        )
    if ignored:
        logger.warning(
            f"dataset {dataset_name!r}: left out split(s) {', '.join(map(repr, ignored))}, which are none of train, "
            "validation (valid, dev, val) and test"
        )
    return {split: chosen[split] for split in SPLITS if split in chosen}


def _is_saved_dataset(folder: Path) -> bool:
    return (folder / datasets.config.DATASETDICT_JSON_FILENAME).is_file() or (
        folder / datasets.config.DATASET_STATE_JSON_FILENAME
    ).is_file()


def _load_with_datasets(path: str, config_name: str | None, what: str, advice: str) -> DatasetDict:
    try:
        return datasets.load_dataset(path, config_name)
    except Exception as error:  # the datasets library raises many kinds; all mean "could not load"
        raise HfEntmaxValueError(f"could not load {what}: {one_line(error, None, cause=True)}. {advice}") from error
