"""A built-in synthetic language pair, so the demo can train a translation model offline.

The source side ("en") is a small fragment of English; the target side ("syn") is an artificial language whose
rules force a translation model to reorder words, carry agreement across the sentence and build words from pieces:

1. Word order. English is subject–verb–object: ``subject verb [object] [preposition noun-phrase] [adverb]``.
   Synthetic is verb-final: ``subject [noun-phrase postposition] [object] [adverb] verb``. Inside a noun phrase
   the adjective and the determiner follow the noun: "the red ball" → ``ball-red lo``; "a" is dropped.
2. Nouns are built as ``gender prefix + stem + [plural -ri] + [case]``. The gender (``ka-`` or ``mi-``) is fixed
   per noun by the lexicon and never visible in English; the case is ``-en`` for the object, ``-ut`` inside a
   postpositional phrase, nothing for the subject.
3. Agreement. Adjectives end in ``-a`` (ka- nouns) or ``-e`` (mi- nouns) plus ``-ri`` in the plural, agreeing with
   their noun; verbs end in ``-ak`` (ka- subject) or ``-im`` (mi- subject) plus ``-ri`` for a plural subject, so
   the clause-final verb depends on a noun several words back.
4. Function words: the → ``lo``, some → ``sa``, two → ``du``, three → ``tre``, many → ``mun``, and → ``ve``,
   but → ``po``. Content words map one-to-one to pseudo-word stems drawn from syllables with a fixed seed.

Example, with a word-by-word gloss:

    the old dog sees two red balls in the garden today
    kazever fobesa lo  mifasirut    lo  duli mitikalrien   dagemeri du  roboma gunulak
    ka-dog  old-a  the mi-garden-ut the in   mi-ball-ri-en red-e-ri two today  see-ak

Sentences have 4–16 words on each side; a quarter join two clauses with "and" / "but".
"""

import functools
import random
from dataclasses import dataclass

import datasets

from ..errors import HfEntmaxValueError


SOURCE_LANG = "en"
TARGET_LANG = "syn"

# The lexicon is part of the language, so it has its own seed: the data seed only changes which sentences are drawn.
LEXICON_SEED = 2019

# English side. Nouns take a regular "-s" plural and verbs a regular "-s" third person singular, which keeps the
# source grammar to a few lines.
ANIMATE_NOUNS = (
    "dog", "cat", "bird", "horse", "farmer", "teacher", "girl", "boy", "king", "queen",
    "friend", "doctor", "student", "painter", "baker", "sailor", "monkey", "rabbit", "tiger", "cook",
)  # fmt: skip
THING_NOUNS = (
    "book", "ball", "apple", "house", "tree", "river", "garden", "letter", "song", "car",
    "boat", "cake", "flower", "window", "table", "door", "key", "hill", "road", "bridge",
)  # fmt: skip
TRANSITIVE_VERBS = (
    "see", "like", "find", "take", "want", "paint", "follow", "visit",
    "help", "call", "pull", "read", "hold", "bring", "buy", "love",
)  # fmt: skip
INTRANSITIVE_VERBS = ("sleep", "run", "sing", "wait", "dance", "laugh", "swim", "walk", "work", "sit")
ADJECTIVES = (
    "small", "big", "old", "young", "red", "green", "happy", "quiet",
    "brave", "tall", "clever", "lazy", "strange", "busy", "bright", "dark",
)  # fmt: skip
ADVERBS = ("quickly", "slowly", "often", "today", "again", "quietly", "always", "sometimes")
PREPOSITIONS = ("in", "near", "behind", "under", "with", "over")
SINGULAR_DETERMINERS = ("the", "a")
PLURAL_DETERMINERS = ("the", "some", "two", "three", "many")
CONJUNCTIONS = ("and", "but")

# Synthetic side: function words and affixes. None is a word that is dropped ("a" has no translation).
TARGET_DETERMINERS = {"the": "lo", "a": None, "some": "sa", "two": "du", "three": "tre", "many": "mun"}
TARGET_CONJUNCTIONS = {"and": "ve", "but": "po"}
GENDER_PREFIXES = ("ka", "mi")  # indexed by a noun's gender class, 0 or 1
PLURAL_SUFFIX = "ri"
CASE_SUFFIXES = {"subject": "", "object": "en", "oblique": "ut"}
ADJECTIVE_GENDER_ENDINGS = ("a", "e")
VERB_GENDER_ENDINGS = ("ak", "im")

