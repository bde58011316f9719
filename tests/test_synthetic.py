"""The built-in synthetic language pair: determinism, splits, and the grammar rules checked on generated text.

The checks parse the generated sentences with their own small analyser and the endings written out below, rather
than with the generator's rendering code, so a rendering bug cannot hide behind itself.
"""

import itertools
from collections import Counter

import datasets
import pytest

from hf_entmax.training import synthetic
from hf_entmax.training.synthetic import SOURCE_LANG, TARGET_LANG, generate_pairs, lexicon, synthetic_splits


# The rules of the target language, restated: (gender class, plural) -> ending.
GENDER_OF_PREFIX = {"ka": 0, "mi": 1}
ADJECTIVE_ENDINGS = {(0, False): "a", (0, True): "ari", (1, False): "e", (1, True): "eri"}
VERB_ENDINGS = {(0, False): "ak", (0, True): "akri", (1, False): "im", (1, True): "imri"}
CASE_ENDINGS = {"": "subject", "en": "object", "ut": "oblique"}
TARGET_FUNCTION_WORDS = {"lo": "the", "sa": "some", "du": "two", "tre": "three", "mun": "many"}
CONJUNCTIONS = {"and": "ve", "but": "po"}


@pytest.fixture(scope="module")
def pairs():
    return generate_pairs(1000, seed=0)


def analyse_target_word(word: str) -> tuple[str, str, dict]:
    """(word class, English lemma, features) of a Synthetic word, found by matching the lexicon's stems."""
    lex = lexicon()
    if word in TARGET_FUNCTION_WORDS:
        return "determiner", TARGET_FUNCTION_WORDS[word], {}
    for lemma, stem in lex.nouns.items():
        prefix, rest = word[:2], word[2:]
        if prefix in GENDER_OF_PREFIX and rest.startswith(stem):
            ending = rest[len(stem) :]
            plural = ending.startswith("ri")
            case = CASE_ENDINGS[ending[2:] if plural else ending]
            return "noun", lemma, {"gender": GENDER_OF_PREFIX[prefix], "plural": plural, "case": case}
    for word_class, stems, endings in (
        ("adjective", lex.adjectives, ADJECTIVE_ENDINGS),
        ("verb", lex.verbs, VERB_ENDINGS),
    ):
        for lemma, stem in stems.items():
            if word.startswith(stem) and word[len(stem) :] in endings.values():
                gender, plural = next(key for key, ending in endings.items() if ending == word[len(stem) :])
                return word_class, lemma, {"gender": gender, "plural": plural}
    for word_class, words in (("adverb", lex.adverbs), ("preposition", lex.postpositions)):
        for lemma, target_word in words.items():
            if word == target_word:
                return word_class, lemma, {}
    raise AssertionError(f"{word!r} is not a Synthetic word")


def english_lemma(word: str) -> tuple[str, str] | None:
    """(word class, lemma) of an English content word or determiner other than "a"; None for "a" and conjunctions."""
    if word in TARGET_FUNCTION_WORDS.values():
        return "determiner", word
    for word_class, lemmas in (
        ("noun", synthetic.ANIMATE_NOUNS + synthetic.THING_NOUNS),
        ("verb", synthetic.TRANSITIVE_VERBS + synthetic.INTRANSITIVE_VERBS),
    ):
        if word in lemmas or (word.endswith("s") and word[:-1] in lemmas):
            return word_class, word if word in lemmas else word[:-1]
    for word_class, lemmas in (
        ("adjective", synthetic.ADJECTIVES),
        ("adverb", synthetic.ADVERBS),
        ("preposition", synthetic.PREPOSITIONS),
    ):
        if word in lemmas:
            return word_class, word
    assert word in ("a", *CONJUNCTIONS), word
    return None


def clauses(sentence: str, conjunctions) -> list[list[str]]:
    result = [[]]
    for word in sentence.split():
        if word in conjunctions:
            result.append([])
        else:
            result[-1].append(word)
    return result


