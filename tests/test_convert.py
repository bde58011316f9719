"""Marian → AdaptiveEntmaxMarian conversion: same function at α = 1, every weight carried, refusals."""

import json
import shutil

import pytest
import sentencepiece
import torch
from helpers import SENTENCES, tiny_config
from huggingface_hub import ModelCard, constants
from transformers import BartConfig, BartForConditionalGeneration, MarianConfig, MarianMTModel, MarianTokenizer

from hf_entmax import AdaptiveEntmaxMarianMTModel
from hf_entmax.cli import main
from hf_entmax.errors import HfEntmaxError, HfEntmaxValueError
from hf_entmax.hub import convert_marian, find_pickle_files
from hf_entmax.hub.convert import compare_models, copy_marian_weights, hub_id_from_cache_path, infer_languages


def tiny_marian(vocab_size: int, seed: int = 0) -> MarianMTModel:
    """A 2+2-layer, 4-head Marian with weights large enough that attention is far from uniform."""
    torch.manual_seed(seed)
    config = MarianConfig(
        vocab_size=vocab_size, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, forced_eos_token_id=1, init_std=0.5,
    )  # fmt: skip
    model = MarianMTModel(config)
    with torch.no_grad():
        model.final_logits_bias.normal_(std=0.5)  # non-zero, so that carrying it over is tested
    return model.eval()


@pytest.fixture(scope="module")
def marian_folder(tmp_path_factory, tokenizer):
    folder = tmp_path_factory.mktemp("opus-mt-de-en")
    model = tiny_marian(len(tokenizer))
    model.generation_config.num_beams = 3
    model.generation_config.max_length = 24
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def source_model(folder) -> MarianMTModel:
    return MarianMTModel.from_pretrained(folder).eval()


@pytest.mark.slow
def test_converted_model_computes_the_same_function(marian_folder, tokenizer, tmp_path):
    report = convert_marian(str(marian_folder), tmp_path / "out", check_sentences=SENTENCES[:4])
    assert report.same_function_expected
    assert report.max_logit_difference <= 1e-5
    assert report.greedy_identical and report.beam_identical
    assert "computes the same function" in report.summary()

    source = source_model(marian_folder)
    converted = AdaptiveEntmaxMarianMTModel.from_pretrained(tmp_path / "out").eval()
    inputs = tokenizer(SENTENCES[4:], return_tensors="pt", padding=True)
    decoder_input_ids = torch.tensor([[0, 5, 9, 3, 7, 11]] * len(SENTENCES[4:]))
    with torch.no_grad():
        # In float64, where float32 rounding (which differs between attention implementations) cannot hide a
        # difference; the check in convert_marian compares the same way.
        expected = source.double()(**inputs, decoder_input_ids=decoder_input_ids).logits
        actual = converted.double()(**inputs, decoder_input_ids=decoder_input_ids).logits
    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-5)
    assert (expected - expected.mean()).abs().max() > 1  # the check would notice a wrong model
    source.float(), converted.float()
    for num_beams in (1, 4):
        options = {"num_beams": num_beams, "do_sample": False, "max_new_tokens": 10}
        assert torch.equal(converted.generate(**inputs, **options), source.generate(**inputs, **options))


@pytest.mark.slow
def test_every_weight_is_carried_over_and_tied_weights_stay_tied(marian_folder, tmp_path):
    output = tmp_path / "out"
    convert_marian(str(marian_folder), output)
    source = source_model(marian_folder)
    converted = AdaptiveEntmaxMarianMTModel.from_pretrained(output)

    source_state, converted_state = source.state_dict(), converted.state_dict()
    assert set(source_state) == set(converted_state)  # α fixed at 1: no alpha_logits
    for key, tensor in source_state.items():
        assert torch.equal(converted_state[key], tensor), key
    assert converted.final_logits_bias.abs().sum() > 0
    shared = converted.model.shared.weight
    for tied in (converted.lm_head.weight, converted.model.encoder.embed_tokens.weight):
        assert tied.data_ptr() == shared.data_ptr()

    config = json.loads((output / "config.json").read_text())
    assert config["model_type"] == "adaptive_entmax_marian"
    assert (config["alpha_init"], config["learn_alpha"]) == (1.0, False)
    generation = json.loads((output / "generation_config.json").read_text())
    assert (generation["num_beams"], generation["max_length"]) == (3, 24)
    files = {path.name for path in output.iterdir()}
    assert {"model.safetensors", "tokenizer.json", "README.md", "modeling_adaptive_entmax_marian.py"} <= files
    assert find_pickle_files(output) == []