MIN_WORDS, MAX_WORDS = 4, 16

# How often optional parts appear; tuned so most sentences have 6–12 words.
PLURAL_PROBABILITY = 0.35
ADJECTIVE_PROBABILITY = 0.35
TRANSITIVE_PROBABILITY = 0.65
PREPOSITIONAL_PHRASE_PROBABILITY = 0.4
ADVERB_PROBABILITY = 0.3
TWO_CLAUSE_PROBABILITY = 0.25

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_FINAL_CONSONANTS = "lmnrs"


@dataclass(frozen=True)
class Lexicon:
    """The content-word dictionary: each English word (noun and verb base forms) maps to one Synthetic stem."""

    nouns: dict[str, str]
    noun_genders: dict[str, int]
    verbs: dict[str, str]
    adjectives: dict[str, str]
    adverbs: dict[str, str]
    postpositions: dict[str, str]


@functools.cache
def lexicon() -> Lexicon:
    """The fixed Synthetic lexicon, drawn once from `LEXICON_SEED`.

    Inflected stems have the shape CVCVC (e.g. "dorum"), so every ending attaches to a consonant and no stem is a
    prefix of another; adverbs (CVCVCV) and postpositions (CVCV) are invariant and end in a vowel, so each word
    class has its own shape. All stems are distinct, which makes the dictionary a bijection.
    """
    rng = random.Random(LEXICON_SEED)
    used: set[str] = set(GENDER_PREFIXES) | {word for word in TARGET_DETERMINERS.values() if word}
    used |= set(TARGET_CONJUNCTIONS.values())

    def new_word(num_syllables: int, final_consonant: bool) -> str:
        while True:
            word = "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(num_syllables))
            if final_consonant:
                word += rng.choice(_FINAL_CONSONANTS)
            # A stem starting like a gender prefix would blur where the prefix ends ("ka" + "kanol").
            if word not in used and not word.startswith(GENDER_PREFIXES):
                used.add(word)
                return word

    nouns = {noun: new_word(2, True) for noun in ANIMATE_NOUNS + THING_NOUNS}
    # Half of the nouns in each group are ka-, half mi-: balanced classes, but unpredictable from English.
    noun_genders = {}
    for group in (ANIMATE_NOUNS, THING_NOUNS):
        classes = [index % 2 for index in range(len(group))]
        rng.shuffle(classes)
        noun_genders.update(zip(group, classes, strict=True))
    return Lexicon(
        nouns=nouns,
        noun_genders=noun_genders,
        verbs={verb: new_word(2, True) for verb in TRANSITIVE_VERBS + INTRANSITIVE_VERBS},
        adjectives={adjective: new_word(2, True) for adjective in ADJECTIVES},
        adverbs={adverb: new_word(3, False) for adverb in ADVERBS},
        postpositions={preposition: new_word(2, False) for preposition in PREPOSITIONS},
    )


@dataclass(frozen=True)
class _NounPhrase:
    noun: str
    plural: bool
    determiner: str
    adjective: str | None


@dataclass(frozen=True)
class _Clause:
    subject: _NounPhrase
    verb: str
    object: _NounPhrase | None
    preposition: str | None
    prepositional_object: _NounPhrase | None
    adverb: str | None


def _sample_noun_phrase(rng: random.Random, nouns: tuple[str, ...]) -> _NounPhrase:
    plural = rng.random() < PLURAL_PROBABILITY
    determiner = rng.choice(PLURAL_DETERMINERS if plural else SINGULAR_DETERMINERS)
    adjective = rng.choice(ADJECTIVES) if rng.random() < ADJECTIVE_PROBABILITY else None
    return _NounPhrase(noun=rng.choice(nouns), plural=plural, determiner=determiner, adjective=adjective)


