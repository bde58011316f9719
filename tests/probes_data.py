"""Reliability probes of item 13 (data the tokenizer or the columns would drop); registered on import by
tests/test_reliability.py.

The tokenizer's probes give it what SentencePiece would quietly leave out or fail on: a script with more characters
than the vocabulary holds, lines over its 4,192-byte limit, its reserved character ▅, tabs and zero-width spaces. The
columns' probes give language codes and column names in other cases, two columns or keys for one language, one
column or file read as both sides, and length limits that leave no room for text.
"""

import contextlib
import json
import logging
import random
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from datasets import Dataset
from probing import CLEAR, DOCUMENTED, TRACEBACK, Outcome, api, cli, documented, first_line, probe, run_command
from transformers import AutoTokenizer

from hf_entmax.training.arguments import DataArguments
from hf_entmax.training.data import load_named_dataset, load_parallel_data, read_parallel_file, read_text_pair
from hf_entmax.training.synthetic import generate_pairs
from hf_entmax.training.tokenizer import train_joint_tokenizer


ITEM = 13
HIRAGANA = [chr(code) for code in range(0x3041, 0x3097)]


# --- the probes' data --------------------------------------------------------------------------------------------


def japanese_sentences(num_kanji: int, seed: int = 0) -> list[str]:
    """Japanese-like sentences of 8 kanji, each followed by a hiragana, and a full stop, in which each of
    ``num_kanji`` CJK ideographs (from U+4E00 on) appears twice."""
    rng = random.Random(seed)
    kanji = [chr(0x4E00 + index) for index in range(num_kanji)] * 2
    rng.shuffle(kanji)
    return [
        "".join(character + rng.choice(HIRAGANA) for character in kanji[start : start + 8]) + "。"
        for start in range(0, len(kanji), 8)
    ]


def japanese_english_tsv(bench, num_kanji: int) -> tuple[Path, list[str]]:
    """A ja<TAB>en training file of `japanese_sentences` beside English sentences; returns it and the Japanese."""
    japanese = japanese_sentences(num_kanji)
    english = [source for source, _ in generate_pairs(len(japanese), seed=5)]
    lines = "".join(f"{ja}\t{en}\n" for ja, en in zip(japanese, english, strict=True))
    return bench.write(bench.folder("ja-en") / "train.tsv", lines), japanese


def unknown_share(tokenizer, texts: list[str]) -> float:
    """The share of the characters of ``texts`` (spaces left out) that ``tokenizer`` encodes as <unk>."""
    unknown = total = 0
    for text in texts:
        encoding = tokenizer._tokenizer.encode(text, add_special_tokens=False)
        unknown += sum(
            end - start
            for token, (start, end) in zip(encoding.ids, encoding.offsets, strict=True)
            if token == tokenizer.unk_token_id
        )
        total += len(text) - text.count(" ")
    return unknown / total


@contextlib.contextmanager
def logged_warnings() -> Iterator[list[str]]:
    """The warnings hf_entmax logs inside the block, as messages."""
    messages = []

    class Collect(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    handler = Collect(logging.WARNING)
    logger = logging.getLogger("hf_entmax")
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)


def trained(bench, argv: list[str]) -> tuple[Path | None, Outcome | None]:
    """Run `hf-entmax train`; the output folder, or the outcome of a run that did not finish."""
    output = Path(argv[argv.index("--output_dir") + 1])
    try:
        code, _, stderr = run_command(argv)
    except Exception as error:
        return None, Outcome(TRACEBACK, f"{type(error).__name__}: {first_line(error)}")
    if code != 0:
        return None, Outcome(CLEAR if code == 1 else TRACEBACK, f"exit code {code}: {first_line(stderr)}")
    return output, None


# --- the tokenizer -----------------------------------------------------------------------------------------------


@probe(ITEM)
def probe_train_japanese_with_a_vocabulary_below_its_characters(bench):
    """train --vocab_size 1000 on Japanese–English text of 1,200 kanji: one line naming the --vocab_size needed"""
    data, _ = japanese_english_tsv(bench, 1200)
    argv = bench.train_argv(bench.folder() / "run", "--train_file", str(data), "--source_lang", "ja")
    return cli([*argv, "--target_lang", "en", "--vocab_size", "1000"], "--vocab_size 1000", "give --vocab_size")


