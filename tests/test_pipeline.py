import copy
import logging
import warnings

import pytest
import torch
from helpers import tiny_model
from transformers import GenerationConfig, PreTrainedTokenizerFast

from hf_entmax import TranslationPipeline


SOURCES = ["der kleine hund läuft schnell", "zwei katzen", "ein mann liest ein buch"]
# Far longer than the tiny model's 64 positions.
LONG_SOURCE = " ".join(["der kleine hund läuft schnell und zwei katzen schlafen im haus"] * 8)


@pytest.fixture
def translator(tokenizer):
    # init_std=0.5: a model that does not stop early, so length limits are reached.
    return TranslationPipeline(model=tiny_model(vocab_size=len(tokenizer), init_std=0.5), tokenizer=tokenizer)


def generate_ids(translator, text, tokenizer_kwargs=None, **generate_kwargs):
    inputs = translator.tokenizer(text, return_tensors="pt", **(tokenizer_kwargs or {}))
    return translator.model.generate(**inputs, **generate_kwargs)[0]


def greedy_translation(translator, text, **generate_kwargs):
    return translator.tokenizer.decode(generate_ids(translator, text, **generate_kwargs), skip_special_tokens=True)


def test_a_string_gives_one_translation(translator):
    result = translator(SOURCES[0], max_new_tokens=8)
    assert result == [{"translation_text": greedy_translation(translator, SOURCES[0], max_new_tokens=8)}]


def test_a_list_gives_one_dict_per_input_in_order(translator):
    results = translator(SOURCES, max_new_tokens=8)
    assert results == [
        {"translation_text": greedy_translation(translator, source, max_new_tokens=8)} for source in SOURCES
    ]


def test_batching_does_not_change_translations(translator):
    assert translator(SOURCES, max_new_tokens=8, batch_size=3) == translator(SOURCES, max_new_tokens=8)


def test_generation_arguments_reach_generate(translator):
    beam = translator(SOURCES[1], num_beams=4, max_new_tokens=8)
    assert beam == [{"translation_text": greedy_translation(translator, SOURCES[1], num_beams=4, max_new_tokens=8)}]
    several = translator(SOURCES[:2], num_beams=4, num_return_sequences=2, max_new_tokens=8)
    assert [len(candidates) for candidates in several] == [2, 2]
    assert all(set(candidate) == {"translation_text"} for candidates in several for candidate in candidates)


def test_generation_arguments_given_when_the_pipeline_is_made_apply_to_every_call(tokenizer, translator):
    made_with_limit = TranslationPipeline(model=translator.model, tokenizer=tokenizer, max_new_tokens=3)
    [result] = made_with_limit(SOURCES[0], return_tensors=True)
    assert torch.equal(result["translation_token_ids"], generate_ids(translator, SOURCES[0], max_new_tokens=3))


def test_pipeline_stays_on_the_models_device(translator):
    assert translator.device == torch.device("cpu")


def test_non_string_input_is_refused_with_a_clear_error(translator):
    with pytest.raises(TypeError, match="translates strings, got int"):
        translator(42)


def test_max_length_limits_the_output_not_the_source(translator):
    """As in transformers 4, `max_length` goes to generate: the translation has at most that many tokens."""
    assert len(translator.tokenizer(SOURCES[0])["input_ids"]) > 6  # a source cut to 6 tokens would differ
    [result] = translator(SOURCES[0], max_length=6, return_tensors=True)
    expected = generate_ids(translator, SOURCES[0], max_length=6)
    assert len(expected) == 6  # this model does not stop before the limit
    assert torch.equal(result["translation_token_ids"], expected)


def test_max_new_tokens_counts_generated_tokens_only(translator):
    [result] = translator(SOURCES[0], max_new_tokens=5, return_tensors=True)
    # The decoder's start token comes first and is not counted.
    assert len(result["translation_token_ids"]) == 1 + 5
    assert torch.equal(result["translation_token_ids"], generate_ids(translator, SOURCES[0], max_new_tokens=5))


