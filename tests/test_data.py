"""Parallel-data loading: every format, every bad-input error, empty-line skipping, split assembly, datasets."""

import csv
import json
import logging
import re
from pathlib import Path

import datasets
import pandas
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Dataset, DatasetDict, Features, Translation
from transformers import Seq2SeqTrainingArguments

from hf_entmax.errors import HfEntmaxFileNotFoundError, HfEntmaxValueError
from hf_entmax.training.arguments import DataArguments
from hf_entmax.training.columns import check_language_pair
from hf_entmax.training.data import (
    limit_samples,
    load_local_splits,
    load_parallel_data,
    read_parallel_file,
    read_text_pair,
    report_truncation,
    run_examples,
)
from hf_entmax.training.run import tokenize_splits
from hf_entmax.training.synthetic import synthetic_splits
from hf_entmax.training.tokenizer import train_joint_tokenizer


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
    path = write(tmp_path / "train.xlsx", "a,b\n")
    with pytest.raises(HfEntmaxValueError, match=r"train\.xlsx.*'\.xlsx'.*\.tsv, \.csv, \.json, \.jsonl, \.parquet"):
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
        (
            '{"de": "a", "english": "b"}',
            'expected an object with a "translation" key or keys "de" and "en".*found keys',
        ),
        ('["a", "b"]', r"found a JSON list"),
        ('{"translation": "a b"}', "must map language codes to sentences, got str"),
        ('{"translation": {"de": "a", "fr": "c"}}', "has no 'en' key \\(keys present: 'de', 'fr'\\)"),
        ('{"translation": {"fr": "c"}}', "has no 'de' or 'en' key \\(keys present: 'fr'\\)"),
        ('{"translation": {"de": "a", "en": 3}}', r"\['en'\] must be a string, got int"),
        ('{"translation": {"de": "a", "en": "b", "EN": "c"}}', r"2 keys name 'en' \('en', 'EN'\); keep one"),
        ('{"source": "a", "target": "b", "EN": "c"}', "columns 'target' and 'EN' could both hold the 'en' side"),
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
    assert warnings == [f"skipped 5 of 7 lines (71.4%) with an empty source or target in {path} (lines 2, 3, 4, 6, 7)"]


def test_skipped_line_numbers_are_capped(tmp_path, caplog):
    path = write(tmp_path / "train.tsv", "eins\tone\n" + "leer\t\n" * 12)
    with caplog.at_level(logging.WARNING, logger="hf_entmax.training.data"):
        read_parallel_file(path, "de", "en")
    (message,) = [record.getMessage() for record in caplog.records]
    assert message.startswith("skipped 12 of 13 lines (92.3%)")
    assert message.endswith("(lines 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, ...)")


def test_text_pair_skips_empty_lines(tmp_path, caplog):
    source = write(tmp_path / "train.de", "eins\n\nzwei\n")
    target = write(tmp_path / "train.en", "one\nlonely\n \n")
    with caplog.at_level(logging.WARNING, logger="hf_entmax.training.data"):
        dataset = read_text_pair(source, target, "de", "en")
    assert dataset["translation"] == [{"de": "eins", "en": "one"}]
    (message,) = [record.getMessage() for record in caplog.records]
    assert "skipped 2 of 3 lines" in message and "(lines 2, 3)" in message


def test_jsonl_skips_empty_strings_and_nulls(tmp_path, caplog):
    records = [{"translation": {"de": "", "en": "b"}}, {"translation": {"de": "a", "en": "b"}}]
    records.append({"de": None, "en": "c"})  # pandas' to_json writes a missing value as null
    with caplog.at_level(logging.WARNING, logger="hf_entmax.training.data"):
        dataset = read_parallel_file(write_jsonl(tmp_path / "train.jsonl", records), "de", "en")
    assert dataset["translation"] == [{"de": "a", "en": "b"}]
    assert "skipped 2 of 3 lines (66.7%) with an empty source or target" in caplog.text


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
    ("source_lang", "target_lang", "message"),
    [("", "en", "--source_lang"), ("de", "de", "both are 'de'"), ("EN", "en ", "codes are compared ignoring case")],
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


