"""`hf-entmax translate`: line alignment, batching that never changes a translation, length limits, scoring against
references with sacreBLEU, AdaptiveEntmaxMarian and Marian folders (and a Hub id in the local cache), and the
one-line errors of bad input."""

import json
import logging
import shutil

import pytest
import sacrebleu
import torch
from helpers import SENTENCES, eager_to_stop, punctuated_tokenizer, tiny_model
from huggingface_hub import constants
from transformers import MarianConfig, MarianMTModel

from hf_entmax.cli import main
from hf_entmax.commands.translate import (
    join_paragraphs,
    load_translation_model,
    paragraph_inputs,
    scored_lines,
    translate_lines,
)
from hf_entmax.modeling.sentence_ends import count_sentence_ends, sentence_end_token_ids


SOURCES = SENTENCES[0::2]  # German sentences
REFERENCES = SENTENCES[1::2]  # their English translations
# Lengths differ, so sorting by length reorders them, and a batch of 3 pads most of them.
INPUT_LINES = [SOURCES[0], "", SOURCES[1] + " " + SOURCES[2], "   ", SOURCES[3], SOURCES[2], "ein hund", SOURCES[1]]


def tiny_marian(vocab_size: int) -> MarianMTModel:
    config = MarianConfig(
        vocab_size=vocab_size, d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, forced_eos_token_id=1, init_std=0.5,
    )  # fmt: skip
    torch.manual_seed(1)
    model = MarianMTModel(config).eval()
    model.generation_config.max_length = 12
    return model


@pytest.fixture
def adaptive(tokenizer):
    # A random model with a small init repeats one token whatever the input, which would hide a translation put on
    # the wrong line; this seed and init translate the six sentences of INPUT_LINES six ways (checked below).
    model = tiny_model(seed=2, vocab_size=len(tokenizer), init_std=2.0)
    model.generation_config.max_length = 12  # as `hf-entmax train` sets it (a random model never stops by itself)
    return model


@pytest.fixture
def folder(adaptive, tokenizer, tmp_path):
    """An AdaptiveEntmaxMarian folder, and an input file with empty and whitespace-only lines."""
    adaptive.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "input.txt").write_text("\n".join(INPUT_LINES) + "\n", encoding="utf-8")
    return tmp_path


def greedy_one_by_one(model, tokenizer, sentences: list[str], **generate_kwargs) -> list[str]:
    """The reference decoding: each sentence alone, no padding, plain `generate`."""
    translations = []
    for sentence in sentences:
        with torch.inference_mode():
            output_ids = model.generate(**tokenizer(sentence, return_tensors="pt"), num_beams=1, **generate_kwargs)
        translations.append(tokenizer.decode(output_ids[0], skip_special_tokens=True).strip())
    return translations


@pytest.mark.slow
def test_one_line_per_input_line_and_batching_never_changes_a_translation(adaptive, tokenizer):
    expected = greedy_one_by_one(adaptive, tokenizer, [line.strip() for line in INPUT_LINES if line.strip()])
    assert len(set(expected)) == len(expected), (
        "the tiny model must translate sentences differently for this test to mean much"
    )
    for batch_size in (1, 3, 32):
        translations = translate_lines(
            adaptive, tokenizer, INPUT_LINES, num_beams=1, batch_size=batch_size, progress=False
        )
        assert len(translations) == len(INPUT_LINES)
        assert translations[1] == translations[3] == ""  # empty and whitespace-only lines stay empty
        assert [text for line, text in zip(INPUT_LINES, translations, strict=True) if line.strip()] == expected, (
            batch_size
        )


