"""Layer styles (`layer_style`): each layer's residual blocks as the style defines them, cached decoding that agrees
with uncached, weights of one style refused by a config of another, and the model card naming the style."""

import json

import pytest
import torch
from helpers import tiny_config, tiny_model
from huggingface_hub.errors import StrictDataclassError

from hf_entmax import AdaptiveEntmaxMarianForCausalLM, AdaptiveEntmaxMarianMTModel
from hf_entmax.hub.model_card import ModelCardInfo, render_model_card


BOS = 2
STYLES = ("marian", "pre_norm", "gemma2")


def tiny_decoder(layer_style: str, **overrides) -> AdaptiveEntmaxMarianForCausalLM:
    torch.manual_seed(0)
    settings = dict(bos_token_id=BOS, decoder_start_token_id=BOS, init_std=0.3, forced_eos_token_id=None)
    config = tiny_config(layer_style=layer_style, **settings, **overrides)
    return AdaptiveEntmaxMarianForCausalLM(config).eval()


def attention(layer, hidden: torch.Tensor) -> torch.Tensor:
    return layer.self_attn(hidden, attention_mask=None)[0]


def feed_forward(layer, hidden: torch.Tensor, gated: bool) -> torch.Tensor:
    if gated:  # GeGLU: fc1 computes the gate and the value side by side
        gate, value = layer.fc1(hidden).chunk(2, dim=-1)
        return layer.fc2(torch.nn.functional.gelu(gate, approximate="tanh") * value)
    return layer.fc2(layer.activation_fn(layer.fc1(hidden)))


@pytest.mark.parametrize("style", STYLES)
def test_each_style_computes_its_residual_blocks(style):
    states = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(0))
    model = tiny_decoder(style, activation_function="gelu_pytorch_tanh")
    with torch.no_grad():  # norms that are not the identity, so that their place shows
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.uniform_(0.5, 1.5)
    first, last = model.model.decoder.layers
    gated = style == "gemma2"
    with torch.no_grad():
        for layer in (first, last):
            if style == "marian":
                hidden = layer.self_attn_layer_norm(states + attention(layer, states))
                expected = layer.final_layer_norm(hidden + feed_forward(layer, hidden, gated))
            elif style == "pre_norm":
                hidden = states + attention(layer, layer.self_attn_layer_norm(states))
                expected = hidden + feed_forward(layer, layer.final_layer_norm(hidden), gated)
            else:
                hidden = states + layer.self_attn_post_norm(attention(layer, layer.self_attn_layer_norm(states)))
                expected = hidden + layer.final_post_norm(feed_forward(layer, layer.final_layer_norm(hidden), gated))
            if layer is last and style != "marian":  # the stack's output, normalised once more
                expected = layer.output_layer_norm(expected)
            torch.testing.assert_close(layer(states, attention_mask=None), expected, rtol=0, atol=1e-5)
    assert (first.output_layer_norm, last.output_layer_norm is None) == (None, style == "marian")
    norms = {type(module).__name__ for name, module in model.named_modules() if name.endswith("norm")}
    assert norms == ({"RMSNorm"} if style == "gemma2" else {"LayerNorm"})


@pytest.mark.parametrize("style", STYLES)
def test_cached_decoding_gives_the_uncached_logits_and_translations(style):
    decoder = tiny_decoder(style, position_embedding_type="nape", attention_scaling="asentmax_per_token")
    tokens = torch.tensor([[BOS, 5, 9, 7, 11, 6, 8]])
    full = decoder(input_ids=tokens).logits
    prompt = decoder(input_ids=tokens[:, :4], use_cache=True)
    step = decoder(input_ids=tokens[:, 4:], cache=prompt.cache, use_cache=True)
    torch.testing.assert_close(step.logits, full[:, 4:], rtol=0, atol=1e-5)
    model = tiny_model(layer_style=style, init_std=0.3)
    sources = torch.tensor([[5, 6, 7, 8, 9, 1], [10, 11, 12, 1, 0, 0]])
    settings = dict(attention_mask=sources.ne(0), max_new_tokens=6, do_sample=False, num_beams=2)
    assert torch.equal(model.generate(sources, **settings), model.generate(sources, use_cache=False, **settings))


def test_weights_of_one_style_refuse_a_config_of_another(tmp_path):
    model = tiny_model(layer_style="pre_norm")
    model.save_pretrained(tmp_path)
    assert AdaptiveEntmaxMarianMTModel.from_pretrained(tmp_path).config.layer_style == "pre_norm"
    with pytest.raises(ValueError, match="saved with layer_style = 'pre_norm', but the config's `layer_style` is 'ma"):
        AdaptiveEntmaxMarianMTModel.from_pretrained(tmp_path, layer_style="marian")
    config = json.loads((tmp_path / "config.json").read_text())
    config["layer_style"] = "marian"  # edited after saving: pre-norm's weights differ only by the closing norms
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"hold `decoder\.layers\.1\.output_layer_norm\.bias`, which the config's"):
        AdaptiveEntmaxMarianMTModel.from_pretrained(tmp_path)


def test_a_decoder_only_model_takes_the_decoder_of_a_translation_model_of_its_style(tmp_path):
    # The encoder's and cross-attention's norms are no part of the check (α fixed: no learned α left behind).
    model = tiny_model(layer_style="gemma2", learn_alpha=False, alpha_init=1.5)
    model.save_pretrained(tmp_path)
    decoder = AdaptiveEntmaxMarianForCausalLM.from_pretrained(tmp_path, is_encoder_decoder=False)
    assert torch.equal(
        decoder.model.decoder.layers[1].final_post_norm.weight, model.model.decoder.layers[1].final_post_norm.weight
    )


def test_an_unknown_style_is_refused_when_the_config_is_made():
    with pytest.raises(StrictDataclassError, match="`layer_style` must be one of 'marian', 'pre_norm', 'gemma2'"):
        tiny_config(layer_style="post_norm")


def test_the_model_card_names_a_style_other_than_marians():
    marian = str(render_model_card(tiny_model(), ModelCardInfo(model_id="org/marian")))
    assert "The architecture is Marian's encoder–decoder, module for module." in marian
    gemma2 = str(render_model_card(tiny_model(layer_style="gemma2"), ModelCardInfo(model_id="org/gemma2")))
    assert "Marian's encoder–decoder, with Gemma-2's layers (RMSNorm before and after each block," in gemma2
