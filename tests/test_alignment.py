"""Word alignments from cross-attention: words, links, the gold-free head choice, AER, markup transfer, the command."""

import math
from collections import Counter

import pytest
import torch
from helpers import tiny_marian, tiny_model

from hf_entmax.alignment import (
    WordAttention,
    align_pairs,
    alignment_scores,
    choose_heads,
    format_links,
    parse_links,
    parse_markup,
    transfer_markup,
    word_cross_attention,
)
from hf_entmax.alignment.heads import mutual_information
from hf_entmax.alignment.links import links_from_weights
from hf_entmax.alignment.markup import TAG
from hf_entmax.analysis.statistics import word_ids
from hf_entmax.cli import main
from hf_entmax.errors import HfEntmaxValueError


SOURCES = ["der kleine hund läuft schnell", "zwei katzen schlafen im haus", "ein mann liest ein buch"]
TARGETS = ["the small dog runs fast", "two cats sleep in the house", "a man reads a book"]


def test_cross_attention_summed_to_words_matches_the_pieces_of_each_word(tokenizer):
    """Against an independent grouping: the whole line tokenized at once, pieces grouped by SentencePiece's "▁"."""
    model = tiny_model(vocab_size=len(tokenizer), init_std=0.5)
    attentions = list(word_cross_attention(model, tokenizer, SOURCES, TARGETS, batch_size=2))
    special = set(tokenizer.all_special_tokens)
    for source, target, attention in zip(SOURCES, TARGETS, attentions, strict=True):
        inputs = tokenizer(source, text_target=target, return_tensors="pt")
        labels = inputs["labels"][0]
        decoder_input_ids = torch.cat([torch.tensor([0]), labels[:-1]])[None]
        outputs = model(
            input_ids=inputs["input_ids"],
            decoder_input_ids=decoder_input_ids,
            output_attentions=True,
            use_cache=False,
        )
        pieces = torch.stack(outputs.cross_attentions)[:, 0]  # (layers, heads, T, S)
        source_words = torch.tensor(word_ids(tokenizer.convert_ids_to_tokens(inputs["input_ids"][0]), special))
        target_words = torch.tensor(word_ids(tokenizer.convert_ids_to_tokens(labels), special))
        assert attention.source_words == source.split() and attention.target_words == target.split()
        assert attention.weights.shape == (2, 2, 4, len(target.split()), len(source.split()) + 1)
        for step in range(2):
            for j in range(len(target.split())):
                rows = pieces[:, :, (target_words == j).nonzero()[:, 0] + step]  # the word's pieces, this step
                expected = torch.stack(
                    [rows[..., source_words == i].sum(-1) for i in range(len(source.split()))]
                    + [rows[..., source_words == -1].sum(-1)],
                    dim=-1,
                ).mean(-2)
                torch.testing.assert_close(attention.weights[step, :, :, j], expected)
        torch.testing.assert_close(attention.weights.sum(-1), torch.ones(attention.weights.shape[:-1]))


def test_words_past_the_position_table_are_cut_and_reported(tokenizer):
    model = tiny_model(vocab_size=len(tokenizer), max_position_embeddings=8)
    long = " ".join(["hund"] * 12)
    (attention,) = word_cross_attention(model, tokenizer, [long], ["dog"])
    assert attention.truncated and 0 < len(attention.source_words) < 12
    assert not next(word_cross_attention(model, tokenizer, ["hund"], ["dog"])).truncated


def test_links_are_the_most_attended_word_or_those_above_a_threshold():
    weights = torch.tensor(
        [
            [0.7, 0.3, 0.0, 0.0],  # target word 0: source 0 first, 1 in the support
            [0.0, 0.0, 0.0, 1.0],  # target word 1: everything on the end-of-sentence token: no link
            [0.0, 0.2, 0.8, 0.0],
            [0.0, 0.0, 0.0, 0.0],  # target word 3 had no pieces: no attention, no link
        ]
    )
    assert links_from_weights(weights, None) == [(0, 0), (2, 2)]
    assert links_from_weights(weights, 0.0) == [(0, 0), (1, 0), (1, 2), (2, 2)]
    assert links_from_weights(weights, 0.25) == [(0, 0), (1, 0), (2, 2)]


