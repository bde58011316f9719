import pytest
import torch
from conftest import tiny_model

from hf_entmax import TranslationPipeline


SOURCES = ["der kleine hund läuft schnell", "zwei katzen", "ein mann liest ein buch"]


@pytest.fixture
def translator(tokenizer):
    return TranslationPipeline(model=tiny_model(vocab_size=len(tokenizer), init_std=0.5), tokenizer=tokenizer)


def greedy_translation(translator, text, **generate_kwargs):
    inputs = translator.tokenizer(text, return_tensors="pt")
    output_ids = translator.model.generate(**inputs, **generate_kwargs)
    return translator.tokenizer.decode(output_ids[0], skip_special_tokens=True)


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


def test_pipeline_stays_on_the_models_device(translator):
    assert translator.device == torch.device("cpu")


def test_non_string_input_is_refused_with_a_clear_error(translator):
    with pytest.raises(TypeError, match="translates strings, got int"):
        translator(42)