def warnings_of(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]


def dataset_args(name, **overrides) -> DataArguments:
    return DataArguments(dataset_name=str(name), source_lang="de", target_lang="en", **overrides)


# JSON: JSON lines as transformers' run_translation.py reads them, flat records, documents.


def test_read_json_lines_of_run_translation(tmp_path):
    # run_translation.py's --train_file: a .json file of JSON lines with a translation dict each.
    records = [{"translation": {"en": en, "de": de}} for de, en in PAIRS]
    assert read_parallel_file(write_jsonl(tmp_path / "train.json", records), "de", "en")["translation"] == EXPECTED


def test_read_json_flat_records(tmp_path):
    records = [{"id": i, "en": en, "DE": de} for i, (de, en) in enumerate(PAIRS)]
    assert read_parallel_file(write_jsonl(tmp_path / "train.jsonl", records), "de", "en")["translation"] == EXPECTED
    records = [{"source": de, "target": en} for de, en in PAIRS]
    assert read_parallel_file(write_jsonl(tmp_path / "train.json", records), "de", "en")["translation"] == EXPECTED


@pytest.mark.parametrize(
    "document",
    [
        [{"translation": {"de": de, "en": en}} for de, en in PAIRS],
        {"version": "1.0", "data": [{"de": de, "en": en} for de, en in PAIRS]},
    ],
    ids=["array", "object-with-a-list"],
)
@pytest.mark.parametrize("indent", [None, 2], ids=["one-line", "pretty"])
def test_read_json_document(tmp_path, document, indent):
    path = write(tmp_path / "train.json", json.dumps(document, indent=indent, ensure_ascii=False) + "\n")
    assert read_parallel_file(path, "de", "en")["translation"] == EXPECTED


@pytest.mark.parametrize(
    ("text", "line_no", "message"),
    [
        # The third record, on line 4 of the pretty-printed array, lacks its target.
        ('[\n  {"de": "a", "en": "b"},\n\n  {"de": "c",\n   "fr": "d"}\n]\n', 4, r"found keys \['de', 'fr'\]"),
        ('[\n  {"de": "a", "en": "b"}\n  {"de": "c", "en": "d"}\n]\n', 3, "invalid JSON \\(Expecting ',' delimiter"),
        ('{\n  "data": [\n    {"de": "a", "en": 7}\n  ]\n}\n', 3, "key 'en' must be a string, got int"),
        ('[\n  {"de": "a", "en": "b"}\n]\n[]\n', 4, "invalid JSON \\(Extra data"),
        # A broken first JSON line is reported there, not where a document parser would stumble.
        ('{"translation": {"de": "a", "en": "b"}\n{"translation": {"de": "c", "en": "d"}}\n', 1, "invalid JSON"),
    ],
    ids=["record", "syntax", "value-type", "extra-data", "broken-first-line"],
)
def test_json_document_errors_name_the_line(tmp_path, text, line_no, message):
    path = write(tmp_path / "train.json", text)
    with pytest.raises(HfEntmaxValueError, match=error_pattern(path, line_no, message)):
        read_parallel_file(path, "de", "en")


def test_json_object_with_several_lists_is_an_error(tmp_path):
    path = write(tmp_path / "train.json", json.dumps({"train": [{"de": "a", "en": "b"}], "test": []}, indent=1))
    with pytest.raises(HfEntmaxValueError, match=r"several lists \('train', 'test'\)"):
        read_parallel_file(path, "de", "en")


# CSV and TSV: headers, quoting, line numbers.


