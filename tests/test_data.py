"""Local parallel-data loading: every format, every bad-input error, empty-line skipping, split assembly."""

import json
import logging
import re
from pathlib import Path

import pytest
from datasets import Dataset

from hf_entmax.errors import HfEntmaxFileNotFoundError, HfEntmaxValueError
from hf_entmax.training.data import (
    check_language_pair,
    limit_samples,
    load_local_splits,
    read_parallel_file,
    read_text_pair,
)


PAIRS = [
    ("der kleine hund läuft schnell", "the small dog runs fast"),
    ("zwei katzen schlafen im haus", "two cats sleep in the house"),
    ("grüße aus köln, straße", "greetings from cologne, street"),
]
EXPECTED = [{"de": de, "en": en} for de, en in PAIRS]


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


def write_tsv(path: Path, pairs) -> Path:
    return write(path, "".join(f"{source}\t{target}\n" for source, target in pairs))


def write_jsonl(path: Path, records) -> Path:
    return write(path, "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records))


def error_pattern(path: Path, line_no: int, message: str) -> str:
    return re.escape(f"{path} line {line_no}") + ".*" + message


def test_read_tsv(tmp_path):
    dataset = read_parallel_file(write_tsv(tmp_path / "train.tsv", PAIRS), "de", "en")
    assert isinstance(dataset, Dataset)
    assert dataset.column_names == ["translation"]
    assert dataset["translation"] == EXPECTED


def test_read_jsonl_ignores_other_languages(tmp_path):
    records = [{"translation": {"de": de, "en": en, "fr": "ignoré"}, "id": i} for i, (de, en) in enumerate(PAIRS)]
    dataset = read_parallel_file(write_jsonl(tmp_path / "train.jsonl", records), "de", "en")
    assert dataset["translation"] == EXPECTED


def test_read_text_pair(tmp_path):
    source = write(tmp_path / "train.de", "".join(de + "\n" for de, _ in PAIRS))
    target = write(tmp_path / "train.en", "".join(en + "\n" for _, en in PAIRS))
    assert read_text_pair(source, target, "de", "en")["translation"] == EXPECTED
    # Swapping the direction swaps the roles, not the row keys' meaning.
    assert read_text_pair(target, source, "en", "de")["translation"] == EXPECTED


def test_line_endings_bom_and_inner_whitespace(tmp_path):
    path = write(tmp_path / "crlf.tsv", "\ufeffein  hund \tone  dog\r\n  zwei katzen\ttwo cats\r\nlast\tline")
    assert read_parallel_file(path, "de", "en")["translation"] == [
        {"de": "ein  hund", "en": "one  dog"},
        {"de": "zwei katzen", "en": "two cats"},
        {"de": "last", "en": "line"},
    ]


def test_unicode_line_separators_do_not_split_lines(tmp_path):
    # "\u2028" and "\x85" are line breaks to str.splitlines but ordinary characters in a "\n"-separated file.
    path = write_tsv(tmp_path / "odd.tsv", [("a\u2028b", "c\x85d")])
    assert read_parallel_file(path, "de", "en")["translation"] == [{"de": "a\u2028b", "en": "c\x85d"}]


def test_features_match_hub_translation_datasets(tmp_path):
    dataset = read_parallel_file(write_tsv(tmp_path / "train.tsv", PAIRS), "de", "en")
    assert type(dataset.features["translation"]).__name__ == "Translation"
    assert sorted(dataset.features["translation"].languages) == ["de", "en"]


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.tsv"
    with pytest.raises(HfEntmaxFileNotFoundError, match=re.escape(str(missing))):
        read_parallel_file(missing, "de", "en")
    existing = write(tmp_path / "train.de", "hallo\n")
    with pytest.raises(HfEntmaxFileNotFoundError, match=re.escape(str(tmp_path / "train.en"))):
        read_text_pair(existing, tmp_path / "train.en", "de", "en")


def test_unsupported_suffix_lists_formats(tmp_path):
    path = write(tmp_path / "train.csv", "a,b\n")
    with pytest.raises(HfEntmaxValueError, match=r"train\.csv.*'\.csv'.*\.tsv, \.jsonl"):
        read_parallel_file(path, "de", "en")


def test_non_utf8_names_the_line(tmp_path):
    path = tmp_path / "latin1.tsv"
    path.write_bytes("gut\tgood\nschön\tnice\n".encode("latin-1"))
    with pytest.raises(HfEntmaxValueError, match=error_pattern(path, 2, "not valid UTF-8.*0xf6")):
        read_parallel_file(path, "de", "en")
    source = tmp_path / "train.de"
    source.write_bytes("gut\nschön\n".encode("latin-1"))
    target = write(tmp_path / "train.en", "good\nnice\n")
    with pytest.raises(HfEntmaxValueError, match=error_pattern(source, 2, "not valid UTF-8")):
        read_text_pair(source, target, "de", "en")


@pytest.mark.parametrize(("line", "found"), [("nur deutsch", 1), ("a\tb\tc", 3)])
def test_tsv_wrong_column_count(tmp_path, line, found):
    path = write(tmp_path / "train.tsv", f"hallo\thello\n{line}\n")
    with pytest.raises(HfEntmaxValueError, match=error_pattern(path, 2, f"expected 2 .*columns.*found {found}")):
        read_parallel_file(path, "de", "en")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"translation": {"de": "a", "en": "b"', "invalid JSON"),
        ('{"de": "a", "en": "b"}', 'expected an object with a "translation" key.*found keys'),
        ('["a", "b"]', r"found a JSON list"),
        ('{"translation": "a b"}', "must map language codes to sentences, got str"),
        ('{"translation": {"de": "a", "fr": "c"}}', "has no 'en' key \\(keys present: 'de', 'fr'\\)"),
        ('{"translation": {"fr": "c"}}', "has no 'de' or 'en' key \\(keys present: 'fr'\\)"),
        ('{"translation": {"de": "a", "en": 3}}', r"\['en'\] must be a string, got int"),
        ('{"translation": {"de": null, "en": "b"}}', r"\['de'\] must be a string, got NoneType"),
    ],
)
def test_jsonl_errors(tmp_path, line, message):
    path = write(tmp_path / "train.jsonl", '{"translation": {"de": "hallo", "en": "hello"}}\n\n' + line + "\n")
    with pytest.raises(HfEntmaxValueError, match=error_pattern(path, 3, message)):
        read_parallel_file(path, "de", "en")