def test_pharaoh_lines_parse_sure_and_possible_links_and_name_a_bad_field():
    sure, possible = parse_links("0-0 1?2 3p1 2-1", "gold.txt, line 4")
    assert sure == {(0, 0), (2, 1)} and possible == {(0, 0), (2, 1), (1, 2), (3, 1)}
    assert format_links(sorted(sure)) == "0-0 2-1"
    with pytest.raises(HfEntmaxValueError, match=r"gold.txt, line 4: '1:2' is not an alignment link; expected i-j"):
        parse_links("0-0 1:2", "gold.txt, line 4")


def test_alignment_error_rate_follows_och_and_ney():
    sure = [{(0, 0), (1, 1)}, {(0, 1)}]
    possible = [{(0, 0), (1, 1), (2, 1)}, {(0, 1), (1, 1)}]
    # Sentence 1: all 3 predicted links possible, both sure found. Sentence 2: 1 of 2 possible, the sure one missed.
    predicted = [[(0, 0), (1, 1), (2, 1)], [(1, 1), (1, 0)]]
    scores = alignment_scores(predicted, sure, possible)
    assert scores.precision == pytest.approx(4 / 5)
    assert scores.recall == pytest.approx(2 / 3)
    assert scores.aer == pytest.approx(1 - (2 + 4) / (5 + 3))
    assert alignment_scores([[(0, 0)]], [{(0, 0)}]).aer == 0.0
    assert alignment_scores([[(0, 1)]], [{(0, 0)}]).aer == 1.0
    with pytest.raises(HfEntmaxValueError, match="1 predicted alignments for 2 gold ones"):
        alignment_scores([[]], sure)


def test_mutual_information_is_zero_for_independent_words_and_log_k_for_a_dictionary():
    assert mutual_information(Counter({(x, y): 1 for x in "ab" for y in "cd"})) == pytest.approx(0.0)
    assert mutual_information(Counter({("a", "x"): 5, ("b", "y"): 5, ("c", "z"): 5})) == pytest.approx(math.log(3))


def fake_attention(source: list[str], target: list[str], focus: dict, steps: int = 2) -> WordAttention:
    """A pair whose heads attend as ``focus`` says: ``{(step, layer, head): target word -> source index}``; other
    heads attend to the end-of-sentence token."""
    weights = torch.zeros(steps, 2, 2, len(target), len(source) + 1)
    weights[..., -1] = 1.0
    for (step, layer, head), pick in focus.items():
        weights[step, layer, head] = 0.0
        for j in range(len(target)):
            weights[step, layer, head, j, pick(j)] = 1.0
    return WordAttention(source, target, weights, truncated=False)


def test_the_head_choice_finds_the_head_that_attends_along_a_dictionary():
    """Head 1:0 at the predicting step follows a word-for-word dictionary under reordering; head 0:1 attends by
    position (the same relative place whatever the words); the others rest on the end-of-sentence token."""
    generator = torch.Generator().manual_seed(0)
    dictionary = {f"s{i}": f"t{i}" for i in range(12)}
    attentions = []
    for _ in range(40):
        source = [f"s{i}" for i in torch.randperm(12, generator=generator)[:5].tolist()]
        order = torch.randperm(5, generator=generator).tolist()  # the target's word order
        target = [dictionary[source[i]] for i in order]
        attentions.append(
            fake_attention(source, target, {(0, 1, 0): lambda j, order=order: order[j], (0, 0, 1): lambda j: j})
        )
    choice = choose_heads(attentions)
    assert choice.query_step == "predicting" and choice.heads == [(1, 0)]
    assert choice.score == pytest.approx(math.log(12), abs=0.1)
    assert choice.scores[0, 1, 0] > choice.scores[0, 0, 1] > choice.scores[1].max()
    given = choose_heads(attentions, heads=[(0, 1)])
    assert given.heads == [(0, 1)] and given.query_step == "predicting"