def test_without_a_limit_the_output_stops_at_the_decoders_positions(translator):
    """No limit anywhere: transformers 4's 256 new tokens, cut to the 64 positions, never an IndexError."""
    assert translator.model.generation_config.max_length is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nor generate's warning about its model-agnostic default of 20
        [result] = translator(SOURCES[1], return_tensors=True)
    assert torch.equal(result["translation_token_ids"], generate_ids(translator, SOURCES[1], max_length=64))


@pytest.mark.parametrize(("name", "value"), [("max_new_tokens", 64), ("max_length", 65)])
def test_a_limit_beyond_the_decoders_positions_is_refused(translator, name, value):
    with pytest.raises(ValueError, match=rf"`{name}`={value} .* 64 positions .*max_new_tokens <= 63"):
        translator(SOURCES[1], **{name: value})
    # The largest allowed limit works: 63 new tokens after the start token fill the 64 positions.
    [result] = translator(SOURCES[1], max_new_tokens=63, return_tensors=True)
    assert len(result["translation_token_ids"]) == 64


@pytest.mark.parametrize("value", ["5", 0, 2.5, True])
def test_a_length_limit_that_is_not_a_positive_integer_is_refused(translator, value):
    with pytest.raises(ValueError, match=f"`max_new_tokens` must be an integer >= 1, got {value!r}"):
        translator(SOURCES[1], max_new_tokens=value)


def test_return_tensors_gives_the_ids_instead_of_the_text(translator):
    expected = generate_ids(translator, SOURCES[0], max_new_tokens=4)
    for arguments in ({"return_tensors": True}, {"return_text": False}):
        [result] = translator(SOURCES[0], max_new_tokens=4, **arguments)
        assert set(result) == {"translation_token_ids"}
        assert torch.equal(result["translation_token_ids"], expected)


def test_return_text_and_return_tensors_together_give_both(translator):
    results = translator(SOURCES, max_new_tokens=4, return_text=True, return_tensors=True)
    for source, result in zip(SOURCES, results, strict=True):
        assert set(result) == {"translation_text", "translation_token_ids"}
        assert torch.equal(result["translation_token_ids"], generate_ids(translator, source, max_new_tokens=4))
        assert result["translation_text"] == translator.tokenizer.decode(
            result["translation_token_ids"], skip_special_tokens=True
        )


def test_asking_for_nothing_to_return_is_refused(tokenizer, translator):
    with pytest.raises(ValueError, match="return_text=False` with `return_tensors=False` leaves nothing"):
        translator(SOURCES[0], return_text=False, return_tensors=False)
    # Also when half of it was given when the pipeline was made.
    ids_only = TranslationPipeline(model=translator.model, tokenizer=tokenizer, return_text=False)
    with pytest.raises(ValueError, match="leaves nothing to return"):
        ids_only(SOURCES[0], return_tensors=False)


def test_output_flags_must_be_booleans(translator):
    with pytest.raises(ValueError, match="`return_tensors` must be True or False, got 'pt'"):
        translator(SOURCES[0], return_tensors="pt")


def test_decoding_options_reach_the_tokenizer(translator, monkeypatch):
    decode_calls = []
    decode = translator.tokenizer.decode

    def recording_decode(ids, **kwargs):
        decode_calls.append(kwargs)
        return decode(ids, **kwargs)

    monkeypatch.setattr(translator.tokenizer, "decode", recording_decode)
    translator(SOURCES[1], max_new_tokens=4)
    translator(SOURCES[1], max_new_tokens=4, clean_up_tokenization_spaces=True, skip_special_tokens=False)
    assert decode_calls == [
        # transformers 4's defaults
        {"skip_special_tokens": True, "clean_up_tokenization_spaces": False},
        {"skip_special_tokens": False, "clean_up_tokenization_spaces": True},
    ]


