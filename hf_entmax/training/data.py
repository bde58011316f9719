"""Parallel text from local files, as ``datasets`` objects shaped like the Hub's translation datasets.

Every reader returns a :class:`datasets.Dataset` with one ``translation`` column whose rows are
``{source_lang: str, target_lang: str}`` (a :class:`datasets.Translation` feature, as in wmt16 or opus), so the
training script preprocesses local files and Hub datasets the same way. Supported inputs:

- ``.tsv``: one pair per line, ``source<TAB>target``, no header;
- ``.jsonl``: one ``{"translation": {"<source_lang>": "...", "<target_lang>": "..."}}`` object per line;
- two plain text files, one sentence per line, line N of the source translating line N of the target.

Bad input fails before any training starts, with an error naming the file, the 1-based line and what was expected.
Pairs with an empty source or target are skipped with one warning per file.
"""

import json
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import datasets
from datasets import Dataset, DatasetDict, Features, Translation

from ..errors import HfEntmaxFileNotFoundError, HfEntmaxValueError
from . import synthetic
from .arguments import DataArguments


logger = logging.getLogger(__name__)

PathLike = str | os.PathLike
SUPPORTED_SUFFIXES = (".tsv", ".jsonl")
SPLITS = ("train", "validation", "test")
# How many skipped line numbers the warning lists before it abbreviates.
MAX_LISTED_LINES = 10


def check_language_pair(source_lang: str, target_lang: str) -> None:
    """Check that the language codes can serve as the two keys of a translation row.

    Raises:
        HfEntmaxValueError: If a code is not a non-empty string or both codes are the same.
    """
    for flag, lang in (("--source_lang", source_lang), ("--target_lang", target_lang)):
        if not isinstance(lang, str) or not lang.strip():
            raise HfEntmaxValueError(f"{flag} must be a non-empty language code such as 'de' or 'en', got {lang!r}")
    if source_lang == target_lang:
        raise HfEntmaxValueError(f"--source_lang and --target_lang must differ, both are {source_lang!r}")


def read_parallel_file(path: PathLike, source_lang: str, target_lang: str) -> Dataset:
    """Read sentence pairs from a ``.tsv`` or ``.jsonl`` file, chosen by the file's suffix.

    Args:
        path: A ``.tsv`` file (``source<TAB>target`` per line, no header) or a ``.jsonl`` file (one
            ``{"translation": {source_lang: ..., target_lang: ...}}`` per line; other language keys are ignored).
        source_lang: Language code of the source side, e.g. ``"de"``.
        target_lang: Language code of the target side, e.g. ``"en"``.

    Returns:
        A dataset with one ``translation`` column of ``{source_lang: str, target_lang: str}`` rows.

    Raises:
        HfEntmaxFileNotFoundError: If the file does not exist.
        HfEntmaxValueError: If the suffix is not supported, a line is malformed, or no pair is left after
            skipping empty ones.
    """
    check_language_pair(source_lang, target_lang)
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".tsv":
        pairs = _parse_tsv(path)
    elif suffix == ".jsonl":
        pairs = _parse_jsonl(path, source_lang, target_lang)
    else:
        raise HfEntmaxValueError(
            f"{path}: unsupported file format {path.suffix or '(no suffix)'!r}; supported are "
            f"{', '.join(SUPPORTED_SUFFIXES)} (for two plain text files, one sentence per line, use a "
            "source/target file pair instead)"
        )
    return _build_dataset(pairs, str(path), source_lang, target_lang)


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
    # Both files are read whole before pairing: a count mismatch is only known at the end, and zipping two
    # streams would silently pair misaligned lines up to that point.
    sources = [line for _, line in iter_lines(source_path)]
    targets = [line for _, line in iter_lines(target_path)]
    if len(sources) != len(targets):
        raise HfEntmaxValueError(
            f"{source_path} has {len(sources)} lines but {target_path} has {len(targets)}; "
            "line N of the source file must translate line N of the target file"
        )
    pairs = (
        (line_no, source, target)
        for line_no, (source, target) in enumerate(zip(sources, targets, strict=True), start=1)
    )
    return _build_dataset(pairs, f"{source_path} / {target_path}", source_lang, target_lang)


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
    """Build the splits given as local files, each from one ``.tsv``/``.jsonl`` file or a source/target pair.

    The argument names are the training command's flags (``--train_file``, ``--train_source_file``, ...).

    Returns:
        A ``DatasetDict`` with a ``"train"``, ``"validation"`` and/or ``"test"`` entry for each split given.

    Raises:
        HfEntmaxValueError: If no split is given, a split is given both as one file and as a pair, or only one
            file of a pair is given; any error of :func:`read_parallel_file` and :func:`read_text_pair`.
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

    splits = DatasetDict()
    for split, (file, source_file, target_file) in given.items():
        if file is not None:
            splits[split] = read_parallel_file(file, source_lang, target_lang)
        elif source_file is not None:
            splits[split] = read_text_pair(source_file, target_file, source_lang, target_lang)
    return splits


def load_parallel_data(data_args: DataArguments) -> tuple[DatasetDict, str, str]:
    """The raw splits (a ``translation`` column each) and the (source, target) language codes."""
    if data_args.uses_synthetic_data():
        source_lang = data_args.source_lang or synthetic.SOURCE_LANG
        target_lang = data_args.target_lang or synthetic.TARGET_LANG
        if (source_lang, target_lang) != (synthetic.SOURCE_LANG, synthetic.TARGET_LANG):
            raise HfEntmaxValueError(
                f"without data arguments the built-in synthetic pair is used, which translates "
                f"{synthetic.SOURCE_LANG} -> {synthetic.TARGET_LANG}; got --source_lang {source_lang} "
                f"--target_lang {target_lang}. Give --train_file (or a dataset) to train another pair"
            )
        return synthetic.synthetic_splits(num_train=data_args.synthetic_train_size), source_lang, target_lang

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
        try:
            raw = datasets.load_dataset(data_args.dataset_name, data_args.dataset_config_name)
        except Exception as error:  # the datasets library raises many kinds; all mean "could not load"
            raise HfEntmaxValueError(
                f"could not load --dataset_name {data_args.dataset_name!r} "
                f"(config {data_args.dataset_config_name!r}): {' '.join(str(error).split())}. "
                "Offline, use local files instead"
            ) from error
        for split_name, split in raw.items():
            if "translation" not in split.column_names:
                raise HfEntmaxValueError(
                    f"dataset {data_args.dataset_name!r} split {split_name!r} has no 'translation' column "
                    f"(columns: {', '.join(split.column_names)})"
                )
    else:
        raw = load_local_splits(
            **data_args.local_files(), source_lang=data_args.source_lang, target_lang=data_args.target_lang
        )
    return raw, data_args.source_lang, data_args.target_lang


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


def iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line_no, text)`` for each line, 1-based, without its line ending; the one decoder of every format."""
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