def write_csv(path: Path, rows) -> Path:
    with path.open("w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows(rows)
    return path


@pytest.mark.parametrize(
    "header",
    [None, ["de", "en"], ["EN", "de"], ["source", "target"], ["id", "en", "de"]],
    ids=["none", "codes", "reversed-codes", "source-target", "extra-column"],
)
def test_read_csv_with_and_without_header(tmp_path, header):
    # PAIRS[2] holds a comma, so the csv writer quotes it.
    rows = [[de, en] for de, en in PAIRS]
    if header is not None:
        # The cell of each named column; source/target stand for de/en.
        cell_of = {"de": 0, "en": 1, "source": 0, "target": 1}
        rows = [header] + [
            [cell[cell_of[name.lower()]] if name != "id" else str(i) for name in header] for i, cell in enumerate(rows)
        ]
    assert read_parallel_file(write_csv(tmp_path / "train.csv", rows), "de", "en")["translation"] == EXPECTED


def test_read_tsv_with_header_in_reversed_order(tmp_path):
    path = write_tsv(tmp_path / "train.tsv", [("en", "de")] + [(en, de) for de, en in PAIRS])
    assert read_parallel_file(path, "de", "en")["translation"] == EXPECTED
    path = write_tsv(tmp_path / "src_tgt.tsv", [("src", "tgt"), *PAIRS])
    assert read_parallel_file(path, "de", "en")["translation"] == EXPECTED


def test_csv_quoted_fields_and_the_line_numbers_after_them(tmp_path):
    text = (
        "de,en\n"
        '"Hallo, Welt","Hello,\nworld"\n'  # lines 2-3: one record
        '"Er sagte ""ja""\tlaut",He said "yes"\n'  # line 4: doubled quotes, a tab; quotes inside an unquoted field
    )
    path = write(tmp_path / "train.csv", text)
    assert read_parallel_file(path, "de", "en")["translation"] == [
        {"de": "Hallo, Welt", "en": "Hello,\nworld"},
        {"de": 'Er sagte "ja"\tlaut', "en": 'He said "yes"'},
    ]
    path = write(tmp_path / "bad.csv", text + "eins,one,1\n")
    with pytest.raises(
        HfEntmaxValueError,
        match=error_pattern(path, 5, "expected 2 comma-separated columns as in the header on line 1, found 3"),
    ):
        read_parallel_file(path, "de", "en")
    path = write(tmp_path / "no_header.csv", '"a\nb",c\n\n"d",e,f\n')
    with pytest.raises(
        HfEntmaxValueError,
        match=error_pattern(path, 4, r"expected 2 comma-separated columns \(source, target\), found 3"),
    ):
        read_parallel_file(path, "de", "en")


@pytest.mark.parametrize(
    ("text", "line_no"),
    [
        ('de,en\na,b\n"nie geschlossen,x\nc,d\n', 3),  # the quote opened on line 3 swallows the rest of the file
        ('de,en\na,b\n"Ja", sagte er.,"Yes," he said.\n', 3),  # text after a closing quote
    ],
    ids=["unclosed", "text-after-quote"],
)
def test_malformed_csv_names_the_line(tmp_path, text, line_no):
    path = write(tmp_path / "train.csv", text)
    with pytest.raises(HfEntmaxValueError, match=error_pattern(path, line_no, "malformed CSV")):
        read_parallel_file(path, "de", "en")


def test_csv_missing_values_count_as_empty(tmp_path, caplog):
    # pandas (and so datasets' to_csv) writes a missing value as an empty cell.
    path = tmp_path / "train.csv"
    pandas.DataFrame({"de": ["eins", None, "drei"], "en": ["one", "two", float("nan")]}).to_csv(path, index=False)
    with caplog.at_level(logging.WARNING, logger="hf_entmax.training.data"):
        dataset = read_parallel_file(path, "de", "en")
    assert dataset["translation"] == [{"de": "eins", "en": "one"}]
    expected = f"skipped 2 of 3 lines (66.7%) with an empty source or target in {path} (lines 3, 4)"
    assert warnings_of(caplog) == [expected]


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("fr,en", "the header names the languages 'fr', 'en', but --source_lang de --target_lang en"),
        ("de,fr", "'de', 'fr'"),
    ],
)
def test_header_naming_other_languages_is_an_error(tmp_path, header, message):
    path = write(tmp_path / "train.csv", f"{header}\nBonjour,Hello\n")
    with pytest.raises(HfEntmaxValueError, match=error_pattern(path, 1, message)):
        read_parallel_file(path, "de", "en")