def test_same_seed_gives_the_same_pairs_and_another_seed_different_ones():
    assert generate_pairs(200, seed=3) == generate_pairs(200, seed=3)
    assert generate_pairs(200, seed=3) != generate_pairs(200, seed=4)
    assert synthetic_splits(50, 10, 10, seed=1)["train"][:] == synthetic_splits(50, 10, 10, seed=1)["train"][:]


def test_more_pairs_extend_the_stream_and_all_pairs_are_distinct():
    long = generate_pairs(300, seed=0)
    assert long[:100] == generate_pairs(100, seed=0)
    assert len({source for source, _ in long}) == len({target for _, target in long}) == 300


def test_the_lexicon_is_fixed_and_one_to_one():
    lex = lexicon()
    entries = [lex.nouns, lex.verbs, lex.adjectives, lex.adverbs, lex.postpositions]
    stems = [stem for entry in entries for stem in entry.values()]
    assert len(stems) == len(set(stems)) >= 90
    assert set(lex.noun_genders.values()) == {0, 1}
    lexicon.cache_clear()  # drawn again from its own seed, not from the data seed or global random state
    assert lexicon() == lex


def test_splits_have_the_requested_sizes_are_disjoint_and_use_the_translation_format():
    splits = synthetic_splits(num_train=300, num_validation=40, num_test=50, seed=0)
    assert isinstance(splits, datasets.DatasetDict)
    assert {name: len(split) for name, split in splits.items()} == {"train": 300, "validation": 40, "test": 50}
    for split in splits.values():
        assert split.column_names == ["translation"]
        assert isinstance(split.features["translation"], datasets.Translation)
        assert split.features["translation"].languages == [SOURCE_LANG, TARGET_LANG]
    example = splits["train"][0]["translation"]
    assert set(example) == {SOURCE_LANG, TARGET_LANG} and all(isinstance(text, str) for text in example.values())
    sources = {name: {row[SOURCE_LANG] for row in split["translation"]} for name, split in splits.items()}
    assert not sources["train"] & sources["validation"]
    assert not sources["train"] & sources["test"]
    assert not sources["validation"] & sources["test"]


def test_held_out_splits_do_not_change_with_the_training_size():
    small, large = synthetic_splits(100, 20, 30), synthetic_splits(400, 20, 30)
    assert small["test"][:] == large["test"][:]
    assert small["validation"][:] == large["validation"][:]


def test_negative_sizes_are_rejected():
    with pytest.raises(ValueError, match="num_pairs"):
        generate_pairs(-1)
    with pytest.raises(ValueError, match="num_test"):
        synthetic_splits(10, 10, -5)


def test_sentence_lengths_are_in_range(pairs):
    source_lengths = [len(source.split()) for source, _ in pairs]
    target_lengths = [len(target.split()) for _, target in pairs]
    assert min(source_lengths) >= 4 and max(source_lengths) <= 16
    assert min(target_lengths) >= 4 and max(target_lengths) <= 16
    assert max(source_lengths) - min(source_lengths) >= 8  # varied, not one template
    assert 0.1 < sum(" and " in source or " but " in source for source, _ in pairs) / len(pairs) < 0.5


def test_every_content_word_is_translated_by_the_same_stem(pairs):
    # Each English content word and determiner (except the dropped "a") appears exactly once in the translation.
    for source, target in pairs:
        english = Counter(lemma for lemma in map(english_lemma, source.split()) if lemma)
        words = [word for clause in clauses(target, CONJUNCTIONS.values()) for word in clause]
        translated = Counter(analyse_target_word(word)[:2] for word in words)
        assert english == translated, (source, target)