def test_truncation_is_off_by_default_and_a_long_input_gets_one_clear_error(translator):
    token_count = len(translator.tokenizer(LONG_SOURCE)["input_ids"])
    assert token_count > 64
    for arguments in ({}, {"truncation": False}):
        with pytest.raises(ValueError) as raised:
            translator(["zwei katzen", LONG_SOURCE], max_new_tokens=4, **arguments)
        message = str(raised.value)
        assert f"has {token_count} tokens, but this model takes at most 64" in message
        assert "max_position_embeddings" in message and "truncation=True" in message


def test_truncation_cuts_the_input_to_what_the_model_takes(translator):
    [result] = translator(LONG_SOURCE, truncation=True, max_new_tokens=4, return_tensors=True)
    expected = generate_ids(translator, LONG_SOURCE, {"truncation": True, "max_length": 64}, max_new_tokens=4)
    assert torch.equal(result["translation_token_ids"], expected)


def test_the_tokenizers_limit_counts_when_it_is_smaller(tokenizer, translator):
    short_tokenizer = copy.deepcopy(tokenizer)
    short_tokenizer.model_max_length = 8
    short = TranslationPipeline(model=translator.model, tokenizer=short_tokenizer)
    assert len(tokenizer(SOURCES[2])["input_ids"]) > 8
    with pytest.raises(ValueError, match=r"has \d+ tokens, but this model takes at most 8 \(the tokenizer's"):
        short(SOURCES[2], max_new_tokens=4)
    [result] = short(SOURCES[2], truncation=True, max_new_tokens=4, return_tensors=True)
    expected = generate_ids(translator, SOURCES[2], {"truncation": True, "max_length": 8}, max_new_tokens=4)
    assert torch.equal(result["translation_token_ids"], expected)


def test_language_codes_are_ignored_by_a_single_pair_model_with_one_note(translator, caplog):
    with caplog.at_level(logging.WARNING):
        with_codes = translator(SOURCES, max_new_tokens=4, src_lang="de", tgt_lang="en")
        translator(SOURCES, max_new_tokens=4, tgt_lang="fr")
    assert with_codes == translator(SOURCES, max_new_tokens=4)
    notes = [record.getMessage() for record in caplog.records if "src_lang" in record.getMessage()]
    assert len(notes) == 1
    assert "translates the one language pair it was trained on" in notes[0]


class LanguageCodeTokenizer(PreTrainedTokenizerFast):
    """A multilingual tokenizer as transformers' NLLB and M2M100 ones: the target language is forced first."""

    def _build_translation_inputs(self, raw_inputs, return_tensors, src_lang, tgt_lang, **extra_kwargs):
        self.src_lang = src_lang
        inputs = self(raw_inputs, return_tensors=return_tensors, **extra_kwargs)
        inputs["forced_bos_token_id"] = self.convert_tokens_to_ids(tgt_lang)
        return inputs


@pytest.mark.parametrize("batch_size", [1, 2])
def test_a_multilingual_tokenizer_gets_the_language_codes_as_in_transformers_4(tokenizer, translator, batch_size):
    multilingual = LanguageCodeTokenizer(
        tokenizer_object=copy.deepcopy(tokenizer.backend_tokenizer), pad_token="<pad>", eos_token="</s>"
    )
    target_code = tokenizer.convert_ids_to_tokens(7)
    pipeline = TranslationPipeline(model=translator.model, tokenizer=multilingual)
    results = pipeline(SOURCES, src_lang="deu", tgt_lang=target_code, max_new_tokens=4, batch_size=batch_size)
    assert multilingual.src_lang == "deu"
    for source, result in zip(SOURCES, results, strict=True):
        expected = generate_ids(translator, source, max_new_tokens=4, forced_bos_token_id=7)
        assert expected[1] == 7
        assert result == {"translation_text": tokenizer.decode(expected, skip_special_tokens=True)}


def test_a_generation_config_with_max_new_tokens_is_honoured(translator):
    config = GenerationConfig(max_new_tokens=3, num_beams=2)
    [result] = translator(SOURCES[0], generation_config=config, return_tensors=True)
    assert torch.equal(result["translation_token_ids"], generate_ids(translator, SOURCES[0], generation_config=config))
    assert config.max_new_tokens == 3 and config.max_length is None  # the caller's object is left as it was