def _parse_tsv(path: Path) -> Iterator[tuple[int, str, str]]:
    for line_no, line in iter_lines(path):
        if not line.strip():
            # A blank line (often a trailing one) is an empty pair, skipped like any other.
            yield line_no, "", ""
            continue
        columns = line.split("\t")
        if len(columns) != 2:
            raise HfEntmaxValueError(
                f"{path} line {line_no}: expected 2 tab-separated columns (source, target), found {len(columns)}"
            )
        yield line_no, columns[0], columns[1]


def _parse_jsonl(path: Path, source_lang: str, target_lang: str) -> Iterator[tuple[int, str, str]]:
    for line_no, line in iter_lines(path):
        if not line.strip():
            yield line_no, "", ""
            continue
        where = f"{path} line {line_no}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise HfEntmaxValueError(f"{where}: invalid JSON ({error.msg} at column {error.colno})") from None
        if not isinstance(record, dict) or "translation" not in record:
            found = f"keys {sorted(record)}" if isinstance(record, dict) else f"a JSON {type(record).__name__}"
            raise HfEntmaxValueError(
                f'{where}: expected an object with a "translation" key, like '
                f'{{"translation": {{"{source_lang}": "...", "{target_lang}": "..."}}}}; found {found}'
            )
        translation = record["translation"]
        if not isinstance(translation, dict):
            raise HfEntmaxValueError(
                f'{where}: "translation" must map language codes to sentences, got {type(translation).__name__}'
            )
        missing = [lang for lang in (source_lang, target_lang) if lang not in translation]
        if missing:
            raise HfEntmaxValueError(
                f'{where}: "translation" has no {" or ".join(map(repr, missing))} key (keys present: '
                f"{', '.join(map(repr, translation)) or 'none'})"
            )
        for lang in (source_lang, target_lang):
            if not isinstance(translation[lang], str):
                raise HfEntmaxValueError(
                    f'{where}: "translation"[{lang!r}] must be a string, got {type(translation[lang]).__name__}'
                )
        yield line_no, translation[source_lang], translation[target_lang]


def _build_dataset(
    pairs: Iterable[tuple[int, str, str]], description: str, source_lang: str, target_lang: str
) -> Dataset:
    """Turn ``(line_no, source, target)`` pairs into a translation dataset, skipping pairs with an empty side."""
    rows, skipped = [], []
    for line_no, source, target in pairs:
        source, target = source.strip(), target.strip()
        if not source or not target:
            skipped.append(line_no)
            continue
        rows.append({source_lang: source, target_lang: target})
    if skipped:
        listed = ", ".join(map(str, skipped[:MAX_LISTED_LINES])) + (", ..." if len(skipped) > MAX_LISTED_LINES else "")
        noun = "line" if len(skipped) == 1 else "lines"
        logger.warning(
            f"skipped {len(skipped)} {noun} with an empty source or target in {description} ({noun} {listed})"
        )
    if not rows:
        raise HfEntmaxValueError(
            f"{description} contains no sentence pairs"
            + (f" ({len(skipped)} lines had an empty source or target)" if skipped else " (no lines at all)")
        )
    # The Translation feature is the one wmt16/opus use, so Hub and local data go through the same preprocessing.
    features = Features({"translation": Translation(languages=[source_lang, target_lang])})
    return Dataset.from_dict({"translation": rows}, features=features)