@probe(ITEM, DOCUMENTED, slow=True)
def probe_train_japanese_english_covers_the_script(bench):
    """train on Japanese–English text of 300 kanji: trains, and the tokenizer encodes the Japanese side (< 1% <unk>)"""
    data, japanese = japanese_english_tsv(bench, 300)
    argv = bench.train_argv(bench.folder() / "run", "--train_file", str(data), "--source_lang", "ja")
    output, failed = trained(bench, [*argv, "--target_lang", "en", "--vocab_size", "1000"])
    if failed:
        return failed
    share = unknown_share(AutoTokenizer.from_pretrained(output), japanese)
    return documented(share < 0.01, f"{share:.2%} of the Japanese characters are <unk>")


@probe(ITEM, DOCUMENTED, slow=True)
def probe_train_on_source_lines_over_sentencepieces_limit(bench):
    """train on a corpus whose Greek source lines are 6,000 bytes: every line trains the tokenizer (no <unk>)"""
    long_lines = [" ".join(["αβγδε ζηθικ λμνξο πρστυ φχψω"] * 120)] * 3  # 6,359 bytes each
    pairs = [*generate_pairs(48, seed=3), *((line, "lo kazever gunulak") for line in long_lines)]
    data = bench.write(bench.folder("long") / "train.tsv", "".join(f"{s}\t{t}\n" for s, t in pairs))
    output, failed = trained(bench, bench.train_argv(bench.folder() / "run", "--train_file", str(data)))
    if failed:
        return failed
    share = unknown_share(AutoTokenizer.from_pretrained(output), long_lines)
    return documented(share == 0, f"{share:.1%} of the long lines' characters are <unk>")


@probe(ITEM)
def probe_train_vocabulary_below_the_alphabet(bench):
    """train --vocab_size 8 (the smallest allowed) on a Latin corpus of more characters: one line naming the size"""
    return cli(bench.train_argv(bench.folder() / "run", "--vocab_size", "8"), "--vocab_size 8", "give --vocab_size")


@probe(ITEM, DOCUMENTED)
def probe_tokenizer_lines_holding_sentencepieces_reserved_character(bench):
    """train_joint_tokenizer(): lines holding '▅' (SentencePiece's reserved character) still train the vocabulary"""
    texts = ["the small dog runs fast"] * 20 + ["zwei ▅ katzen schlafen"]
    tokenizer = train_joint_tokenizer(texts, vocab_size=60)
    share = unknown_share(tokenizer, ["zwei katzen schlafen"])
    return documented(share == 0, f"{share:.0%} of the characters only those lines hold are <unk>")


@probe(ITEM)
def probe_tokenizer_text_mostly_of_the_reserved_character(bench):
    """train_joint_tokenizer(): text of which 6% is '▅', which no vocabulary can hold: refused naming it"""
    return api(lambda: train_joint_tokenizer(["▅ the small dog"] * 20, vocab_size=60), "U+2585", "--tokenizer_name")


@probe(ITEM, DOCUMENTED)
def probe_tokenizer_tabs_zero_width_spaces_and_wave_dashes(bench):
    """train_joint_tokenizer(): tabs, zero-width spaces and '～' inside sentences are encoded, not <unk>"""
    texts = ["ein\thund läuft", "the\u200bdog runs", "ねこ～いぬ"] * 10
    share = unknown_share(train_joint_tokenizer(texts, vocab_size=60), texts)
    return documented(share == 0, f"{share:.0%} of the characters are <unk>")


# --- language codes and columns ----------------------------------------------------------------------------------


@probe(ITEM)
def probe_train_language_codes_differing_in_case(bench):
    """train --source_lang EN --target_lang en"""
    argv = bench.train_argv(bench.folder() / "run", "--source_lang", "EN", "--target_lang", "en")
    return cli(argv, "--source_lang EN", "--target_lang en")


@probe(ITEM)
def probe_train_text_files_with_codes_differing_in_case(bench):
    """train --train_source_file/--train_target_file --source_lang De --target_lang dE"""
    folder = bench.folder("text")
    source = bench.write(folder / "train.de", "ein hund\n")
    target = bench.write(folder / "train.en", "a dog\n")
    argv = bench.train_argv(bench.folder() / "run", "--source_lang", "De", "--target_lang", "dE")
    argv = [*argv, "--train_source_file", str(source), "--train_target_file", str(target)]
    argv.remove("--train_file")
    argv.remove(bench.train_file)
    return cli(argv, "--source_lang De", "--target_lang dE")


@probe(ITEM, DOCUMENTED)
def probe_builtin_pair_asked_for_in_capitals(bench):
    """load_parallel_data(--source_lang EN --target_lang SYN, no data): the built-in pair, keyed en/syn"""
    splits, source_lang, target_lang = load_parallel_data(
        DataArguments(source_lang="EN", target_lang="SYN", synthetic_train_size=10)
    )
    row = splits["train"][0]["translation"]
    return documented((source_lang, target_lang) == ("en", "syn") and set(row) == {"en", "syn"}, str(row))