def test_unnamed_header_is_read_as_a_pair_with_a_warning(tmp_path, caplog):
    path = write_tsv(tmp_path / "train.tsv", [("German text", "English text"), *PAIRS])
    with caplog.at_level(logging.WARNING, logger="hf_entmax.training.formats"):
        dataset = read_parallel_file(path, "de", "en")
    assert dataset["translation"] == [{"de": "German text", "en": "English text"}, *EXPECTED]
    (message,) = warnings_of(caplog)
    assert message.startswith(f"{path} line 1 ('German text', 'English text') looks like a header")
    assert message.endswith("name its columns de<TAB>en")


def test_word_list_is_not_mistaken_for_a_header(tmp_path, caplog):
    # Rows of single words throughout: the first is a pair like the others, not a header.
    path = write_tsv(tmp_path / "words.tsv", [("Hund", "dog"), ("Katze", "cat"), ("Haus", "house")])
    with caplog.at_level(logging.WARNING, logger="hf_entmax.training.formats"):
        dataset = read_parallel_file(path, "de", "en")
    assert len(dataset) == 3
    assert warnings_of(caplog) == []


def test_tsv_reads_quotes_as_text_and_warns_about_csv_quoting(tmp_path, caplog):
    # Sentences opening with a quote are common in MT corpora; in a .tsv they are text, not CSV quoting.
    path = write_tsv(tmp_path / "plain.tsv", [('"Ja", sagte er.', '"Yes," he said.')])
    with caplog.at_level(logging.WARNING, logger="hf_entmax.training.formats"):
        assert read_parallel_file(path, "de", "en")["translation"] == [
            {"de": '"Ja", sagte er.', "en": '"Yes," he said.'}
        ]
    assert warnings_of(caplog) == []
    # A CSV writer's quoting (pandas to_csv(sep="\t")) stays in the text, so the reader says so.
    path = write_tsv(tmp_path / "quoted.tsv", [PAIRS[0], ('"""Ja"", sagte er."', '"""Yes,"" he said."')])
    with caplog.at_level(logging.WARNING, logger="hf_entmax.training.formats"):
        read_parallel_file(path, "de", "en")
    (message,) = warnings_of(caplog)
    assert message.startswith(f"{path}: 1 line(s) have CSV-quoted fields (lines 2)")


def test_language_codes_match_keys_and_fields_in_any_case(tmp_path):
    records = [{"translation": {"DE": de, "En": en}} for de, en in PAIRS]
    assert read_parallel_file(write_jsonl(tmp_path / "train.jsonl", records), "de", "en")["translation"] == EXPECTED
    path = tmp_path / "train.parquet"
    pq.write_table(pa.table({"translation": [{"EN": en, "DE": de} for de, en in PAIRS]}), path)
    # The rows are keyed by the codes as given, whatever the file's case.
    assert read_parallel_file(path, "De", "eN")["translation"] == [{"De": de, "eN": en} for de, en in PAIRS]


def test_one_column_read_as_both_sides_is_refused_and_mostly_copies_warned(tmp_path, caplog):
    copies = write(tmp_path / "copies.csv", "de,en\nein hund,ein hund\nzwei,zwei\n")
    with pytest.raises(HfEntmaxValueError, match=re.escape(f"{copies}: every pair has the same 'de' and 'en' text")):
        read_parallel_file(copies, "de", "en")
    mostly = write_tsv(tmp_path / "mostly.tsv", [("Paris", "Paris"), ("Berlin", "Berlin"), PAIRS[0]])
    with caplog.at_level(logging.WARNING, logger="hf_entmax.training.data"):
        assert len(read_parallel_file(mostly, "de", "en")) == 3
    assert warnings_of(caplog) == [
        f"2 of the 3 pairs in {mostly} have the same 'de' and 'en' text (lines 1, 2); check that the source and "
        "target columns hold different languages"
    ]


