"""Document-level training data (hf_entmax/training/documents.py): consecutive pairs of one document joined, from
local files (an empty pair ends a document) and from datasets (a column of document ids), through `hf-entmax train`."""

import json
import logging
import re
import shlex
from pathlib import Path

import datasets
import pytest
from helpers import PAIR, QUICK

from hf_entmax.cli import main
from hf_entmax.errors import HfEntmaxValueError
from hf_entmax.training.arguments import DataArguments
from hf_entmax.training.data import load_parallel_data, split_examples


# Three documents of 4, 1 and 3 pairs; an empty line in both files ends a document.
DOCUMENTS = [
    [("a1", "A1"), ("a2", "A2"), ("a3", "A3"), ("a4", "A4")],
    [("b1", "B1")],
    [("c1", "C1"), ("c2", "C2"), ("c3", "C3")],
]


def write_documents(folder, documents=DOCUMENTS, separator=("", "")):
    """The documents as two text files, ``separator`` lines between documents; their paths."""
    lines = []
    for index, document in enumerate(documents):
        if index:
            lines.append(separator)
        lines += document
    paths = folder / "train.en", folder / "train.syn"
    for path, side in zip(paths, zip(*lines, strict=True), strict=True):
        path.write_text("".join(f"{text}\n" for text in side), encoding="utf-8")
    return [str(path) for path in paths]


def document_examples(tmp_path, **options):
    source, target = write_documents(tmp_path)
    data_args = DataArguments(
        train_source_file=source, train_target_file=target, source_lang="en", target_lang="syn", **options
    )
    raw, _, _ = load_parallel_data(data_args)
    return split_examples(raw, "train", data_args)["translation"]


def test_joined_examples_are_consecutive_pairs_of_one_document(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="hf_entmax.training"):
        examples = document_examples(tmp_path, document_context=3, document_context_ratio=1.0)
    pairs = [pair for document in DOCUMENTS for pair in document]
    assert [(example["en"], example["syn"]) for example in examples[: len(pairs)]] == pairs
    joined = [(example["en"], example["syn"]) for example in examples[len(pairs) :]]
    # 8 windows (ratio 1), one per pair, of lengths 2, 3, 2, 3, ... cut at their document's end; those left with
    # one pair (from a4, b1 and c3) are dropped.
    assert joined == [
        ("a1 a2", "A1 A2"),
        ("a2 a3 a4", "A2 A3 A4"),
        ("a3 a4", "A3 A4"),
        ("c1 c2 c3", "C1 C2 C3"),
        ("c2 c3", "C2 C3"),
    ]
    assert "5 joined examples of 2–3 pairs" in caplog.text and "from 3 documents" in caplog.text
    assert "skipped" not in caplog.text  # the empty pairs end documents; they are not skipped pairs


def test_the_default_ratio_joins_one_example_for_every_two_pairs(tmp_path):
    examples = document_examples(tmp_path, document_context=2)
    # 4 windows, at pairs 0, 2, 4 and 6 of 8: a1 a2, a3 a4, b1 (alone in its document: dropped), c2 c3.
    assert [example["en"] for example in examples[8:]] == ["a1 a2", "a3 a4", "c2 c3"]


def test_max_train_samples_limits_the_pairs_before_joining(tmp_path):
    examples = document_examples(tmp_path, document_context=2, document_context_ratio=1.0, max_train_samples=3)
    assert [example["en"] for example in examples] == ["a1", "a2", "a3", "a1 a2", "a2 a3"]


def test_a_one_sided_empty_pair_is_skipped_without_ending_its_document(tmp_path, caplog):
    documents = [[("a1", "A1"), ("a2", ""), ("a3", "A3")]]
    source, target = write_documents(tmp_path, documents)
    data_args = DataArguments(
        train_source_file=source,
        train_target_file=target,
        source_lang="en",
        target_lang="syn",
        document_context=2,
        document_context_ratio=1.0,
    )
    with caplog.at_level(logging.WARNING):
        raw, _, _ = load_parallel_data(data_args)
    assert "skipped 1 of 3 lines (33.3%) with an empty source or target" in caplog.text and "(line 2)" in caplog.text
    examples = split_examples(raw, "train", data_args)["translation"]
    assert [example["en"] for example in examples] == ["a1", "a3", "a1 a3"]