@pytest.mark.slow
def test_alpha_options_are_applied_and_the_report_says_it_is_another_function(marian_folder, tmp_path):
    report = convert_marian(
        str(marian_folder),
        tmp_path / "out",
        alpha_init=1.5,
        learn_alpha=True,
        cross_alpha_init=1.0,
        cross_learn_alpha=False,
    )
    assert not report.same_function_expected
    assert report.max_logit_difference > 1e-3
    assert "not expected to compute the same function" in report.summary()
    converted = AdaptiveEntmaxMarianMTModel.from_pretrained(tmp_path / "out")
    alphas = converted.get_alphas()
    torch.testing.assert_close(alphas["encoder_self"], torch.full((2, 4), 1.5))
    torch.testing.assert_close(alphas["decoder_self"], torch.full((2, 4), 1.5))
    torch.testing.assert_close(alphas["cross"], torch.ones(2, 4))
    assert converted.model.decoder.layers[0].encoder_attn.alpha_logits is None
    assert converted.model.encoder.layers[0].self_attn.alpha_logits.requires_grad

    # A learned α is 1 + sigmoid(logit): it cannot start at 1, and the error says what to change.
    with pytest.raises(HfEntmaxValueError, match="alpha_min"):
        convert_marian(str(marian_folder), tmp_path / "learned", learn_alpha=True)