def test_align_pairs_gives_one_alignment_per_pair_within_the_words(tokenizer):
    model = tiny_model(vocab_size=len(tokenizer), init_std=0.5)
    alignments = align_pairs(model, tokenizer, SOURCES, TARGETS, threshold=0.0)
    assert len(alignments.links) == len(SOURCES)
    for source, target, links in zip(SOURCES, TARGETS, alignments.links, strict=True):
        assert links and all(i < len(source.split()) and j < len(target.split()) for i, j in links)
    assert len(alignments.choice.heads) >= 1 and alignments.choice.num_pairs == len(SOURCES)
    with pytest.raises(HfEntmaxValueError, match="head 2:0 does not exist: the model's cross-attention has layers"):
        align_pairs(model, tokenizer, SOURCES, TARGETS, heads=[(2, 0)])
    with pytest.raises(HfEntmaxValueError, match=r"threshold must be a share of attention in \[0, 1\), got 1.5"):
        align_pairs(model, tokenizer, SOURCES, TARGETS, threshold=1.5)
    with pytest.raises(HfEntmaxValueError, match="3 source sentences for 2 targets"):
        align_pairs(model, tokenizer, SOURCES, TARGETS[:2])


def tags_in(text: str) -> list[str]:
    return [match[0] for match in TAG.finditer(text)]


def is_well_formed(text: str) -> bool:
    """Every closing tag closes the innermost open tag of its name, and none stays open (lone tags aside)."""
    stack = []
    for tag in tags_in(text):
        name = tag.strip("<>{}/").split()[0]
        if tag.startswith(("</", "{/")):
            if not stack or stack.pop() != name:
                return False
        elif not tag.endswith("/>") and tag.replace("{", "{/") in text:
            stack.append(name)
    return not stack


@pytest.mark.parametrize(
    ("source", "translation", "links", "expected"),
    [
        # A pair around two words that the translation merges: the tags enclose the aligned word.
        (
            "the <b>red ball</b> rolls",
            "ball-red lo rolak",
            [(0, 1), (1, 0), (2, 0), (3, 2)],
            "<b>ball-red</b> lo rolak",
        ),
        # Placeholders, paired and lone, with the source's spacing kept.
        (
            "press {1}here{/1} to {2} go",
            "hier drücken zum gehen",
            [(0, 1), (1, 0), (2, 2), (3, 3)],
            "{1}hier{/1} drücken zum {2} gehen",
        ),
        # Nested tags stay nested; a tag with attributes is kept as written.
        (
            '<i>the <a href="x y">big</a> dog</i>',
            "der große hund",
            [(0, 0), (1, 1), (2, 2)],
            '<i>der <a href="x y">große</a> hund</i>',
        ),
        # Two tags closing at once, the outer one over a word more: the translation's words keep their spaces.
        (
            "<i>the <b>red ball</b></i> rolls",
            "ball-red lo rolak",
            [(0, 1), (1, 0), (2, 0), (3, 2)],
            "<i><b>ball-red</b> lo</i> rolak",
        ),
        # Spans that would cross in the translation: the first (of two equal ones) is widened to hold the other.
        ("<b>a b</b> <i>c d</i>", "w x y z", [(0, 0), (1, 2), (2, 1), (3, 3)], "<b>w <i>x y z</i></b>"),
        # An unaligned word: its pair is kept, empty, before the next aligned word; a lone tag glued after a word
        # follows that word's translation.
        ("see <b>this</b> now<br/>", "jetzt sehen", [(0, 1), (2, 0)], "<b></b> jetzt<br/> sehen"),
        # Nothing aligned at all: every tag still comes out, at the end.
        ("{1}a{/1} b", "x y", [], "x y {1}{/1}"),
    ],
)
def test_markup_is_carried_into_the_translation_through_the_alignment(source, translation, links, expected):
    result = transfer_markup(parse_markup(source, "x"), translation, links)
    assert result == expected
    # Every tag once, well-formed, and the translation's words unchanged, in order.
    assert Counter(tags_in(result)) == Counter(tags_in(source))
    assert is_well_formed(result)
    assert parse_markup(result, "x").text == translation


def test_markup_parsing_names_what_is_wrong():
    marked = parse_markup("a <b>big</b> {1} dog", "x")
    assert marked.text == "a big dog"
    with pytest.raises(HfEntmaxValueError, match=r"src.txt, line 2: </b> closes a tag that was not opened"):
        parse_markup("a big</b> dog", "src.txt, line 2")
    with pytest.raises(HfEntmaxValueError, match=r"src.txt, line 3: <b> is never closed"):
        parse_markup("a <b>big dog", "src.txt, line 3")