def test_a_corpus_without_documents_of_two_pairs_is_one_line(tmp_path):
    source, target = write_documents(tmp_path, [[("a", "A")], [("b", "B")], [("c", "C")]])
    data_args = DataArguments(
        train_source_file=source, train_target_file=target, source_lang="en", target_lang="syn", document_context=2
    )
    raw, _, _ = load_parallel_data(data_args)
    message = r"no document of two or more pairs to join \(3 documents of 3 pairs\)"
    with pytest.raises(HfEntmaxValueError, match=message):
        split_examples(raw, "train", data_args)


def test_a_ratio_too_small_for_the_pairs_still_joins_one_example(tmp_path):
    examples = document_examples(tmp_path, document_context=2, document_context_ratio=0.01)
    assert [example["en"] for example in examples[8:]] == ["a1 a2"]  # round(8 × 0.01) = 0, at least 1


def test_validation_and_test_stay_sentences(tmp_path):
    source, target = write_documents(tmp_path)
    data_args = DataArguments(
        train_source_file=source,
        train_target_file=target,
        validation_source_file=source,
        validation_target_file=target,
        source_lang="en",
        target_lang="syn",
        document_context=2,
    )
    raw, _, _ = load_parallel_data(data_args)
    assert raw["validation"].column_names == ["translation"]
    assert len(split_examples(raw, "validation", data_args)) == 8


def test_a_table_file_reads_empty_rows_as_document_ends(tmp_path):
    path = tmp_path / "train.jsonl"
    rows = [{"en": "a1", "syn": "A1"}, {"en": "a2", "syn": "A2"}, {"en": "", "syn": ""}, {"en": "b1", "syn": "B1"}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    data_args = DataArguments(
        train_file=str(path), source_lang="en", target_lang="syn", document_context=2, document_context_ratio=1.0
    )
    raw, _, _ = load_parallel_data(data_args)
    assert [example["en"] for example in split_examples(raw, "train", data_args)["translation"]] == [
        "a1",
        "a2",
        "b1",
        "a1 a2",
    ]


def saved_dataset(tmp_path, documents):
    folder = tmp_path / "saved"
    train = datasets.Dataset.from_dict(
        {"en": ["a1", "a2", "b1", "b2"], "syn": ["A1", "A2", "B1", "B2"], "doc_id": documents}
    )
    datasets.DatasetDict({"train": train}).save_to_disk(str(folder))
    return str(folder)


def test_a_dataset_is_grouped_by_its_document_column(tmp_path):
    data_args = DataArguments(
        dataset_name=saved_dataset(tmp_path, ["x", "x", "y", "y"]),
        source_lang="en",
        target_lang="syn",
        document_context=2,
        document_context_ratio=1.0,
        document_column="doc_id",
    )
    raw, _, _ = load_parallel_data(data_args)
    joined = [example["en"] for example in split_examples(raw, "train", data_args)["translation"][4:]]
    assert joined == ["a1 a2", "b1 b2"]  # a2 b1 would cross documents: cut to one pair and dropped


@pytest.mark.parametrize(
    ("documents", "column", "message"),
    [
        (["x", "x", "y", "y"], "document", r"has no column 'document' \(--document_column\); its columns: 'en'"),
        (["x", None, "y", "y"], "doc_id", r"--document_column 'doc_id' has no document id in row 2 \(1 rows"),
    ],
)
def test_a_bad_document_column_is_one_line(tmp_path, documents, column, message):
    data_args = DataArguments(
        dataset_name=saved_dataset(tmp_path, documents),
        source_lang="en",
        target_lang="syn",
        document_context=2,
        document_column=column,
    )
    with pytest.raises(HfEntmaxValueError, match=message):
        load_parallel_data(data_args)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"document_context": 1}, r"--document_context must be a whole number ≥ 2 \(the most pairs joined\), got 1"),
        ({"document_context": 2, "document_context_ratio": 0.0}, r"--document_context_ratio must be in \(0, 1\]"),
        ({"document_context": 2, "document_context_ratio": 1.5}, r"--document_context_ratio must be in \(0, 1\]"),
        ({"document_context": 2, "document_context_ratio": float("nan")}, r"must be in \(0, 1\]"),
        ({"document_context_ratio": 0.5}, "--document_context_ratio applies with --document_context N"),
        ({"document_column": "doc"}, "--document_column applies with --document_context N"),
        ({"document_context": 2, "document_column": "doc"}, "--document_column applies to --dataset_name"),
        ({"document_context": 2, "dataset_name": "wmt16"}, "with --dataset_name 'wmt16' needs --document_column"),
    ],
)
def test_document_options_that_cannot_apply_are_refused(options, message):
    with pytest.raises(HfEntmaxValueError, match=message):
        DataArguments(**options)


