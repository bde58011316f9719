"""Parallel text from local files, saved datasets and the Hub, as ``datasets`` objects shaped like the Hub's
translation datasets: which inputs the arguments name, the checks across their pairs, the splits, and the limits.

Every reader returns a :class:`datasets.Dataset` with one ``translation`` column whose rows are
``{source_lang: str, target_lang: str}`` (a :class:`datasets.Translation` feature, as in wmt16 or opus), so the
training script preprocesses every input the same way. Supported inputs:

- a ``.tsv``, ``.csv``, ``.json``/``.jsonl`` or ``.parquet`` file, or two plain text files, one sentence per line
  (their layouts are `hf_entmax.training.formats`');
- a folder written by ``Dataset.save_to_disk`` (a ``translation`` column or two flat columns);
- a dataset named by ``--dataset_name``: a Hub id, a folder written by ``DatasetDict.save_to_disk`` (or
  ``Dataset.save_to_disk``, which becomes the train split), or a folder ``datasets.load_dataset`` reads; its splits
  ``train``, ``validation`` (or ``valid``, ``dev``, ``val``) and ``test`` are used.

Columns are found by the language codes as `hf_entmax.training.columns` says. Bad input fails before any training
starts, with one line naming the file, the 1-based line (or row) and what was expected. Pairs with an empty source or
target (missing cells and JSON nulls included) are skipped with one warning per file that says how many of how many;
a file whose every pair has the same text on both sides is an error (the same column or file read twice), one where
more than half do is warned about.
"""

import logging
import os
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets import Dataset, DatasetDict, Features, Translation
from transformers import PreTrainedTokenizerBase

from ..common.hub_ids import is_hub_id
from ..common.text_files import MAX_LISTED_LINES, listed_lines
from ..errors import HfEntmaxFileNotFoundError, HfEntmaxValueError, one_line
from . import synthetic
from .arguments import DataArguments
from .columns import check_language_pair, find_name, language_key, table_sides
from .documents import DOCUMENT, boundary_documents, column_documents, join_documents
from .formats import SUPPORTED_SUFFIXES, Pairs, read_aligned_pairs, read_pairs


logger = logging.getLogger(__name__)

PathLike = str | os.PathLike
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