def _sample_clause(rng: random.Random) -> _Clause:
    subject = _sample_noun_phrase(rng, ANIMATE_NOUNS)
    transitive = rng.random() < TRANSITIVE_PROBABILITY
    verb = rng.choice(TRANSITIVE_VERBS if transitive else INTRANSITIVE_VERBS)
    obj = _sample_noun_phrase(rng, ANIMATE_NOUNS + THING_NOUNS) if transitive else None
    preposition, prepositional_object = None, None
    if rng.random() < PREPOSITIONAL_PHRASE_PROBABILITY:
        preposition = rng.choice(PREPOSITIONS)
        prepositional_object = _sample_noun_phrase(rng, ANIMATE_NOUNS + THING_NOUNS)
    adverb = rng.choice(ADVERBS) if rng.random() < ADVERB_PROBABILITY else None
    return _Clause(subject, verb, obj, preposition, prepositional_object, adverb)


# A word and the concept it expresses, e.g. ("lo", (0, "object", "determiner")): the concept is the word's role in its
# clause, so an English and a Synthetic word translate each other exactly when their concepts are equal.
_Word = tuple[str, tuple]


def _english_noun_phrase(phrase: _NounPhrase, slot: tuple) -> list[_Word]:
    noun = phrase.noun + "s" if phrase.plural else phrase.noun
    words = [(phrase.determiner, (*slot, "determiner"))]
    if phrase.adjective:
        words.append((phrase.adjective, (*slot, "adjective")))
    return [*words, (noun, (*slot, "noun"))]


def _english_clause(clause: _Clause, index: int) -> list[_Word]:
    # English verbs agree only in number: "the dog sees", "the dogs see".
    verb = clause.verb if clause.subject.plural else clause.verb + "s"
    words = [*_english_noun_phrase(clause.subject, (index, "subject")), (verb, (index, "verb"))]
    if clause.object:
        words += _english_noun_phrase(clause.object, (index, "object"))
    if clause.preposition:
        words.append((clause.preposition, (index, "preposition")))
        words += _english_noun_phrase(clause.prepositional_object, (index, "oblique"))
    if clause.adverb:
        words.append((clause.adverb, (index, "adverb")))
    return words


def _synthetic_noun_phrase(phrase: _NounPhrase, case: str, index: int, lex: Lexicon) -> list[_Word]:
    gender = lex.noun_genders[phrase.noun]
    number = PLURAL_SUFFIX if phrase.plural else ""
    noun = GENDER_PREFIXES[gender] + lex.nouns[phrase.noun] + number + CASE_SUFFIXES[case]
    words = [(noun, (index, case, "noun"))]
    if phrase.adjective:
        adjective = lex.adjectives[phrase.adjective] + ADJECTIVE_GENDER_ENDINGS[gender] + number
        words.append((adjective, (index, case, "adjective")))
    if TARGET_DETERMINERS[phrase.determiner]:
        words.append((TARGET_DETERMINERS[phrase.determiner], (index, case, "determiner")))
    return words


def _synthetic_clause(clause: _Clause, index: int, lex: Lexicon) -> list[_Word]:
    words = _synthetic_noun_phrase(clause.subject, "subject", index, lex)
    if clause.preposition:
        words += _synthetic_noun_phrase(clause.prepositional_object, "oblique", index, lex)
        words.append((lex.postpositions[clause.preposition], (index, "preposition")))
    if clause.object:
        words += _synthetic_noun_phrase(clause.object, "object", index, lex)
    if clause.adverb:
        words.append((lex.adverbs[clause.adverb], (index, "adverb")))
    # The verb comes last and agrees with the subject, which may be a dozen words back.
    gender = lex.noun_genders[clause.subject.noun]
    number = PLURAL_SUFFIX if clause.subject.plural else ""
    words.append((lex.verbs[clause.verb] + VERB_GENDER_ENDINGS[gender] + number, (index, "verb")))
    return words


@dataclass(frozen=True)
class AlignedPair:
    """One sentence pair with its gold word alignment.

    Attributes:
        source, target: The English and the Synthetic sentence, words separated by single spaces.
        alignment: ``(source word index, target word index)`` pairs, 0-based, sorted: every word is linked to the
            one word that translates it; English "a" (dropped in Synthetic) is linked to nothing.
    """

    source: str
    target: str
    alignment: tuple[tuple[int, int], ...]