def test_max_new_tokens_limits_the_output_and_the_decoder_positions(adaptive, tokenizer):
    for limit in (1, 3):
        translations = translate_lines(adaptive, tokenizer, SOURCES, max_new_tokens=limit, progress=False)
        # Each generated token decodes to at most one piece, so at most `limit` pieces; `</s>` counts in the limit.
        for sentence, translation in zip(SOURCES, translations, strict=True):
            assert len(tokenizer(translation, add_special_tokens=False)["input_ids"]) <= limit, sentence
        assert translations == greedy_one_by_one(adaptive, tokenizer, SOURCES, max_new_tokens=limit)
    # Without --max_new_tokens, the generation config's limit applies (max_length counts the start token).
    adaptive.generation_config.max_length = 4
    translations = translate_lines(adaptive, tokenizer, SOURCES, progress=False)
    assert translations == greedy_one_by_one(adaptive, tokenizer, SOURCES, max_new_tokens=3)
    assert translations != greedy_one_by_one(adaptive, tokenizer, SOURCES, max_new_tokens=4)
    # With the start token the output needs max_new_tokens + 1 of the model's 64 positions.
    assert len(translate_lines(adaptive, tokenizer, SOURCES[:1], max_new_tokens=63, progress=False)) == 1
    with pytest.raises(ValueError, match=r"`max_new_tokens` 64 .* 64 positions .* at most 63"):
        translate_lines(adaptive, tokenizer, SOURCES, max_new_tokens=64, progress=False)
    with pytest.raises(ValueError, match=r"`batch_size` must be a positive integer, got 0"):
        translate_lines(adaptive, tokenizer, SOURCES, batch_size=0, progress=False)


def test_input_longer_than_the_model_accepts_is_truncated_with_one_warning_listing_the_lines(
    adaptive, tokenizer, caplog
):
    long_line = " ".join(SOURCES * 10)  # far more than the 64 positions of the tiny model
    assert len(tokenizer(long_line)["input_ids"]) > 64
    lines = [SOURCES[0], long_line, "", long_line]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_entmax.commands.translate"):
        translations = translate_lines(adaptive, tokenizer, lines, batch_size=2, progress=False)
    # One warning in all, from no other logger either (transformers warns about long input tokenized whole).
    warnings = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "input longer than the model's limit of 64 tokens was truncated to it on 2 line(s): 2, 4;" in warnings[0]
    # A truncated line translates as its first 64 tokens (63 pieces and </s>) do.
    with torch.inference_mode():
        output_ids = adaptive.generate(**tokenizer(long_line, truncation=True, max_length=64, return_tensors="pt"))
    assert translations[1] == translations[3] == tokenizer.decode(output_ids[0], skip_special_tokens=True).strip()
    assert translations[0] == greedy_one_by_one(adaptive, tokenizer, SOURCES[:1])[0]


def test_command_prints_one_translation_a_line_to_stdout_in_input_order(adaptive, tokenizer, folder, capsys):
    assert main(["translate", "--model", str(folder / "model"), "--input", str(folder / "input.txt")]) == 0
    captured = capsys.readouterr()
    assert captured.out.split("\n")[:-1] == translate_lines(adaptive, tokenizer, INPUT_LINES, progress=False)
    assert captured.out.endswith("\n")
    assert "Translating" in captured.err  # the progress bar is on stderr

    assert (
        main(["translate", "--model", str(folder / "model"), "--input", str(folder / "input.txt"), "--no-progress"])
        == 0
    )
    assert capsys.readouterr().err == ""  # no bar at all, the weights' loading bar included


def test_command_writes_the_output_file_and_scores_against_references_as_sacrebleu_does(folder, capsys):
    references = [
        "a small dog runs",
        "",
        "two cats and a man",
        "",
        "the woman drinks coffee",
        "two cats",
        "a dog",
        "x",
    ]
    (folder / "reference.txt").write_text("\n".join(references) + "\n", encoding="utf-8")
    output = folder / "out" / "translations.txt"
    metrics_file = folder / "scores.json"
    arguments = ["--model", str(folder / "model"), "--input", str(folder / "input.txt"), "--output", str(output)]
    arguments += ["--reference", str(folder / "reference.txt"), "--metrics_file", str(metrics_file), "--no-progress"]
    assert main(["translate", *arguments]) == 0
    printed = capsys.readouterr().out

    translations = output.read_text(encoding="utf-8").split("\n")
    assert translations[-1] == "" and len(translations[:-1]) == len(INPUT_LINES)
    scored = [index for index, line in enumerate(INPUT_LINES) if line.strip()]
    hypotheses = [translations[index] for index in scored]
    bleu = sacrebleu.corpus_bleu(hypotheses, [[references[index] for index in scored]])
    chrf = sacrebleu.corpus_chrf(hypotheses, [[references[index] for index in scored]])

    metrics = json.loads(metrics_file.read_text())
    # corpus_scores rounds to 4 decimals and the printout to 2: the same sacreBLEU numbers, rounded.
    assert metrics["bleu"] == round(bleu.score, 4) and metrics["chrf"] == round(chrf.score, 4)
    assert metrics["lines_scored"] == 6
    assert f"BLEU = {bleu.score:.2f}  nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in printed
    assert f"chrF = {chrf.score:.2f}  nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:" in printed
    assert "(on 6 of 8 lines)" in printed