def read_parallel_file(path: PathLike, source_lang: str, target_lang: str, documents: bool = False) -> Dataset:
    """Read sentence pairs from one file (format by suffix) or a folder written by ``Dataset.save_to_disk``.

    Args:
        path: A ``.tsv``, ``.csv``, ``.json``/``.jsonl`` or ``.parquet`` file, or a saved-dataset folder (see
            `hf_entmax.training.formats` for each layout); columns and keys of other languages are ignored.
        source_lang: Language code of the source side, e.g. ``"de"``.
        target_lang: Language code of the target side, e.g. ``"en"``.
        documents: Read the pairs as documents in order, an empty pair ending each (`hf_entmax.training.documents`).

    Returns:
        A dataset with one ``translation`` column of ``{source_lang: str, target_lang: str}`` rows (and, with
        ``documents``, a ``document`` column of document numbers).

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
        return dataset_to_translation(saved, str(path), source_lang, target_lang, empty_pairs_end_documents=documents)
    pairs = read_pairs(path, source_lang, target_lang)
    return _translation_dataset(pairs, str(path), source_lang, target_lang, empty_pairs_end_documents=documents)


def read_text_pair(
    source_path: PathLike, target_path: PathLike, source_lang: str, target_lang: str, documents: bool = False
) -> Dataset:
    """Read sentence pairs from two plain text files, one sentence per line, line N translating line N.

    Args:
        source_path: The source-language file.
        target_path: The target-language file, with exactly as many lines.
        source_lang: Language code of the source side, used as the row key.
        target_lang: Language code of the target side, used as the row key.
        documents: Read the lines as documents in order, an empty line in both files ending each.

    Returns:
        A dataset with one ``translation`` column of ``{source_lang: str, target_lang: str}`` rows (and, with
        ``documents``, a ``document`` column of document numbers).

    Raises:
        HfEntmaxFileNotFoundError: If either file does not exist.
        HfEntmaxValueError: If a file is not UTF-8, the line counts differ, or no pair is left after skipping
            empty ones.
    """
    check_language_pair(source_lang, target_lang)
    source_path, target_path = Path(source_path), Path(target_path)
    pairs = read_aligned_pairs(source_path, target_path)
    description = f"{source_path} / {target_path}"
    return _translation_dataset(pairs, description, source_lang, target_lang, empty_pairs_end_documents=documents)


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
    train_documents: bool = False,
) -> DatasetDict:
    """Build the splits given as local files, each from one file (or saved-dataset folder) or a source/target pair.

    The argument names are the training command's flags (``--train_file``, ``--train_source_file``, ...);
    ``train_documents`` reads the train split as documents (`read_parallel_file`'s ``documents``).

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
        documents = train_documents and split == "train"
        if file is not None:
            splits[split] = read_parallel_file(file, source_lang, target_lang, documents)
        elif source_file is not None:
            splits[split] = read_text_pair(source_file, target_file, source_lang, target_lang, documents)
    return splits


def load_named_dataset(
    dataset_name: str,
    config_name: str | None,
    source_lang: str,
    target_lang: str,
    train_document_column: str | None = None,
) -> DatasetDict:
    """The splits of ``--dataset_name``: a Hub id, a folder written by ``save_to_disk``, or a dataset folder.

    A folder holding ``dataset_dict.json`` or ``state.json`` is read with ``datasets.load_from_disk`` (a single
    ``Dataset`` becomes the train split); another folder, or a Hub id, with ``datasets.load_dataset``. Splits named
    ``valid``/``dev``/``val`` serve as validation; splits of other names are left out with a warning.

    Returns:
        A ``DatasetDict`` with ``"train"``, ``"validation"`` and/or ``"test"`` entries, each with one ``translation``
        column of ``{source_lang: str, target_lang: str}`` rows; with ``train_document_column``, the train split also
        has a ``document`` column of document numbers from that column's ids.

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
                loaded[name],
                f"dataset {dataset_name!r} split {name!r}",
                source_lang,
                target_lang,
                document_column=train_document_column if split == "train" else None,
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
        if data_args.document_context is not None:
            raise HfEntmaxValueError(
                "--document_context joins consecutive sentences of a document, and the built-in synthetic pair has "
                "no documents (its pairs are independent): give data in document order"
            )
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
            data_args.dataset_name,
            data_args.dataset_config_name,
            data_args.source_lang,
            data_args.target_lang,
            train_document_column=data_args.document_column,
        )
    else:
        raw = load_local_splits(
            **data_args.local_files(),
            source_lang=data_args.source_lang,
            target_lang=data_args.target_lang,
            train_documents=data_args.document_context is not None,
        )
    return raw, data_args.source_lang, data_args.target_lang


def split_examples(raw: DatasetDict, split: str, data_args: DataArguments) -> Dataset:
    """The examples of ``split`` that a run trains or evaluates on: its first ``--max_*_samples`` pairs, and for the
    train split with ``--document_context``, those pairs and their joined neighbours (`join_documents`)."""
    max_samples, _ = data_args.split_limits(split)
    examples = limit_samples(raw[split], max_samples)
    if DOCUMENT not in examples.column_names:
        return examples
    return join_documents(examples, data_args.document_context, data_args.document_context_ratio, f"the {split} split")


def run_examples(raw: DatasetDict, data_args: DataArguments) -> DatasetDict:
    """`split_examples` of every split, picked once: tokenizing and counting truncation both read these rows."""
    return DatasetDict({split: split_examples(raw, split, data_args) for split in raw})


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


def dataset_to_translation(
    dataset: Dataset,
    description: str,
    source_lang: str,
    target_lang: str,
    document_column: str | None = None,
    empty_pairs_end_documents: bool = False,
) -> Dataset:
    """A dataset's pairs as one ``translation`` column, from its ``translation`` column or two flat columns.

    Args:
        dataset: Any dataset with a ``translation`` column of ``{language: sentence}`` records (the Hub's
            translation datasets) or flat columns named by the language codes (or ``source``/``target``).
        description: What the dataset is, for messages (e.g. ``"dataset 'wmt16' split 'train'"``).
        source_lang: Language code of the source side.
        target_lang: Language code of the target side.
        document_column: A column of document ids: also return a ``document`` column of document numbers, one
            document per run of rows with the same id.
        empty_pairs_end_documents: Also return document numbers, an empty pair ending each document.

    Raises:
        HfEntmaxValueError: If the columns are missing or do not hold strings, the document column is missing or
            has a row without an id, or no pair is left after skipping empty ones.
    """
    check_language_pair(source_lang, target_lang)
    # The arrow format hands over the (memory-mapped) table without turning rows into Python objects.
    table = dataset.with_format("arrow")[:]
    sources, targets = table_sides(table, description, source_lang, target_lang)
    documents = None
    if document_column is not None:
        index = find_name(table.column_names, document_column, description, "columns")
        if index is None:
            raise HfEntmaxValueError(
                f"{description} has no column {document_column!r} (--document_column); its columns: "
                f"{', '.join(map(repr, table.column_names))}"
            )
        documents = column_documents(table.column(index), description, document_column)
    pairs = Pairs(sources, targets, None)
    return _translation_dataset(
        pairs, description, source_lang, target_lang, documents, empty_pairs_end_documents=empty_pairs_end_documents
    )


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
    examples: DatasetDict,
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
        examples: The splits' examples (`run_examples`), a ``translation`` column each.
        tokenized: The same examples tokenized with truncation (``input_ids`` and ``labels``).
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
        _, max_target_length = data_args.split_limits(name)
        pairs = examples[name]
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


def _translation_dataset(
    pairs: Pairs,
    description: str,
    source_lang: str,
    target_lang: str,
    documents: np.ndarray | None = None,
    empty_pairs_end_documents: bool = False,
) -> Dataset:
    """The pairs as a translation dataset, stripped, skipping pairs with an empty or missing side.

    Args:
        pairs: The pairs of one input as read, with the line of each in a text file.
        description: Where the pairs come from, for messages.
        source_lang: Language code of the source side.
        target_lang: Language code of the target side.
        documents: The document number of each pair, kept as a ``document`` column of the pairs kept.
        empty_pairs_end_documents: Number the documents here instead, a pair with both sides empty ending each (such
            pairs are document boundaries, not skipped pairs).

    Raises:
        HfEntmaxValueError: If no pair is left, or every pair has the same text on both sides.
    """
    line_numbers = pairs.line_numbers
    # Arrow's whitespace is Python's str.isspace set; the work stays in arrow, so a Hub-sized split is not turned
    # into Python objects.
    sources, targets = (pc.utf8_trim_whitespace(pc.fill_null(side, "")) for side in (pairs.sources, pairs.targets))
    empty = pc.or_(pc.equal(pc.utf8_length(sources), 0), pc.equal(pc.utf8_length(targets), 0))
    skipped = empty
    if empty_pairs_end_documents:
        both_empty = pc.and_(pc.equal(pc.utf8_length(sources), 0), pc.equal(pc.utf8_length(targets), 0))
        documents = boundary_documents(both_empty)
        skipped = pc.and_(empty, pc.invert(both_empty))
    num_skipped = pc.sum(skipped).as_py() or 0
    noun = "line" if line_numbers is not None else "row"

    def positions(mask: pa.ChunkedArray | pa.Array, total: int) -> str:
        first = pc.indices_nonzero(mask)[:MAX_LISTED_LINES].to_pylist()
        numbers = [line_numbers[index] if line_numbers is not None else index + 1 for index in first]
        return f"{noun if total == 1 else noun + 's'} {listed_lines(numbers, total)}"

    if num_skipped:
        logger.warning(
            f"skipped {num_skipped:,} of {len(empty):,} {noun}s ({num_skipped / len(empty):.1%}) with an empty source "
            f"or target in {description} ({positions(skipped, num_skipped)})"
        )
    num_pairs = len(empty) - (pc.sum(empty).as_py() or 0)
    if num_pairs == 0:
        raise HfEntmaxValueError(
            f"{description} contains no sentence pairs"
            + (f" ({len(empty)} {noun}s had an empty source or target)" if len(empty) else f" (no {noun}s at all)")
        )
    # Both sides the same text: one column (or file) read as both, which would train a model to copy.
    same = pc.and_(pc.equal(sources, targets), pc.invert(empty))
    num_same = pc.sum(same).as_py() or 0
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
    if documents is None:
        return Dataset.from_dict({"translation": translation}, features=features)
    kept_documents = pa.array(documents[np.asarray(pc.invert(empty))])
    features[DOCUMENT] = datasets.Value("int64")
    return Dataset.from_dict({"translation": translation, DOCUMENT: kept_documents}, features=features)


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