def opus_mt_style_folder(folder):
    """A checkpoint laid out like Helsinki-NLP/opus-mt-*: MarianTokenizer files (source.spm, target.spm,
    vocab.json; </s> = 0, <pad> last), and a config.json from an older transformers with generation fields in it."""
    folder.mkdir()
    for side in ("source", "target"):
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(SENTENCES * 4), model_prefix=str(folder / side), vocab_size=40,
            hard_vocab_limit=False, minloglevel=2,
        )  # fmt: skip
        (folder / f"{side}.model").rename(folder / f"{side}.spm")
    pieces = set()
    for side in ("source", "target"):
        processor = sentencepiece.SentencePieceProcessor(model_file=str(folder / f"{side}.spm"))
        pieces |= {processor.id_to_piece(i) for i in range(processor.get_piece_size())}
    vocab = {"</s>": 0, "<unk>": 1} | {
        piece: 2 + i for i, piece in enumerate(sorted(pieces - {"<s>", "</s>", "<unk>"}))
    }
    pad = vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "tokenizer_config.json").write_text(json.dumps({"source_lang": "de", "target_lang": "en"}))
    config = {
        "architectures": ["MarianMTModel"], "model_type": "marian", "transformers_version": "4.22.0.dev0",
        "vocab_size": len(vocab), "d_model": 32, "encoder_layers": 2, "decoder_layers": 2,
        "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64,
        "max_position_embeddings": 512, "activation_function": "swish", "scale_embedding": True,
        "static_position_embeddings": True, "normalize_embedding": False, "add_bias_logits": False,
        "pad_token_id": pad, "eos_token_id": 0, "bos_token_id": 0, "decoder_start_token_id": pad,
        "forced_eos_token_id": 0, "bad_words_ids": [[pad]], "num_beams": 4, "max_length": 512, "init_std": 0.3,
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    torch.manual_seed(0)
    MarianMTModel(MarianConfig.from_pretrained(folder)).save_pretrained(folder / "saved")
    (folder / "saved" / "model.safetensors").rename(folder / "model.safetensors")  # keep the Hub's config.json
    shutil.rmtree(folder / "saved")
    return folder


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
@pytest.mark.slow
def test_an_opus_mt_style_checkpoint_converts_with_its_marian_tokenizer(tmp_path, capsys):
    folder = opus_mt_style_folder(tmp_path / "opus-mt-de-en")
    assert main(["convert", "--model", str(folder), "--output", str(tmp_path / "out"), "--no-check_load"]) == 0
    assert "computes the same function as the source" in capsys.readouterr().out
    assert {"source.spm", "target.spm", "vocab.json", "model.safetensors"} <= {
        p.name for p in (tmp_path / "out").iterdir()
    }
    tokenizer = MarianTokenizer.from_pretrained(tmp_path / "out")
    source = MarianMTModel.from_pretrained(folder).eval()
    converted = AdaptiveEntmaxMarianMTModel.from_pretrained(tmp_path / "out").eval()
    inputs = tokenizer(SENTENCES[:3], return_tensors="pt", padding=True)
    options = {"num_beams": 4, "max_new_tokens": 8}
    assert torch.equal(converted.generate(**inputs, **options), source.generate(**inputs, **options))


def test_refuses_a_checkpoint_that_is_not_marian(tmp_path, tokenizer):
    folder = tmp_path / "bart"
    config = BartConfig(
        vocab_size=len(tokenizer), d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16, max_position_embeddings=32,
    )  # fmt: skip
    BartForConditionalGeneration(config).save_pretrained(folder)
    with pytest.raises(HfEntmaxValueError, match="is a 'bart' checkpoint, not a Marian one"):
        convert_marian(str(folder), tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_pickle_weights_need_an_explicit_flag_and_never_reach_the_output(marian_folder, tmp_path):
    folder = tmp_path / "pickled"
    shutil.copytree(marian_folder, folder)
    state = MarianMTModel.from_pretrained(folder).state_dict()
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")

    with pytest.raises(HfEntmaxValueError, match=r"only pickle weights \(pytorch_model.bin\).*--allow_pickle"):
        convert_marian(str(folder), tmp_path / "refused")
    assert not (tmp_path / "refused").exists()

    report = convert_marian(str(folder), tmp_path / "out", allow_pickle=True)
    assert report.max_logit_difference <= 1e-5
    assert find_pickle_files(tmp_path / "out") == []
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_a_hub_id_offline_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    with pytest.raises(HfEntmaxError, match="could not be downloaded from the Hub") as error:
        convert_marian("Helsinki-NLP/opus-mt-de-en", tmp_path / "out")
    assert "\n" not in str(error.value)


def test_weights_that_do_not_fit_are_refused(tokenizer):
    source = tiny_marian(len(tokenizer))
    wider = AdaptiveEntmaxMarianMTModel(
        tiny_config(len(tokenizer), encoder_ffn_dim=128, alpha_init=1.0, learn_alpha=False)
    )
    with pytest.raises(HfEntmaxError, match=r"reshaped: model.encoder.layers.0.fc1.weight \(64, 32\) -> \(128, 32\)"):
        copy_marian_weights(source, wider)


def test_the_check_notices_a_tiny_difference(tokenizer):
    source = tiny_marian(len(tokenizer))
    target = AdaptiveEntmaxMarianMTModel(tiny_config(len(tokenizer), alpha_init=1.0, learn_alpha=False)).eval()
    copy_marian_weights(source, target)
    assert compare_models(source, target, tokenizer, SENTENCES[:2])["max_logit_difference"] <= 1e-10
    with torch.no_grad():
        target.final_logits_bias[0, 3] += 1e-4
    assert compare_models(source, target, tokenizer, SENTENCES[:2])["max_logit_difference"] == pytest.approx(
        1e-4, rel=1e-3
    )
    assert source.dtype == target.dtype == torch.float32  # compared in float64, cast back


def test_languages_and_base_model_are_inferred_from_opus_mt_names_and_the_hub_cache(tmp_path):
    assert infer_languages("Helsinki-NLP/opus-mt-de-en") == ("de", "en")
    assert infer_languages("someone/my-model") == (None, None)
    snapshot = tmp_path / "hub" / "models--Helsinki-NLP--opus-mt-de-en" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    assert hub_id_from_cache_path(snapshot) == "Helsinki-NLP/opus-mt-de-en"
    assert hub_id_from_cache_path(tmp_path) is None


def test_convert_command(marian_folder, tmp_path, capsys):
    sentences = tmp_path / "check.txt"
    sentences.write_text("\n".join(SENTENCES[:2]) + "\n")
    output = tmp_path / "out"
    arguments = [
        "convert",
        "--model",
        str(marian_folder),
        "--output",
        str(output),
        "--check_sentences",
        str(sentences),
    ]
    options = ["--repo_id", "someone/entmax-de-en", "--base_model", "Helsinki-NLP/opus-mt-de-en", "--no-check_load"]
    assert main([*arguments, *options]) == 0
    printed = capsys.readouterr().out
    assert "Checked on 2 sentences" in printed
    assert "computes the same function as the source" in printed
    card = ModelCard.load(output / "README.md")
    assert 'from_pretrained("someone/entmax-de-en", trust_remote_code=True)' in card.text
    assert card.data.language == ["de", "en"]  # inferred from the folder's opus-mt-de-en name
    assert card.data.base_model == "Helsinki-NLP/opus-mt-de-en"
    assert "It was converted from [`Helsinki-NLP/opus-mt-de-en`]" in card.text

    assert main(["convert", "--model", str(output), "--output", str(tmp_path / "again")]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "already an AdaptiveEntmaxMarian checkpoint" in error
    assert main([*arguments, "--learn_alpha", "--alpha_init", "1.0"]) == 1
    assert "invalid model settings" in capsys.readouterr().err
    assert main([*arguments, "--alpha_init", "3"]) == 1
    assert "--alpha_init must be a number in [1, 2]" in capsys.readouterr().err