def test_join_paragraphs_keeps_empty_lines_and_joins_each_run_of_lines():
    assert join_paragraphs(["a", " b ", "", "   ", "c", "d", "e"]) == ["a b", "", "", "c d e"]
    assert join_paragraphs(["a", "b", "", "c"], ["A", "B", "", "C"]) == ["A B", "", "C"]
    assert join_paragraphs([]) == []


def test_paragraphs_are_translated_as_one_input_each_and_scored_as_one(adaptive, tokenizer, folder, capsys):
    # Paragraphs of 1, 2 and 3 lines between empty lines; the reference's lines are joined where the input's are.
    lines = [SOURCES[0], "", SOURCES[1], SOURCES[2], "", "", SOURCES[3], "ein hund", SOURCES[1]]
    references = [REFERENCES[0], "", REFERENCES[1], REFERENCES[2], "", "", REFERENCES[3], "a dog", REFERENCES[1]]
    (folder / "document.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "reference.txt").write_text("\n".join(references) + "\n", encoding="utf-8")
    paragraphs = [SOURCES[0], f"{SOURCES[1]} {SOURCES[2]}", f"{SOURCES[3]} ein hund {SOURCES[1]}"]
    expected = translate_lines(adaptive, tokenizer, paragraphs, progress=False)

    arguments = ["--model", str(folder / "model"), "--input", str(folder / "document.txt"), "--paragraphs"]
    arguments += ["--reference", str(folder / "reference.txt"), "--output", str(folder / "out.txt"), "--no-progress"]
    assert main(["translate", *arguments]) == 0
    assert (folder / "out.txt").read_text(encoding="utf-8").split("\n") == [
        expected[0], "", expected[1], "", "", expected[2], ""
    ]  # fmt: skip
    joined_references = [REFERENCES[0], f"{REFERENCES[1]} {REFERENCES[2]}", f"{REFERENCES[3]} a dog {REFERENCES[1]}"]
    bleu = sacrebleu.corpus_bleu(expected, [joined_references])
    printed = capsys.readouterr().out
    assert "Wrote 6 lines" in printed and f"BLEU = {bleu.score:.2f}  " in printed and "(on 3 of 6 lines)" in printed


def test_paragraph_inputs_group_each_paragraphs_lines_and_keep_empty_lines():
    lines = ["a", " b ", "c", "", "   ", "d", "e"]
    assert paragraph_inputs(lines, 2) == [["a b", "c"], [], [], ["d e"]]
    assert paragraph_inputs(lines, 1) == [["a", "b", "c"], [], [], ["d", "e"]]
    # Groups as long as the paragraphs are the paragraphs, as --paragraphs alone translates them.
    assert paragraph_inputs(lines, 3) == [[line] if line else [] for line in join_paragraphs(lines)]
    assert paragraph_inputs([], 2) == []


def test_a_paragraph_is_translated_lines_per_input_lines_at_a_time_on_its_one_line(
    adaptive, tokenizer, folder, capsys
):
    # A paragraph of 3 lines, 2 at a time: its first two lines are one input, its third another, and their
    # translations share the paragraph's output line; the reference is joined per paragraph as without the option.
    lines = [SOURCES[0], "", SOURCES[3], "ein hund", SOURCES[1]]
    references = [REFERENCES[0], "", REFERENCES[3], "a dog", REFERENCES[1]]
    (folder / "document.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "reference.txt").write_text("\n".join(references) + "\n", encoding="utf-8")
    first, second, third = translate_lines(
        adaptive, tokenizer, [SOURCES[0], f"{SOURCES[3]} ein hund", SOURCES[1]], progress=False
    )
    arguments = ["--model", str(folder / "model"), "--input", str(folder / "document.txt"), "--paragraphs"]
    arguments += ["--lines_per_input", "2", "--reference", str(folder / "reference.txt")]
    arguments += ["--output", str(folder / "out.txt"), "--no-progress"]
    assert main(["translate", *arguments]) == 0
    expected = [first, "", f"{second} {third}"]
    assert (folder / "out.txt").read_text(encoding="utf-8").split("\n") == [*expected, ""]
    joined_references = [REFERENCES[0], f"{REFERENCES[3]} a dog {REFERENCES[1]}"]
    bleu = sacrebleu.corpus_bleu([first, f"{second} {third}"], [joined_references])
    printed = capsys.readouterr().out
    assert "Wrote 3 lines" in printed and f"BLEU = {bleu.score:.2f}  " in printed


def test_match_sentences_lets_no_translation_end_before_it_has_its_inputs_sentence_ends(tmp_path, capsys):
    tokenizer = punctuated_tokenizer()
    assert tokenizer.convert_ids_to_tokens(sentence_end_token_ids(tokenizer).tolist()) == ["."]
    model = eager_to_stop(tokenizer)
    lines = [f"{SOURCES[0]}. {SOURCES[1]}.", f"{SOURCES[2]}!", SOURCES[3], f"{SOURCES[0]}? 3.5 {SOURCES[1]}."]
    assert [count_sentence_ends(line) for line in lines] == [2, 1, 0, 2]
    assert translate_lines(model, tokenizer, lines, progress=False) == ["", "", "", ""]
    expected = ["..", ".", "", ".."]
    for num_beams in (1, 3):
        matched = translate_lines(model, tokenizer, lines, num_beams=num_beams, match_sentences=True, progress=False)
        assert matched == expected
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "input.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    arguments = ["--model", str(tmp_path / "model"), "--input", str(tmp_path / "input.txt"), "--no-progress"]
    assert main(["translate", *arguments, "--match_sentences"]) == 0
    assert capsys.readouterr().out.split("\n") == [*expected, ""]


def test_lines_empty_on_one_side_only_are_not_scored_and_are_named_in_one_warning(caplog):
    sources = ["ein hund", "", "zwei katzen", "eine frau", ""]
    references = ["a dog", "", "", "a woman", "a man"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_entmax.commands.translate"):
        assert scored_lines(sources, references, "in.txt / ref.txt") == [0, 3]
    assert [record.getMessage() for record in caplog.records] == [
        "2 line(s) of in.txt / ref.txt are empty on one side only and are left out: 3, 5"
    ]
    with pytest.raises(ValueError, match=r"in\.txt / ref\.txt: no line has both a sentence and a reference to score"):
        scored_lines(["ein hund", ""], ["", "a dog"], "in.txt / ref.txt")


def test_a_marian_folder_translates_and_so_does_a_hub_id_in_the_local_cache(tokenizer, tmp_path, monkeypatch, capsys):
    marian = tiny_marian(len(tokenizer))
    marian.save_pretrained(tmp_path / "marian")
    tokenizer.save_pretrained(tmp_path / "marian")
    (tmp_path / "input.txt").write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    expected = greedy_one_by_one(marian, tokenizer, SOURCES)

    assert main(["translate", "--model", str(tmp_path / "marian"), "--input", str(tmp_path / "input.txt")]) == 0
    assert capsys.readouterr().out.split("\n")[:-1] == expected

    # The layout of the Hugging Face cache: models--<org>--<name>/refs/main names a snapshot folder.
    cache = tmp_path / "hub-cache"
    repo = cache / "models--someone--tiny-marian"
    commit = "0" * 40
    shutil.copytree(tmp_path / "marian", repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    model, _ = load_translation_model("someone/tiny-marian")
    assert isinstance(model, MarianMTModel)
    assert main(["translate", "--model", "someone/tiny-marian", "--input", str(tmp_path / "input.txt")]) == 0
    assert capsys.readouterr().out.split("\n")[:-1] == expected
    assert main(["translate", "--model", "someone/not-cached", "--input", str(tmp_path / "input.txt")]) == 1
    assert "no Hub model 'someone/not-cached' in the local Hugging Face cache" in capsys.readouterr().err


def one_line_error(capsys, arguments: list[str]) -> str:
    """Run the command, check that it failed with exit code 1 and one line on stderr; return that line."""
    assert main(["translate", *arguments]) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("hf-entmax translate: error: ")
    return lines[0]


def test_bad_input_gives_one_line_errors(folder, tokenizer, capsys):
    model, source = str(folder / "model"), str(folder / "input.txt")
    (folder / "short.txt").write_text("a dog\n")
    error = one_line_error(capsys, ["--model", model, "--input", source, "--reference", str(folder / "short.txt")])
    assert f"--input {source} has 8 lines but --reference {folder / 'short.txt'} has 1" in error
    (folder / "blank.txt").write_text("\n" * len(INPUT_LINES))
    error = one_line_error(capsys, ["--model", model, "--input", source, "--reference", str(folder / "blank.txt")])
    assert "no line has both a sentence and a reference to score" in error
    error = one_line_error(capsys, ["--model", model, "--input", str(folder / "missing.txt")])
    assert "--input" in error and "missing.txt: no such file" in error
    error = one_line_error(capsys, ["--model", model, "--input", source, "--reference", str(folder / "nope.txt")])
    assert "--reference" in error and "nope.txt: no such file" in error
    (folder / "latin1.txt").write_bytes("ein hund\nzwei kätzchen\n".encode("latin-1"))
    error = one_line_error(capsys, ["--model", model, "--input", str(folder / "latin1.txt")])
    assert "latin1.txt line 2: not valid UTF-8" in error
    error = one_line_error(capsys, ["--model", model, "--input", source, "--metrics_file", str(folder / "m.json")])
    assert "--metrics_file needs --reference" in error
    error = one_line_error(capsys, ["--model", model, "--input", source, "--lines_per_input", "2"])
    assert "--lines_per_input needs --paragraphs" in error
    error = one_line_error(capsys, ["--model", model, "--input", source, "--paragraphs", "--lines_per_input", "0"])
    assert "--lines_per_input must be a positive number of lines, got 0" in error
    error = one_line_error(capsys, ["--model", model, "--input", source, "--num_beams", "0"])
    assert "`num_beams` must be a positive integer, got 0" in error
    error = one_line_error(capsys, ["--model", model, "--input", source, "--output", source])
    assert "is the --input file" in error
    error = one_line_error(capsys, ["--model", model, "--input", source, "--device", "tpu"])
    assert "--device 'tpu': expected cpu, cuda or cuda:N" in error
    if not torch.cuda.is_available():
        assert "CUDA is not available here" in one_line_error(
            capsys, ["--model", model, "--input", source, "--device", "cuda"]
        )

    # Folders that are not (translatable) models.
    error = one_line_error(capsys, ["--model", str(folder / "missing-folder"), "--input", source])
    assert "missing-folder: no such folder" in error
    (folder / "empty").mkdir()
    error = one_line_error(capsys, ["--model", str(folder / "empty"), "--input", source])
    assert "no config.json there (not a model folder)" in error
    (folder / "t5").mkdir()
    (folder / "t5" / "config.json").write_text(json.dumps({"model_type": "t5"}))
    error = one_line_error(capsys, ["--model", str(folder / "t5"), "--input", source])
    assert "holds a 't5' model; expected an AdaptiveEntmaxMarian or Marian model" in error
    shutil.copytree(folder / "model", folder / "no-tokenizer", ignore=shutil.ignore_patterns("tokenizer*"))
    error = one_line_error(capsys, ["--model", str(folder / "no-tokenizer"), "--input", source])
    assert "no-tokenizer: could not load its tokenizer" in error