@probe(ITEM, DOCUMENTED)
def probe_tsv_header_in_capitals(bench):
    """a .tsv whose header is EN<TAB>DE, read with --source_lang de --target_lang en: the columns by name"""
    path = bench.write(bench.folder() / "train.tsv", "EN\tDE\na dog\tein hund\n")
    rows = read_parallel_file(path, "de", "en")["translation"]
    return documented(rows == [{"de": "ein hund", "en": "a dog"}], str(rows))


@probe(ITEM, DOCUMENTED)
def probe_json_translation_keys_in_capitals(bench):
    """a .jsonl of {"translation": {"DE": …, "EN": …}} read with --source_lang de --target_lang en"""
    record = {"translation": {"EN": "a dog", "DE": "ein hund"}}
    path = bench.write(bench.folder() / "train.jsonl", json.dumps(record) + "\n")
    rows = read_parallel_file(path, "de", "en")["translation"]
    return documented(rows == [{"de": "ein hund", "en": "a dog"}], str(rows))


@probe(ITEM)
def probe_json_translation_with_two_keys_for_one_language(bench):
    """a .jsonl record {"translation": {"de": …, "en": …, "EN": …}}: which English is meant?"""
    record = {"translation": {"de": "ein hund", "en": "a dog", "EN": "one dog"}}
    path = bench.write(bench.folder() / "train.jsonl", json.dumps(record) + "\n")
    return api(lambda: read_parallel_file(path, "de", "en"), f"{path} line 1", "'en', 'EN'")


@probe(ITEM)
def probe_parquet_translation_with_two_fields_for_one_language(bench):
    """a .parquet translation struct with fields de, en and EN"""
    rows = [{"de": "ein hund", "en": "a dog", "EN": "one dog"}]
    path = bench.folder() / "train.parquet"
    pq.write_table(pa.table({"translation": pa.array(rows)}), path)
    return api(lambda: read_parallel_file(path, "de", "en"), str(path), "'en', 'EN'")


@probe(ITEM)
def probe_tsv_header_with_two_columns_for_one_language(bench):
    """a .tsv whose header is de<TAB>en<TAB>EN"""
    path = bench.write(bench.folder() / "train.tsv", "de\ten\tEN\nein hund\ta dog\tone dog\n")
    return api(lambda: read_parallel_file(path, "de", "en"), f"{path} line 1", "'en', 'EN'")


@probe(ITEM)
def probe_csv_source_and_target_beside_a_language_column(bench):
    """a .csv with columns source,target,en read with --source_lang de --target_lang en"""
    path = bench.write(bench.folder() / "train.csv", "source,target,en\nein hund,a dog,one dog\n")
    return api(lambda: read_parallel_file(path, "de", "en"), "'target'", "'en'")


@probe(ITEM, DOCUMENTED)
def probe_saved_dataset_with_columns_in_capitals(bench):
    """--dataset_name: a save_to_disk dataset with columns DE and EN, read with de/en"""
    folder = bench.folder("dataset") / "pairs"
    Dataset.from_dict({"EN": ["a dog"], "DE": ["ein hund"]}).save_to_disk(str(folder))
    rows = load_named_dataset(str(folder), None, "de", "en")["train"]["translation"]
    return documented(rows == [{"de": "ein hund", "en": "a dog"}], str(rows))


@probe(ITEM)
def probe_train_same_file_as_source_and_target(bench):
    """train --train_source_file train.en --train_target_file train.en (one file as both sides)"""
    text = bench.write(bench.folder("text") / "train.en", "a dog\ntwo cats\n")
    argv = bench.train_argv(bench.folder() / "run", "--source_lang", "de", "--target_lang", "en")
    argv = [*argv, "--train_source_file", str(text), "--train_target_file", str(text)]
    argv.remove("--train_file")
    argv.remove(bench.train_file)
    return cli(argv, str(text), "same")


@probe(ITEM)
def probe_csv_with_the_same_text_in_both_columns(bench):
    """a .csv whose de and en columns hold the same sentences"""
    path = bench.write(bench.folder() / "train.csv", "de,en\na dog,a dog\ntwo cats,two cats\n")
    return api(lambda: read_parallel_file(path, "de", "en"), str(path), "same")


@probe(ITEM, DOCUMENTED)
def probe_empty_sides_are_counted(bench):
    """a .tsv with 2 of 6 targets empty: skipped with a warning saying 2 of 6 lines"""
    lines = ["eins\tone", "zwei\t", "drei\tthree", "vier\t ", "fünf\tfive", "sechs\tsix"]
    path = bench.write(bench.folder() / "train.tsv", "\n".join(lines) + "\n")
    with logged_warnings() as warnings:
        rows = read_parallel_file(path, "de", "en")
    ok = len(rows) == 4 and any("skipped 2 of 6 lines" in warning for warning in warnings)
    return documented(ok, f"{len(rows)} rows; warnings: {warnings}")