def test_the_built_in_synthetic_pair_has_no_documents():
    with pytest.raises(HfEntmaxValueError, match="the built-in synthetic pair has no documents"):
        load_parallel_data(DataArguments(document_context=2))


def test_train_with_document_context_trains_on_the_joined_examples(tmp_path, capsys, caplog):
    source, target = write_documents(tmp_path)
    output = tmp_path / "run"
    argv = ["train", "--train_source_file", source, "--train_target_file", target, *PAIR, *QUICK]
    argv += ["--model_size", "tiny", "--vocab_size", "40", "--document_context", "3", "--output_dir", str(output)]
    with caplog.at_level(logging.INFO, logger="hf_entmax.training"):
        assert main(argv) == 0, capsys.readouterr().err
    assert caplog.text.count("document context: the train split trains on its 8 pairs") == 1  # joined once
    summary = json.loads((output / "training_summary.json").read_text())
    # Ratio 0.5: windows at a1 (a1 a2), a3 (a3 a4, cut at the document's end), b1 (dropped) and c2 (c2 c3).
    assert summary["num_examples"]["train"] == 8 + 3
    assert summary["preprocessing"]["document_context"] == {"max_sentences": 3, "ratio": 0.5, "document_column": None}
    card = (output / "README.md").read_text()
    assert "document-level: 0.5 examples per training pair of 2–3 consecutive pairs of a document joined" in card
    capsys.readouterr()
    assert main([*argv[:-2], "--document_column", "doc", "--output_dir", str(tmp_path / "other")]) == 1
    assert capsys.readouterr().err.strip().endswith("--document_column applies to --dataset_name; in local files "
                                                    "the line order is the document order and an empty pair (an "
                                                    "empty line in both files) ends a document")  # fmt: skip


def recipe_commands() -> list[list[str]]:
    """The `hf-entmax` command lines of docs/translate.md's recipe for documents (continuations joined)."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "translate.md").read_text(encoding="utf-8")
    section = text.split("## Documents and paragraphs", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.DOTALL).group(1)
    return [shlex.split(line)[1:] for line in block.replace("\\\n", " ").splitlines() if line.strip()]


@pytest.mark.slow
def test_the_documented_recipe_for_documents_trains_and_translates_paragraphs(tmp_path, monkeypatch, capsys):
    # Two documents, as the recipe's files hold them (an empty line in both ends a document), with de/en names.
    documents = [[(f"a{i}.", f"A{i}.") for i in range(6)], [(f"b{i}.", f"B{i}.") for i in range(6)]]
    for name, written in zip(("train.de", "train.en"), write_documents(tmp_path, documents), strict=True):
        Path(written).rename(tmp_path / name)
    (tmp_path / "document.de").write_text("a1.\na2.\na3.\na4.\n\nb1.\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    train, translate = recipe_commands()
    assert train[0] == "train" and translate[0] == "translate"
    assert main([*train, *QUICK, "--model_size", "tiny", "--vocab_size", "40"]) == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "my-de-en-doc" / "training_summary.json").read_text())
    assert summary["preprocessing"]["document_context"]["max_sentences"] == 3
    config = json.loads((tmp_path / "my-de-en-doc" / "config.json").read_text())
    assert (config["position_embedding_type"], config["cross_attention_positions"]) == ("rope", "nape")
    assert config["attention_scaling"] == "none"
    assert main([*translate, "--max_new_tokens", "6", "--no-progress"]) == 0, capsys.readouterr().err
    # One line per paragraph, the empty line between them kept.
    lines = (tmp_path / "document.en").read_text(encoding="utf-8").split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""