def test_builtin_pair_is_keyed_by_its_own_codes():
    splits, source_lang, target_lang = load_parallel_data(
        DataArguments(source_lang="EN", target_lang="Syn", synthetic_train_size=4)
    )
    assert (source_lang, target_lang) == ("en", "syn")
    assert set(splits["train"][0]["translation"]) == {"en", "syn"}


# Truncation by the length limits.


@pytest.fixture(scope="module")
def synthetic_data():
    splits = synthetic_splits(num_train=40, num_validation=6, num_test=6)
    texts = [text for pair in splits["train"]["translation"] for text in pair.values()]
    return splits, train_joint_tokenizer(texts, vocab_size=200)


def tokenized_splits(splits, tokenizer, data_args, tmp_path):
    """The examples a run picks from the splits, and those examples as it tokenizes them."""
    training_args = Seq2SeqTrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    examples = run_examples(splits, data_args)
    return examples, tokenize_splits(examples, tokenizer, data_args, "en", "syn", training_args)


@pytest.mark.parametrize("pad_to_max_length", [False, True])
def test_truncation_is_counted_and_reported_per_split(synthetic_data, tmp_path, caplog, pad_to_max_length):
    splits, tokenizer = synthetic_data
    data_args = DataArguments(
        max_source_length=6,
        max_target_length=400,
        val_max_target_length=5,
        max_eval_samples=4,
        pad_to_max_length=pad_to_max_length,
    )
    data_args.resolve_lengths(None)
    source_lengths = [len(tokenizer(pair["en"])["input_ids"]) for pair in splits["train"]["translation"]]
    examples, tokenized = tokenized_splits(splits, tokenizer, data_args, tmp_path)
    with caplog.at_level(logging.WARNING, logger="hf_entmax.training.data"):
        counts = report_truncation(examples, tokenized, tokenizer, data_args, "en", "syn")
    cut = sum(length > 6 for length in source_lengths)
    assert counts["train"] == {"examples": 40, "truncated_sources": cut, "truncated_targets": 0}
    assert counts["validation"]["examples"] == 4 and counts["validation"]["truncated_targets"] > 0
    train_message = caplog.messages[0]
    assert train_message.startswith(f"truncation: --max_source_length 6 cuts {cut} of the 40 train sources")
    assert f"the longest has {max(source_lengths)} tokens" in train_message
    assert "--max_target_length" not in train_message
    assert "--val_max_target_length 5 cuts" in caplog.messages[1]


def test_source_prefix_filling_the_source_length_is_refused(synthetic_data, tmp_path):
    splits, tokenizer = synthetic_data
    data_args = DataArguments(max_source_length=4, source_prefix="translate English to Synthetic: ")
    data_args.resolve_lengths(None)
    examples, tokenized = tokenized_splits(splits, tokenizer, data_args, tmp_path)
    with pytest.raises(HfEntmaxValueError, match=r"--source_prefix .* give --max_source_length \d+ or more"):
        report_truncation(examples, tokenized, tokenizer, data_args, "en", "syn")


@pytest.mark.parametrize("flag", ["max_source_length", "max_target_length", "val_max_target_length"])
def test_length_limits_leave_room_for_text(flag):
    with pytest.raises(HfEntmaxValueError, match=f"--{flag} 1 leaves no room for text: .* give at least 2"):
        DataArguments(**{flag: 1})
    assert getattr(DataArguments(**{flag: 2}), flag) == 2


# Parquet.


def test_read_parquet_translation_column(tmp_path):
    features = Features({"translation": Translation(languages=["de", "en"])})
    path = tmp_path / "train.parquet"
    Dataset.from_dict({"translation": EXPECTED}, features=features).to_parquet(str(path))
    dataset = read_parallel_file(path, "de", "en")
    assert dataset["translation"] == EXPECTED
    assert dataset.features == features