@pytest.fixture
def folders(tokenizer, tmp_path):
    """A tiny AdaptiveEntmaxMarian and a tiny Marian folder, and line-aligned files."""
    model = tiny_model(vocab_size=len(tokenizer), init_std=0.5)
    model.save_pretrained(tmp_path / "adaptive")
    tokenizer.save_pretrained(tmp_path / "adaptive")
    marian = tiny_marian(len(tokenizer))
    marian.save_pretrained(tmp_path / "marian")
    tokenizer.save_pretrained(tmp_path / "marian")
    (tmp_path / "src.txt").write_text("\n".join([SOURCES[0], "", *SOURCES[1:]]) + "\n")
    (tmp_path / "tgt.txt").write_text("\n".join([TARGETS[0], "", *TARGETS[1:]]) + "\n")
    (tmp_path / "gold.txt").write_text("0-0 1-1 2-2 3-3 4-4\n\n0-0 1-1 2-2 3-3 4-4 4?5\n0-0 1-1 2-2 3-3 4-4\n")
    return tmp_path


def test_align_command_writes_pharaoh_lines_and_scores_them_against_gold(folders, capsys):
    output = folders / "align.txt"
    arguments = ["align", "--model", str(folders / "adaptive"), "--source_file", str(folders / "src.txt")]
    arguments += ["--target_file", str(folders / "tgt.txt"), "--output", str(output)]
    arguments += ["--gold", str(folders / "gold.txt")]
    assert main([*arguments, "--heads", "1:0,1:2", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "Aligned 3 sentence pairs with cross-attention head(s) 1:0+1:2 (given;" in printed
    assert "AER " in printed and "(against --gold" in printed
    lines = output.read_text().splitlines()
    assert len(lines) == 4 and lines[1] == ""
    for line, source, target in zip([lines[0], *lines[2:]], SOURCES, TARGETS, strict=True):
        sure, _ = parse_links(line, "output")
        assert sure and all(i < len(source.split()) and j < len(target.split()) for i, j in sure)
    # A plain Marian (softmax) model aligns too, on standard output.
    arguments[2] = str(folders / "marian")
    assert main([*arguments[:-4], "--no-progress"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 4


def test_align_command_translates_when_no_target_is_given_and_carries_markup(folders, capsys):
    (folders / "tagged.txt").write_text("der <b>kleine hund</b> läuft {1}\nzwei katzen\n")
    arguments = ["align", "--model", str(folders / "adaptive"), "--source_file", str(folders / "tagged.txt")]
    arguments += ["--output", str(folders / "a.txt"), "--markup", str(folders / "tagged.out")]
    assert main([*arguments, "--translation_output", str(folders / "t.txt"), "--no-progress"]) == 0
    translations = (folders / "t.txt").read_text().splitlines()
    tagged = (folders / "tagged.out").read_text().splitlines()
    assert len(translations) == len(tagged) == 2
    assert Counter(tags_in(tagged[0])) == Counter(["<b>", "</b>", "{1}"])
    assert parse_markup(tagged[0], "x").text == translations[0]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "without --target_file the model translates"),
        (["--target_file", "{tgt}", "--heads", "1-0"], "--heads 1-0: '1-0' is not LAYER:HEAD"),
        (["--target_file", "{tgt}", "--heads", "5:0"], "head 5:0 does not exist"),
        (["--target_file", "{tgt}", "--threshold", "1"], r"--threshold must be a share of attention in \[0, 1\)"),
        (["--target_file", "{tgt}", "--gold", "{short}"], "has 1 lines for 4 sentence pairs"),
        (["--target_file", "{tgt}", "--output", "{src}"], "--output .* is the --source_file file"),
        (["--target_file", "{src}", "--markup", "{out}"], "has tags on line"),
    ],
)
def test_align_command_bad_input_gets_one_line(folders, capsys, extra, message):
    (folders / "short.txt").write_text("0-0\n")
    (folders / "src.txt").write_text((folders / "src.txt").read_text().replace("hund", "<b>hund</b>"))
    names = {"tgt": "tgt.txt", "src": "src.txt", "short": "short.txt", "out": "out.txt"}
    extra = [value.format(**{key: str(folders / name) for key, name in names.items()}) for value in extra]
    arguments = ["align", "--model", str(folders / "adaptive"), "--source_file", str(folders / "src.txt")]
    assert main([*arguments, *extra, "--no-progress"]) == 1
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1
    assert __import__("re").search(message, error), error