@probe(ITEM, DOCUMENTED)
def probe_json_null_sentences_count_as_empty(bench):
    """a .jsonl with a null target (as pandas writes a missing value): skipped like an empty one, with the count"""
    records = [{"de": "eins", "en": "one"}, {"de": "zwei", "en": None}, {"de": "drei", "en": "three"}]
    path = bench.write(bench.folder() / "train.jsonl", "".join(json.dumps(record) + "\n" for record in records))
    with logged_warnings() as warnings:
        rows = read_parallel_file(path, "de", "en")
    ok = len(rows) == 2 and any("skipped 1 of 3 lines" in warning for warning in warnings)
    return documented(ok, f"{len(rows)} rows; warnings: {warnings}")


@probe(ITEM)
def probe_text_files_of_different_lengths(bench):
    """read_text_pair(): a source file of 3 lines and a target file of 2"""
    folder = bench.folder("text")
    source = bench.write(folder / "train.de", "eins\nzwei\ndrei\n")
    target = bench.write(folder / "train.en", "one\ntwo\n")
    return api(lambda: read_text_pair(source, target, "de", "en"), str(source), str(target), "3", "2")


# --- length limits -----------------------------------------------------------------------------------------------


@probe(ITEM)
def probe_train_max_source_length_one(bench):
    """train --max_source_length 1 (every source would be only </s>)"""
    return cli(bench.train_argv(bench.folder() / "run", "--max_source_length", "1"), "--max_source_length 1", "2")


@probe(ITEM)
def probe_train_max_target_length_one(bench):
    """train --max_target_length 1"""
    return cli(bench.train_argv(bench.folder() / "run", "--max_target_length", "1"), "--max_target_length 1", "2")


@probe(ITEM)
def probe_train_val_max_target_length_one(bench):
    """train --val_max_target_length 1"""
    argv = bench.train_argv(bench.folder() / "run", "--val_max_target_length", "1")
    return cli(argv, "--val_max_target_length 1", "2")


@probe(ITEM)
def probe_train_generation_max_length_one(bench):
    """train --generation_max_length 1 (generation would stop at the start token)"""
    argv = bench.train_argv(bench.folder() / "run", "--generation_max_length", "1")
    return cli(argv, "--generation_max_length 1", "2")


@probe(ITEM, DOCUMENTED, slow=True)
def probe_train_reports_truncated_sources(bench):
    """train --max_source_length 4: the run says how many sources it cut"""
    with logged_warnings() as warnings:
        code, _, stderr = run_command(bench.train_argv(bench.folder() / "run", "--max_source_length", "4"))
    said = any(warning.startswith("truncation: --max_source_length 4 cuts 48 of the 48") for warning in warnings)
    return documented(code == 0 and said, f"exit code {code}: {first_line(stderr)}; warnings: {warnings}")


@probe(ITEM, slow=True)
def probe_train_source_prefix_filling_the_length(bench):
    """train --source_prefix 'translate English to Synthetic: ' --max_source_length 6"""
    prefix = ["--source_prefix", "translate English to Synthetic: ", "--max_source_length", "6"]
    return cli(bench.train_argv(bench.folder() / "run", *prefix), "--source_prefix", "--max_source_length 6")


@probe(ITEM)
def probe_train_language_code_not_a_code(bench):
    """train --source_lang 'English text' (a column name, not a code for the card): refused before training"""
    rows = [("English text", "syn"), *generate_pairs(48, seed=3)]  # a header naming the columns
    data = bench.write(bench.folder() / "pairs.tsv", "".join(f"{source}\t{target}\n" for source, target in rows))
    argv = bench.train_argv(bench.folder() / "run", "--train_file", str(data), "--source_lang", "English text")
    return cli(argv, "--source_lang", "language code")


@probe(ITEM)
def probe_train_json_record_with_a_lone_surrogate(bench):
    """train --train_file: a JSON Lines record whose sentence is a lone surrogate escape ("\\ud800")"""
    lines = [json.dumps({"en": source, "syn": target}) for source, target in generate_pairs(8, seed=3)]
    lines.insert(3, '{"en": "broken \\ud800 text", "syn": "x"}')
    data = bench.write(bench.folder() / "pairs.jsonl", "\n".join(lines) + "\n")
    return cli(bench.train_argv(bench.folder() / "run", "--train_file", str(data)), "pairs.jsonl", "line 4")