def test_read_parquet_flat_columns_with_missing_values(tmp_path, caplog):
    table = pa.table(
        {
            "en": [en for _, en in PAIRS] + ["lonely", None],
            "de": [de for de, _ in PAIRS] + [None, "  "],
            "score": [1.0] * 5,
        }
    )
    path = tmp_path / "train.parquet"
    pq.write_table(table, path)
    with caplog.at_level(logging.WARNING, logger="hf_entmax.training.data"):
        assert read_parallel_file(path, "de", "en")["translation"] == EXPECTED
    assert warnings_of(caplog) == [f"skipped 2 of 5 rows (40.0%) with an empty source or target in {path} (rows 4, 5)"]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            pa.table({"german": ["a"], "english": ["b"]}),
            r"expected a 'translation' column or columns named 'de' and 'en' .*found columns 'german', 'english'",
        ),
        (pa.table({"de": ["a"], "en": [3]}), "column 'en' holds int64 values, expected strings"),
        (
            pa.table({"translation": [{"de": "a", "fr": "b"}]}),
            r"column 'translation' has no 'en' field \(fields: 'de', 'fr'\)",
        ),
        (pa.table({"translation": ["a"]}), "column 'translation' holds string values"),
    ],
    ids=["no-columns", "not-strings", "no-field", "not-records"],
)
def test_parquet_errors_name_the_file_and_columns(tmp_path, table, message):
    path = tmp_path / "train.parquet"
    pq.write_table(table, path)
    with pytest.raises(HfEntmaxValueError, match=re.escape(str(path)) + ": " + message):
        read_parallel_file(path, "de", "en")


def test_file_that_is_not_parquet(tmp_path):
    path = write(tmp_path / "train.parquet", "de\ten\n")
    with pytest.raises(HfEntmaxValueError, match=re.escape(str(path)) + ": not a readable Parquet file"):
        read_parallel_file(path, "de", "en")


# Saved datasets and dataset folders.


def test_save_to_disk_folder_as_a_file_argument(tmp_path):
    folder = tmp_path / "train_split"
    Dataset.from_dict({"de": [de for de, _ in PAIRS], "en": [en for _, en in PAIRS]}).save_to_disk(str(folder))
    splits = load_local_splits(train_file=folder, source_lang="de", target_lang="en")
    assert splits["train"]["translation"] == EXPECTED
    assert type(splits["train"].features["translation"]).__name__ == "Translation"


def test_dataset_dict_folder_given_as_a_file_says_what_to_give(tmp_path):
    folder = tmp_path / "saved"
    DatasetDict({"train": Dataset.from_dict({"de": ["a"], "en": ["b"]})}).save_to_disk(str(folder))
    with pytest.raises(HfEntmaxValueError, match=re.escape(f"{folder} holds a DatasetDict") + ".*--dataset_name"):
        read_parallel_file(folder, "de", "en")
    assert read_parallel_file(folder / "train", "de", "en")["translation"] == [{"de": "a", "en": "b"}]