def _sample_pair(rng: random.Random) -> AlignedPair:
    """Draw sentences until both sides have MIN_WORDS–MAX_WORDS words."""
    lex = lexicon()
    while True:
        clauses = [_sample_clause(rng)]
        conjunction = None
        if rng.random() < TWO_CLAUSE_PROBABILITY:
            conjunction = rng.choice(CONJUNCTIONS)
            clauses.append(_sample_clause(rng))
        source, target = _english_clause(clauses[0], 0), _synthetic_clause(clauses[0], 0, lex)
        if conjunction:
            source += [(conjunction, ("conjunction",)), *_english_clause(clauses[1], 1)]
            target += [(TARGET_CONJUNCTIONS[conjunction], ("conjunction",)), *_synthetic_clause(clauses[1], 1, lex)]
        if MIN_WORDS <= len(source) <= MAX_WORDS and MIN_WORDS <= len(target) <= MAX_WORDS:
            target_index = {concept: index for index, (_, concept) in enumerate(target)}
            alignment = tuple(
                (index, target_index[concept]) for index, (_, concept) in enumerate(source) if concept in target_index
            )
            return AlignedPair(
                " ".join(word for word, _ in source), " ".join(word for word, _ in target), tuple(sorted(alignment))
            )


def generate_aligned_pairs(num_pairs: int, seed: int = 0) -> list[AlignedPair]:
    """Generate distinct sentence pairs with their gold word alignments.

    The pairs are a deterministic stream for a given seed: asking for more pairs extends the list and keeps its
    beginning, so the first pairs never change with ``num_pairs``.

    Args:
        num_pairs: How many pairs to return (no two share a source sentence).
        seed: Seed of the sentence sampler; the lexicon does not depend on it.
    """
    if num_pairs < 0:
        raise HfEntmaxValueError(f"num_pairs must be >= 0, got {num_pairs}")
    rng = random.Random(seed)
    pairs: list[AlignedPair] = []
    seen: set[str] = set()
    # The language has far more than 10**12 sentences, so duplicates are rare; the cap only guards against a loop.
    for _ in range(100 * num_pairs + 1000):
        if len(pairs) == num_pairs:
            break
        pair = _sample_pair(rng)
        if pair.source not in seen:  # the target is a function of the source, so distinct sources mean distinct pairs
            seen.add(pair.source)
            pairs.append(pair)
    else:
        raise HfEntmaxValueError(f"could not generate {num_pairs} distinct pairs")
    return pairs


def generate_pairs(num_pairs: int, seed: int = 0) -> list[tuple[str, str]]:
    """`generate_aligned_pairs` without the alignments: ``(source, target)`` strings in `SOURCE_LANG` and
    `TARGET_LANG`."""
    return [(pair.source, pair.target) for pair in generate_aligned_pairs(num_pairs, seed)]


def synthetic_splits(
    num_train: int = 20000, num_validation: int = 500, num_test: int = 500, seed: int = 0
) -> datasets.DatasetDict:
    """The synthetic pair as a translation DatasetDict with disjoint "train", "validation" and "test" splits.

    Test pairs are drawn first and validation pairs next, so the held-out splits stay the same when only
    ``num_train`` changes.

    Args:
        num_train: Number of training pairs.
        num_validation: Number of validation pairs.
        num_test: Number of test pairs.
        seed: Seed of the sentence sampler.

    Returns:
        A DatasetDict whose splits have one column, ``translation``, holding ``{SOURCE_LANG: str, TARGET_LANG: str}``
        (the format of Hugging Face translation datasets such as WMT).
    """
    for name, value in (("num_train", num_train), ("num_validation", num_validation), ("num_test", num_test)):
        if value < 0:
            raise HfEntmaxValueError(f"{name} must be >= 0, got {value}")
    pairs = generate_pairs(num_test + num_validation + num_train, seed=seed)
    split_pairs = {
        "train": pairs[num_test + num_validation :],
        "validation": pairs[num_test : num_test + num_validation],
        "test": pairs[:num_test],
    }
    features = datasets.Features({"translation": datasets.Translation(languages=[SOURCE_LANG, TARGET_LANG])})
    return datasets.DatasetDict(
        {
            split: datasets.Dataset.from_dict(
                {"translation": [{SOURCE_LANG: source, TARGET_LANG: target} for source, target in split_pairs[split]]},
                features=features,
            )
            for split in ("train", "validation", "test")
        }
    )