def test_empty_pairs_skipped_with_one_warning(tmp_path, caplog):
    lines = ["eins\tone", "\t", "zwei\t  ", "", "drei\tthree", "   \tfour", " "]
    path = write(tmp_path / "train.tsv", "\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING, logger="hf_entmax.training.data"):
        dataset = read_parallel_file(path, "de", "en")
    assert dataset["translation"] == [{"de": "eins", "en": "one"}, {"de": "drei", "en": "three"}]
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warnings == [f"skipped 5 lines with an empty source or target in {path} (lines 2, 3, 4, 6, 7)"]


def test_skipped_line_numbers_are_capped(tmp_path, caplog):
    path = write(tmp_path / "train.tsv", "eins\tone\n" + "leer\t\n" * 12)
    with caplog.at_level(logging.WARNING, logger="hf_entmax.training.data"):
        read_parallel_file(path, "de", "en")
    (message,) = [record.getMessage() for record in caplog.records]
    assert message.startswith("skipped 12 lines")
    assert message.endswith("(lines 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, ...)")


def test_text_pair_skips_empty_lines(tmp_path, caplog):
    source = write(tmp_path / "train.de", "eins\n\nzwei\n")
    target = write(tmp_path / "train.en", "one\nlonely\n \n")
    with caplog.at_level(logging.WARNING, logger="hf_entmax.training.data"):
        dataset = read_text_pair(source, target, "de", "en")
    assert dataset["translation"] == [{"de": "eins", "en": "one"}]
    (message,) = [record.getMessage() for record in caplog.records]
    assert "skipped 2 lines" in message and "(lines 2, 3)" in message


def test_jsonl_skips_empty_strings(tmp_path, caplog):
    records = [{"translation": {"de": "", "en": "b"}}, {"translation": {"de": "a", "en": "b"}}]
    with caplog.at_level(logging.WARNING, logger="hf_entmax.training.data"):
        dataset = read_parallel_file(write_jsonl(tmp_path / "train.jsonl", records), "de", "en")
    assert dataset["translation"] == [{"de": "a", "en": "b"}]
    assert "skipped 1 line with an empty source or target" in caplog.text


def test_empty_dataset_is_an_error(tmp_path):
    blank = write(tmp_path / "blank.tsv", "\n\t\n")
    with pytest.raises(HfEntmaxValueError, match=re.escape(str(blank)) + " contains no sentence pairs.*2 lines"):
        read_parallel_file(blank, "de", "en")
    empty = write(tmp_path / "empty.jsonl", "")
    with pytest.raises(HfEntmaxValueError, match=re.escape(str(empty)) + " contains no sentence pairs"):
        read_parallel_file(empty, "de", "en")


def test_text_pair_line_count_mismatch(tmp_path):
    source = write(tmp_path / "train.de", "eins\nzwei\ndrei\n")
    target = write(tmp_path / "train.en", "one\ntwo\n")
    message = re.escape(f"{source} has 3 lines but {target} has 2")
    with pytest.raises(HfEntmaxValueError, match=message):
        read_text_pair(source, target, "de", "en")


@pytest.mark.parametrize(
    ("source_lang", "target_lang", "message"), [("", "en", "--source_lang"), ("de", "de", "differ")]
)
def test_language_pair_validation(tmp_path, source_lang, target_lang, message):
    with pytest.raises(HfEntmaxValueError, match=message):
        check_language_pair(source_lang, target_lang)
    with pytest.raises(HfEntmaxValueError, match=message):
        read_parallel_file(write_tsv(tmp_path / "train.tsv", PAIRS), source_lang, target_lang)


def test_load_local_splits(tmp_path):
    train = write_tsv(tmp_path / "train.tsv", PAIRS)
    validation_source = write(tmp_path / "dev.de", "hallo welt\n")
    validation_target = write(tmp_path / "dev.en", "hello world\n")
    splits = load_local_splits(
        train_file=train,
        validation_source_file=validation_source,
        validation_target_file=validation_target,
        source_lang="de",
        target_lang="en",
    )
    assert list(splits) == ["train", "validation"]
    assert splits["train"]["translation"] == EXPECTED
    assert splits["validation"]["translation"] == [{"de": "hallo welt", "en": "hello world"}]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"test_file": "t.tsv", "test_source_file": "t.de", "test_target_file": "t.en"},
            "either --test_file or --test_source_file with --test_target_file, not both",
        ),
        ({"validation_file": "v.tsv", "validation_target_file": "v.en"}, "either --validation_file"),
        ({"train_source_file": "t.de"}, "--train_source_file was given without --train_target_file"),
        ({"train_target_file": "t.en"}, "--train_target_file was given without --train_source_file"),
        ({}, "no local data files given"),
    ],
)
def test_load_local_splits_argument_errors(tmp_path, arguments, message):
    # The checks run before any file is read, so the named files need not exist.
    with pytest.raises(HfEntmaxValueError, match=message):
        load_local_splits(**arguments, source_lang="de", target_lang="en")


def test_limit_samples(tmp_path):
    dataset = read_parallel_file(write_tsv(tmp_path / "train.tsv", PAIRS), "de", "en")
    assert limit_samples(dataset, 2)["translation"] == EXPECTED[:2]
    assert limit_samples(dataset, 10)["translation"] == EXPECTED
    assert limit_samples(dataset, None) is dataset
    for bad in (0, -1, 1.5, True):
        with pytest.raises(HfEntmaxValueError, match="max_samples must be a positive integer"):
            limit_samples(dataset, bad)