def test_folder_that_is_not_a_dataset(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "notes"
    folder.mkdir()
    write(folder / "readme.md", "no data here\n")
    with pytest.raises(
        HfEntmaxValueError, match=re.escape(f"{folder} is a folder but not a dataset written by save_to_disk")
    ):
        read_parallel_file(folder, "de", "en")
    with pytest.raises(HfEntmaxValueError, match=re.escape(f"could not load the dataset folder {folder}")) as error:
        load_parallel_data(dataset_args(folder))
    assert "\n" not in str(error.value)


def test_dataset_name_save_to_disk_folder_maps_split_names(tmp_path, caplog):
    def split(pairs):
        return Dataset.from_dict({"translation": [{"de": de, "en": en} for de, en in pairs]})

    folder = tmp_path / "saved"
    DatasetDict(
        {"test": split(PAIRS[2:]), "dev": split(PAIRS[1:2]), "train": split(PAIRS), "extra": split(PAIRS)}
    ).save_to_disk(str(folder))
    with caplog.at_level(logging.WARNING, logger="hf_entmax.training.data"):
        raw, source_lang, target_lang = load_parallel_data(dataset_args(folder))
    assert (source_lang, target_lang) == ("de", "en")
    assert list(raw) == ["train", "validation", "test"]
    assert raw["train"]["translation"] == EXPECTED
    assert raw["validation"]["translation"] == EXPECTED[1:2]
    assert raw["test"]["translation"] == EXPECTED[2:]
    (message,) = warnings_of(caplog)
    assert message == f"dataset {str(folder)!r}: left out split(s) 'extra', which are none of train, " + (
        "validation (valid, dev, val) and test"
    )


def test_dataset_name_saved_dataset_is_the_train_split(tmp_path):
    folder = tmp_path / "saved"
    Dataset.from_dict({"src": [de for de, _ in PAIRS], "tgt": [en for _, en in PAIRS]}).save_to_disk(str(folder))
    raw, _, _ = load_parallel_data(dataset_args(folder))
    assert list(raw) == ["train"]
    assert raw["train"]["translation"] == EXPECTED


def test_dataset_name_local_data_folder(tmp_path, monkeypatch):
    # datasets.load_dataset reads the folder (and caches what it built, here under tmp_path).
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "my_dataset"
    folder.mkdir()
    write_jsonl(folder / "train.jsonl", [{"de": de, "en": en} for de, en in PAIRS])
    write_jsonl(folder / "dev.jsonl", [{"de": "hallo", "en": "hello"}])
    raw, _, _ = load_parallel_data(dataset_args(folder))
    assert list(raw) == ["train", "validation"]
    assert raw["train"]["translation"] == EXPECTED
    assert raw["validation"]["translation"] == [{"de": "hallo", "en": "hello"}]
    assert raw["train"].features == Features({"translation": Translation(languages=["de", "en"])})


def test_dataset_name_columns_error(tmp_path):
    folder = tmp_path / "saved"
    DatasetDict({"train": Dataset.from_dict({"text": ["a"], "label": ["b"]})}).save_to_disk(str(folder))
    message = (
        re.escape(f"dataset {str(folder)!r} split 'train': expected a 'translation' column")
        + ".*found columns 'text', 'label'"
    )
    with pytest.raises(HfEntmaxValueError, match=message):
        load_parallel_data(dataset_args(folder))


@pytest.mark.parametrize(
    ("splits", "message"),
    [
        (
            ["train", "valid", "validation"],
            "splits 'valid' and 'validation', which would both serve as the validation split",
        ),
        (["training", "eval"], "none of the splits train, validation .* \\(splits: 'training', 'eval'\\)"),
    ],
)
def test_dataset_name_split_errors(tmp_path, splits, message):
    folder = tmp_path / "saved"
    DatasetDict({name: Dataset.from_dict({"de": ["a"], "en": ["b"]}) for name in splits}).save_to_disk(str(folder))
    with pytest.raises(HfEntmaxValueError, match=message):
        load_parallel_data(dataset_args(folder))


def test_dataset_name_argument_errors(tmp_path):
    folder = tmp_path / "saved"
    Dataset.from_dict({"de": ["a"], "en": ["b"]}).save_to_disk(str(folder))
    with pytest.raises(HfEntmaxValueError, match="--dataset_config_name 'de-en' does not apply to"):
        load_parallel_data(dataset_args(folder, dataset_config_name="de-en"))
    with pytest.raises(HfEntmaxFileNotFoundError, match="no such folder"):
        load_parallel_data(dataset_args(tmp_path / "missing"))
    path = write_tsv(tmp_path / "train.tsv", PAIRS)
    with pytest.raises(HfEntmaxValueError, match="is a file, not a dataset: give it as --train_file"):
        load_parallel_data(dataset_args(path))
    arguments = DataArguments(train_file=str(path), dataset_config_name="de-en", source_lang="de", target_lang="en")
    with pytest.raises(HfEntmaxValueError, match="--dataset_config_name needs --dataset_name"):
        load_parallel_data(arguments)