def test_target_is_verb_final_with_adjectives_after_nouns(pairs):
    source_verb_last = 0
    num_clauses = 0
    for source, target in pairs:
        source_clauses, target_clauses = clauses(source, CONJUNCTIONS), clauses(target, CONJUNCTIONS.values())
        assert len(source_clauses) == len(target_clauses)
        for source_clause, target_clause in zip(source_clauses, target_clauses, strict=True):
            num_clauses += 1
            source_classes = [(english_lemma(word) or ("article", word))[0] for word in source_clause]
            target_classes = [analyse_target_word(word)[0] for word in target_clause]
            # English: the verb directly follows the subject noun; Synthetic: the verb is last.
            assert source_classes[source_classes.index("noun") + 1] == "verb"
            assert target_classes.index("verb") == len(target_classes) - 1
            source_verb_last += source_classes[-1] == "verb"
            # Prepositions follow the English verb but come before the Synthetic verb, after their noun phrase.
            if "preposition" in source_classes:
                assert source_classes.index("preposition") > source_classes.index("verb")
                position = target_classes.index("preposition")
                assert "noun" in target_classes[max(position - 3, 0) : position]
            # Adjectives precede their noun in English and follow it in Synthetic.
            for position, word_class in enumerate(source_classes):
                if word_class == "adjective":
                    assert source_classes[position + 1] == "noun"
            for position, word_class in enumerate(target_classes):
                if word_class == "adjective":
                    assert target_classes[position - 1] == "noun"
    # Only bare intransitive clauses ("the dogs sleep") end with the verb in English.
    assert source_verb_last / num_clauses < 0.4


def test_adjectives_and_verbs_agree_in_gender_and_number(pairs):
    lex = lexicon()
    genders_seen = set()
    for source, target in pairs:
        source_clauses, target_clauses = clauses(source, CONJUNCTIONS), clauses(target, CONJUNCTIONS.values())
        for source_clause, target_clause in zip(source_clauses, target_clauses, strict=True):
            analyses = [analyse_target_word(word) for word in target_clause]
            subject_class, subject, subject_features = analyses[0]
            assert subject_class == "noun" and subject_features["case"] == "subject"
            assert subject_features["gender"] == lex.noun_genders[subject]
            # The subject's number comes from English ("dogs"), its gender only from the lexicon.
            english_subject = next(word for word in source_clause if (english_lemma(word) or ("",))[0] == "noun")
            assert subject_features["plural"] == english_subject.endswith("s")
            verb_class, _, verb_features = analyses[-1]
            assert verb_class == "verb"
            assert verb_features == {"gender": subject_features["gender"], "plural": subject_features["plural"]}
            genders_seen.add(verb_features["gender"])
            for (previous_class, _, noun_features), (word_class, _, features) in itertools.pairwise(analyses):
                if word_class == "adjective":
                    assert previous_class == "noun"
                    assert features == {"gender": noun_features["gender"], "plural": noun_features["plural"]}
    assert genders_seen == {0, 1}


def test_gold_alignments_link_each_word_to_its_translation_and_nothing_else():
    """Checked with this file's own analyser: a link joins an English word and the Synthetic word of the same lemma
    and class; every Synthetic word has one link, every English word one except "a" (which has no translation)."""
    aligned = synthetic.generate_aligned_pairs(300, seed=2)
    assert [(pair.source, pair.target) for pair in aligned] == generate_pairs(300, seed=2)
    conjunction_of = dict(CONJUNCTIONS)
    for pair in aligned:
        source, target = pair.source.split(), pair.target.split()
        assert Counter(j for _, j in pair.alignment) == Counter(range(len(target))), pair
        linked_sources = Counter(i for i, _ in pair.alignment)
        assert all(count == 1 for count in linked_sources.values()), pair
        assert {i for i in range(len(source)) if i not in linked_sources} == {
            i for i, word in enumerate(source) if word == "a"
        }, pair
        for i, j in pair.alignment:
            if source[i] in conjunction_of:
                assert target[j] == conjunction_of[source[i]], pair
                continue
            word_class, lemma, _ = analyse_target_word(target[j])
            assert english_lemma(source[i]) == (word_class, lemma), (pair, i, j)
