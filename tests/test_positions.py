"""Positions inside attention (RoPE, ALiBi, NAPE, none), the decoder-only model, SSMax and per-token ASEntmax."""

import json
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from helpers import tiny_config, tiny_model
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoModelForCausalLM

from hf_entmax import AdaptiveEntmaxMarianForCausalLM, TranslationPipeline
from hf_entmax.common.config import describe_positions
from hf_entmax.modeling import entmax as entmax_module
from hf_entmax.modeling import modeling_adaptive_entmax_marian as modeling
from hf_entmax.modeling.configuration_adaptive_entmax_marian import check_generation_settings, position_limit
from hf_entmax.modeling.positions import alibi_directions, alibi_slopes, distance_bias, rope_angles, rotate


RELATIVE = ("rope", "alibi", "nape", "none")
PAD, EOS, BOS = 0, 1, 2


def tiny_decoder(seed: int = 0, **overrides) -> AdaptiveEntmaxMarianForCausalLM:
    """A 2-layer, 4-head decoder-only model, d_model 32, weights large enough that attention is far from uniform."""
    torch.manual_seed(seed)
    settings = dict(bos_token_id=BOS, decoder_start_token_id=BOS, init_std=0.3, forced_eos_token_id=None)
    settings.update(overrides)
    return AdaptiveEntmaxMarianForCausalLM(tiny_config(**settings)).eval()


def rotated(states: torch.Tensor, start: int, theta: float) -> torch.Tensor:
    return rotate(states, *rope_angles(states, start, theta))


def test_rope_turns_each_pair_of_dimensions_as_a_complex_number():
    generator = torch.Generator().manual_seed(0)
    states = torch.randn(2, 3, 5, 8, generator=generator, dtype=torch.float64)
    # Dimension d and d + D/2 are the real and imaginary part of one number, turned by p · θ^(−2d/D) at position p.
    as_complex = torch.complex(states[..., :4], states[..., 4:])
    angles = torch.arange(7, 12, dtype=torch.float64)[:, None] * 100.0 ** (-torch.arange(4, dtype=torch.float64) / 4)
    turned = as_complex * torch.polar(torch.ones_like(angles), angles)
    torch.testing.assert_close(rotated(states, 7, 100.0), torch.cat((turned.real, turned.imag), dim=-1))
    # Half precision is rotated in float32 and returned in its own dtype.
    half = rotated(states.to(torch.bfloat16), 7, 100.0)
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half, rotated(states.to(torch.bfloat16).double(), 7, 100.0).to(torch.bfloat16))


def test_rotated_products_depend_on_the_distance_alone():
    generator = torch.Generator().manual_seed(0)
    query, key = torch.randn(2, 1, 1, 1, 8, generator=generator, dtype=torch.float64)
    products = {}
    for query_position, key_position in [(3, 1), (10, 8), (500, 498), (7, 7), (9, 2)]:
        rotated_query = rotated(query, query_position, 10000.0)
        rotated_key = rotated(key, key_position, 10000.0)
        products[(query_position, key_position)] = float((rotated_query * rotated_key).sum())
    assert products[(3, 1)] == pytest.approx(products[(10, 8)], abs=1e-12)
    assert products[(3, 1)] == pytest.approx(products[(500, 498)], abs=1e-12)
    assert products[(7, 7)] == pytest.approx(float((query * key).sum()), abs=1e-12)
    assert products[(9, 2)] != pytest.approx(products[(3, 1)], abs=1e-3)
    # A rotation keeps the norm, and rotating a sequence from position p is rotating its tokens one by one.
    states = torch.randn(1, 2, 5, 8, generator=generator, dtype=torch.float64)
    assert torch.allclose(rotated(states, 4, 100.0).norm(dim=-1), states.norm(dim=-1))
    one_by_one = torch.cat([rotated(states[:, :, i : i + 1], 4 + i, 100.0) for i in range(5)], dim=2)
    torch.testing.assert_close(rotated(states, 4, 100.0), one_by_one)


def test_alibi_and_nape_slopes_and_bias():
    assert alibi_slopes("alibi", 8) == tuple(2.0 ** (-head) for head in range(1, 9))
    assert alibi_slopes("nape", 4) == (1.0, 0.5, 0.0, 0.0)
    assert alibi_slopes("nape", 5) == (1.0, 0.5, 0.0, 0.0, 0.0)
    assert alibi_slopes("rope", 4) is None and alibi_slopes("none", 4) is None
    bias = distance_bias((1.0, 0.5, 0.0), 2, 3, 6, torch.float64, "cpu")  # queries at positions 2, 3, 4
    assert bias.shape == (1, 3, 3, 6)
    assert bias[0, 0, 0].tolist() == [-2.0, -1.0, 0.0, -1.0, -2.0, -3.0]
    assert bias[0, 1, 2].tolist() == [-2.0, -1.5, -1.0, -0.5, 0.0, -0.5]
    assert not bias[0, 2].any()


def test_split_directions_give_each_biased_encoder_head_one_side():
    assert alibi_directions(alibi_slopes("nape", 4), split=True) == (-1, 1, 0, 0)
    assert alibi_directions(alibi_slopes("alibi", 4), split=True) == (-1, 1, -1, 1)
    assert alibi_directions(alibi_slopes("nape", 4), split=False) is None
    lowest = torch.finfo(torch.float64).min
    bias = distance_bias((1.0, 0.5, 0.0), 2, 3, 6, torch.float64, "cpu", directions=(-1, 1, 0))
    assert bias[0, 0, 0].tolist() == [-2.0, -1.0, 0.0, lowest, lowest, lowest]  # keys up to the query
    assert bias[0, 1, 2].tolist() == [lowest] * 4 + [0.0, -0.5]  # keys from the query on
    assert not bias[0, 2].any()
    model = tiny_model(position_embedding_type="nape", encoder_alibi_directions="split")
    assert model.model.encoder.layers[0].self_attn.alibi_directions == (-1, 1, 0, 0)
    assert model.model.decoder.layers[0].self_attn.alibi_directions is None  # causal: one side already


@pytest.mark.parametrize("directions", ["both", "split"])
@pytest.mark.parametrize("position_type", ["alibi", "nape"])
def test_attention_weights_are_entmax_of_the_scores_plus_the_distance_bias(
    batch, position_type, directions, attention_path
):
    model = tiny_model(
        init_std=0.5, position_embedding_type=position_type, alpha_init=1.5, encoder_alibi_directions=directions
    )
    captured = {}
    module = model.model.encoder.layers[0].self_attn
    module.register_forward_hook(lambda mod, args, kwargs, output: captured.update(inputs=kwargs), with_kwargs=True)
    hidden = {}
    model.model.encoder.layers[0].register_forward_pre_hook(lambda mod, args: hidden.update(states=args[0]))
    out = model(**batch, output_attentions=True)
    states = hidden["states"]
    batch_size, length, _ = states.shape
    split = (batch_size, length, 4, 8)
    query = module.q_proj(states).view(split).transpose(1, 2) * 8**-0.5
    key = module.k_proj(states).view(split).transpose(1, 2)
    scores = (query @ key.transpose(-1, -2)).double()
    slopes = alibi_slopes(position_type, 4)
    sides = alibi_directions(slopes, split=directions == "split")
    scores = scores + distance_bias(slopes, 0, length, length, torch.float64, "cpu", directions=sides)
    padding = (batch["attention_mask"] == 0)[:, None, None, :]
    expected = entmax_module.entmax(scores.masked_fill(padding, float("-inf")), 1.5, dim=-1)
    torch.testing.assert_close(out.encoder_attentions[0].double(), expected, atol=1e-5, rtol=1e-5)
    assert (out.encoder_attentions[0] == 0).any()


@pytest.mark.parametrize(
    ("position_type", "cross_positions"),
    [("sinusoidal", "rope"), ("rope", "rope"), ("sinusoidal", "alibi"), ("rope", "nape")],
)
def test_cross_attention_positions_compare_target_and_source_positions(
    batch, position_type, cross_positions, attention_path
):
    """Cross-attention's score of target token i and source token j (the source counted from its first token)
    depends on i − j: with 'rope', their query and key are rotated by i and j; with 'alibi' and 'nape', it loses
    slope_h · |i − j|. The encoder is as before."""
    model = tiny_model(
        init_std=0.5, alpha_init=1.5, position_embedding_type=position_type, cross_attention_positions=cross_positions
    )
    module = model.model.decoder.layers[1].encoder_attn
    inputs = {}
    module.register_forward_pre_hook(
        lambda mod, args, kwargs: inputs.update(target=args[0], source=kwargs["key_value_states"]), with_kwargs=True
    )
    out = model(**batch, output_attentions=True)
    batch_size, target_len, source_len = 2, 4, 6
    query = module.q_proj(inputs["target"]).view(batch_size, target_len, 4, 8).transpose(1, 2).double() * 8**-0.5
    key = module.k_proj(inputs["source"]).view(batch_size, source_len, 4, 8).transpose(1, 2).double()
    if cross_positions == "rope":
        scores = rotated(query, 0, 10000.0) @ rotated(key, 0, 10000.0).transpose(-1, -2)
    else:
        slopes = alibi_slopes(cross_positions, 4)
        scores = query @ key.transpose(-1, -2) + distance_bias(slopes, 0, target_len, source_len, torch.float64, "cpu")
    padding = (batch["attention_mask"] == 0)[:, None, None, :]
    expected = entmax_module.entmax(scores.masked_fill(padding, float("-inf")), 1.5, dim=-1)
    torch.testing.assert_close(out.cross_attentions[1].double(), expected, atol=1e-5, rtol=1e-5)
    without = tiny_model(init_std=0.5, alpha_init=1.5, position_embedding_type=position_type)
    assert torch.equal(without(**batch).encoder_last_hidden_state, out.encoder_last_hidden_state)
    assert not torch.allclose(without(**batch).logits, out.logits)


def test_cross_attention_positions_are_checked_and_described():
    with pytest.raises(
        StrictDataclassError, match="`cross_attention_positions` must be one of 'none', 'rope', 'alibi', 'nape'"
    ):
        tiny_config(cross_attention_positions="sinusoidal")
    with pytest.raises(StrictDataclassError, match="`decoder_attention_heads` = 9 is odd"):
        tiny_config(cross_attention_positions="rope", d_model=36, encoder_attention_heads=3, decoder_attention_heads=4)
    with pytest.raises(StrictDataclassError, match="but `decoder_attention_heads` is 1: use at least 2 heads"):
        tiny_config(cross_attention_positions="nape", decoder_attention_heads=1)
    for cross in ("rope", "nape"):
        with pytest.raises(ValueError, match="which a decoder-only model does not have"):
            tiny_decoder(cross_attention_positions=cross)
    described = describe_positions(tiny_config(cross_attention_positions="rope", rope_theta=500.0))
    assert described == (
        "sinusoidal (Marian's): fixed vectors added to the token embeddings; cross-attention rotates target queries "
        "and source keys by their positions (RoPE, θ = 500), and inputs of up to 64 tokens (max_position_embeddings)"
    )
    described = describe_positions(tiny_config(position_embedding_type="rope", cross_attention_positions="nape"))
    assert described.endswith(
        "; cross-attention subtracts a slope times the target–source distance on half of its heads (NAPE), and "
        "inputs may be of any length"
    )


@pytest.mark.parametrize("position_type", [*RELATIVE, "sinusoidal"])
def test_cached_decoding_computes_what_the_whole_sequence_does(position_type):
    """Step-by-step logits with the cache equal those of one pass over the whole sequence, in both models."""
    for model, kwargs in [
        (tiny_model(init_std=0.3, position_embedding_type=position_type), {}),
        (tiny_model(init_std=0.3, position_embedding_type=position_type, cross_attention_positions="rope"), {}),
        (tiny_model(init_std=0.3, position_embedding_type=position_type, cross_attention_positions="nape"), {}),
        (tiny_decoder(position_embedding_type=position_type, attention_scaling="asentmax"), None),
    ]:
        tokens = torch.tensor([[BOS, 5, 9, 7, 11, 4, 6, 8]])
        if kwargs is not None:  # translation model: a source, the tokens are the decoder's
            kwargs = {"input_ids": torch.tensor([[5, 6, 7, 1]])}
            whole = model(**kwargs, decoder_input_ids=tokens).logits
            cache, steps = None, []
            encoder_outputs = model.get_encoder()(**kwargs)
            for position in range(tokens.shape[1]):
                out = model(
                    encoder_outputs=encoder_outputs,
                    decoder_input_ids=tokens[:, position : position + 1],
                    cache=cache,
                    use_cache=True,
                )
                cache = out.cache
                steps.append(out.logits)
        else:
            whole = model(input_ids=tokens).logits
            cache, steps = None, []
            for position in range(tokens.shape[1]):
                out = model(input_ids=tokens[:, position : position + 1], cache=cache, use_cache=True)
                cache = out.cache
                steps.append(out.logits)
        torch.testing.assert_close(torch.cat(steps, dim=1), whole, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("position_type", RELATIVE)
def test_left_padding_changes_nothing_under_relative_positions(position_type):
    """Batched generation pads on the left: a row's logits and continuation are those of the row alone."""
    model = tiny_decoder(position_embedding_type=position_type, attention_scaling="asentmax")
    alone = torch.tensor([[BOS, 5, 9, 7]])
    padded = torch.tensor([[PAD, PAD, PAD, BOS, 5, 9, 7], [BOS, 8, 6, 4, 12, 10, 3]])
    mask = (padded != PAD).long()
    expected = model(input_ids=alone).logits[0]
    torch.testing.assert_close(model(input_ids=padded, attention_mask=mask).logits[0, 3:], expected)
    settings = dict(max_new_tokens=6, do_sample=False, num_beams=1, pad_token_id=PAD, eos_token_id=None)
    generated = model.generate(padded, attention_mask=mask, **settings)
    assert torch.equal(generated[0, 3:], model.generate(alone, **settings)[0])


def test_beam_search_and_text_generation_with_the_decoder_only_model():
    model = tiny_decoder(position_embedding_type="nape", attention_scaling="asentmax")
    prompt = torch.tensor([[BOS, 5, 9, 7]])
    beams = model.generate(prompt, num_beams=3, num_return_sequences=3, max_new_tokens=5, eos_token_id=None)
    scores = [float(model(input_ids=beam[None], labels=beam[None]).loss) for beam in beams]
    assert beams.shape == (3, 9) and scores == sorted(scores)  # best (lowest loss) first


def test_causal_lm_loss_scores_each_label_against_the_previous_position():
    model = tiny_decoder()
    tokens = torch.tensor([[BOS, 5, 9, 7, 11]])
    labels = tokens.clone()
    labels[:, :3] = -100  # the prompt: no loss
    out = model(input_ids=tokens, labels=labels)
    log_probs = out.logits.log_softmax(-1)
    expected = -(log_probs[0, 2, 7] + log_probs[0, 3, 11]) / 2
    torch.testing.assert_close(out.loss, expected)
    out.loss.backward()
    assert all(parameter.grad is not None for name, parameter in model.named_parameters() if "alpha_logits" in name)
    assert float(model(input_ids=tokens, labels=torch.full_like(tokens, -100)).loss) == 0.0


def test_decoder_only_model_has_no_cross_attention_and_reports_its_alphas():
    model = tiny_decoder(encoder_layers=1, decoder_layers=2, encoder_attention_heads=2)
    # transformers sizes caches by the encoder's fields of a Marian config: the model gives them the decoder's sizes.
    assert model.generate(torch.tensor([[BOS, 5]]), max_new_tokens=3, eos_token_id=None).shape == (1, 5)
    assert model.config.is_decoder and not model.config.is_encoder_decoder
    assert not [name for name in model.state_dict() if "encoder" in name]
    assert set(model.get_alphas()) == {"decoder_self"}
    assert model.get_alphas()["decoder_self"].shape == (2, 4)


@pytest.mark.parametrize("position_type", RELATIVE)
def test_relative_positions_take_inputs_longer_than_the_position_table(position_type):
    model = tiny_decoder(position_embedding_type=position_type, max_position_embeddings=8)
    assert position_limit(model.config) is None
    tokens = torch.randint(3, 64, (1, 40), generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(model(input_ids=tokens).logits).all()
    check_generation_settings({"max_new_tokens": 100}, model.config, "here")
    sinusoidal = tiny_decoder(max_position_embeddings=8)
    assert position_limit(sinusoidal.config) == 8
    with pytest.raises(ValueError, match="8 positions"):
        check_generation_settings({"max_new_tokens": 100}, sinusoidal.config, "here")
    # generate's default length, the prompt and 20 tokens, is not cut at the position table: there is none to run
    # out of. A sinusoidal model's default stops at its table, as transformers has it.
    default_length = 20  # transformers' default `max_length`, counted after the prompt
    assert model.generate(tokens, eos_token_id=None).shape == (1, 40 + default_length)
    assert model.generate(tokens[:, :3], eos_token_id=None).shape == (1, 3 + default_length)
    assert model.generate(tokens[:, :3], max_length=10, eos_token_id=None).shape == (1, 10)
    assert sinusoidal.generate(tokens[:, :3], eos_token_id=None).shape == (1, 8)


def test_nape_scales_only_the_heads_without_a_bias_by_default():
    model = tiny_decoder(position_embedding_type="nape", attention_scaling="asentmax")
    module = model.model.decoder.layers[0].self_attn
    assert module.scaled_heads == (False, False, True, True)
    factor = module.query_scale(None, 100, torch.float64).flatten()
    beta, gamma = module.scale_beta.double(), module.scale_gamma.double()
    expected = 1.0 + beta * math.log(101) ** gamma
    torch.testing.assert_close(factor[2:], expected[2:].detach())
    assert factor[:2].tolist() == [1.0, 1.0]
    every = tiny_decoder(position_embedding_type="nape", attention_scaling="asentmax", attention_scaling_heads="all")
    assert every.model.decoder.layers[0].self_attn.scaled_heads is None
    # Cross-attention by its own positions: NAPE's there too, or none (every head scales).
    cross = tiny_model(cross_attention_positions="nape", attention_scaling="asentmax").model.decoder.layers[0]
    assert (cross.encoder_attn.scaled_heads, cross.self_attn.scaled_heads) == ((False, False, True, True), None)
    layer = tiny_model(position_embedding_type="nape", attention_scaling="asentmax").model.decoder.layers[0]
    assert (layer.encoder_attn.scaled_heads, layer.self_attn.scaled_heads) == (None, (False, False, True, True))
    told = tiny_model(cross_attention_positions="nape", attention_scaling="ssmax", attention_scaling_heads="nope")
    assert told.model.decoder.layers[0].encoder_attn.scaled_heads == (False, False, True, True)


def test_nape_softmax_matched_queries_scale_every_head_unless_told_otherwise():
    # n^(1 − α) undoes α's temperature, which ALiBi heads have as much as the others: without it a fresh model's ALiBi
    # heads would start n^(α − 1) times as sharp as softmax.
    model = tiny_decoder(position_embedding_type="nape", attention_scaling="softmax_matched")
    module = model.model.decoder.layers[0].self_attn
    assert module.scaled_heads is None
    alpha = module.alpha().double().detach()  # learned, a different α per head
    factor = module.query_scale(None, 100, torch.float64).flatten()
    torch.testing.assert_close(factor, 100.0 ** (1 - alpha))
    assert (factor[:2] < 1).all()  # the ALiBi heads are scaled too
    told = tiny_decoder(
        position_embedding_type="nape", attention_scaling="softmax_matched", attention_scaling_heads="nope"
    )
    assert told.model.decoder.layers[0].self_attn.scaled_heads == (False, False, True, True)


def test_ssmax_multiplies_queries_by_a_learned_s_times_log_n():
    model = tiny_decoder(attention_scaling="ssmax")
    module = model.model.decoder.layers[0].self_attn
    assert module.scale_gamma is None and 0.9 < float(module.scale_beta.mean()) < 1.1
    later = torch.ones(3, 3, dtype=torch.bool).triu(1)
    mask = torch.zeros(1, 1, 3, 3).masked_fill(later, float("-inf"))  # causal: 1, 2, 3 keys
    factor = module.query_scale(mask, 3, torch.float32)  # (1, H, 3, 1)
    expected = module.scale_beta.view(1, -1, 1, 1) * torch.log(torch.tensor([2.0, 3.0, 4.0])).view(1, 1, 3, 1)
    torch.testing.assert_close(factor, expected)


def test_per_token_scaling_comes_from_each_tokens_hidden_state_and_learns():
    model = tiny_decoder(attention_scaling="asentmax_per_token", attention_scaling_offset=0.5)
    module = model.model.decoder.layers[0].self_attn
    states = torch.randn(2, 3, 32, generator=torch.Generator().manual_seed(1))
    factor = module.query_scale(None, 10, torch.float32, query_hidden_states=states)  # (2, H, 3, 1)
    beta = torch.nn.functional.softplus(states @ module.scale_beta_proj.weight.T)  # (2, 3, H)
    gamma = 2 * torch.tanh(states @ module.scale_gamma_proj.weight.T)
    expected = 0.5 + beta * math.log(11) ** gamma
    torch.testing.assert_close(factor.squeeze(-1), expected.transpose(1, 2))
    tokens = torch.tensor([[BOS, 5, 9, 7, 11]])
    # A half-precision model projects in its own dtype and scales in float32, as its attention scores.
    half = tiny_decoder(attention_scaling="asentmax_per_token").to(torch.bfloat16)
    assert torch.isfinite(half(input_ids=tokens).logits.float()).all()
    model.train()
    model(input_ids=tokens, labels=tokens).loss.backward()
    assert module.scale_beta_proj.weight.grad.abs().sum() > 0
    assert module.scale_gamma_proj.weight.grad.abs().sum() > 0


def test_per_token_scaling_maps_with_a_bias_start_as_without_it_and_learn_it():
    plain = tiny_decoder(attention_scaling="asentmax_per_token")
    biased = tiny_decoder(attention_scaling="asentmax_per_token", attention_scaling_projection_bias=True)
    module = biased.model.decoder.layers[0].self_attn
    assert torch.equal(module.scale_beta_proj.bias, torch.zeros(4))  # b_β = b_γ = 0: the maps without a bias
    missing, unexpected = plain.load_state_dict(biased.state_dict(), strict=False)
    assert not missing and len(unexpected) == 4 and all(key.endswith("proj.bias") for key in unexpected)
    tokens = torch.tensor([[BOS, 5, 9, 7, 11]])
    torch.testing.assert_close(biased(input_ids=tokens).logits, plain(input_ids=tokens).logits, rtol=0, atol=0)

    with torch.no_grad():
        module.scale_beta_proj.bias.copy_(torch.tensor([0.5, -1.0, 2.0, 0.0]))
        module.scale_gamma_proj.bias.copy_(torch.tensor([-0.3, 0.2, 0.0, 1.0]))
    states = torch.randn(2, 3, 32, generator=torch.Generator().manual_seed(1))
    factor = module.query_scale(None, 10, torch.float32, query_hidden_states=states)  # (2, H, 3, 1)
    beta = torch.nn.functional.softplus(states @ module.scale_beta_proj.weight.T + module.scale_beta_proj.bias)
    gamma = 2 * torch.tanh(states @ module.scale_gamma_proj.weight.T + module.scale_gamma_proj.bias)
    torch.testing.assert_close(factor.squeeze(-1), (1.0 + beta * math.log(11) ** gamma).transpose(1, 2))
    biased.train()
    biased(input_ids=tokens, labels=tokens).loss.backward()
    assert module.scale_beta_proj.bias.grad.abs().sum() > 0 and module.scale_gamma_proj.bias.grad.abs().sum() > 0


def test_a_projection_bias_needs_per_token_scaling():
    with pytest.raises(StrictDataclassError, match="which no attention type has: set attention_scaling"):
        tiny_config(attention_scaling="asentmax", attention_scaling_projection_bias=True)
    with pytest.raises(StrictDataclassError, match="expected bool"):
        tiny_config(attention_scaling="asentmax_per_token", attention_scaling_projection_bias="yes")
    # One attention type's per-token scaling is enough, and only its maps get the bias.
    model = tiny_model(cross_attention_scaling="asentmax_per_token", attention_scaling_projection_bias=True)
    biases = [name for name, _ in model.named_parameters() if name.endswith("proj.bias") and "scale_" in name]
    assert biases and all(".encoder_attn." in name for name in biases)


def test_position_settings_are_checked_when_the_config_is_made():
    with pytest.raises(StrictDataclassError, match="`position_embedding_type` must be one of"):
        tiny_config(position_embedding_type="learned")
    with pytest.raises(StrictDataclassError, match="`rope_theta` must be a finite number > 1"):
        tiny_config(position_embedding_type="rope", rope_theta=0.5)
    with pytest.raises(StrictDataclassError, match="= 9 is odd"):
        tiny_config(position_embedding_type="rope", d_model=36, encoder_attention_heads=4, decoder_attention_heads=4)
    with pytest.raises(StrictDataclassError, match="at least 2 heads"):
        tiny_config(position_embedding_type="nape", encoder_attention_heads=1)
    with pytest.raises(StrictDataclassError, match="`encoder_alibi_directions` must be one of 'both', 'split'"):
        tiny_config(position_embedding_type="nape", encoder_alibi_directions="left")
    with pytest.raises(StrictDataclassError, match="position_embedding_type 'rope' does not have: use 'alibi'"):
        tiny_config(position_embedding_type="rope", encoder_alibi_directions="split")


@pytest.mark.slow
def test_decoder_only_folder_loads_and_generates_without_hf_entmax(tmp_path, monkeypatch):
    model = tiny_decoder(
        position_embedding_type="nape",
        attention_scaling="asentmax_per_token",
        attention_scaling_projection_bias=True,
        layer_style="gemma2",  # the reference's layers: RMSNorm, GeGLU
        activation_function="gelu_pytorch_tanh",
    )
    with torch.no_grad():  # biases that change what the model computes (they start at 0)
        for name, parameter in model.named_parameters():
            if name.endswith("proj.bias") and "scale_" in name:
                parameter.uniform_(-1.0, 1.0)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"] == {
        "AutoConfig": "configuration_adaptive_entmax_marian.AdaptiveEntmaxMarianConfig",
        "AutoModelForCausalLM": "modeling_adaptive_entmax_marian.AdaptiveEntmaxMarianForCausalLM",
    }
    assert (folder / "positions.py").is_file() and not (folder / "pytorch_model.bin").exists()
    assert type(AutoModelForCausalLM.from_pretrained(folder)) is AdaptiveEntmaxMarianForCausalLM
    # Without hf_entmax the folder's files run their PyTorch implementation: compare like with like, bit for bit.
    monkeypatch.setattr(entmax_module, "native_entmax", None)
    monkeypatch.setattr(modeling, "native_entmax_attention", None)
    prompt = torch.tensor([[BOS, 5, 9, 7]])
    expected = model.generate(prompt, max_new_tokens=6, do_sample=False, eos_token_id=None)
    results = tmp_path / "results.pt"
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["hf_entmax"] = None  # as if hf_entmax were not installed
        import torch
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules."), type(model)
        prompt = torch.tensor({prompt.tolist()!r})
        torch.save(model.generate(prompt, max_new_tokens=6, do_sample=False, eos_token_id=None), {str(results)!r})
        """
    )
    environment = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    completed = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert torch.equal(torch.load(results), expected)


def test_get_attention_scales_gives_ssmax_as_the_asentmax_factor_and_the_heads_it_scales():
    model = tiny_decoder(position_embedding_type="nape", attention_scaling="ssmax")
    scales = model.get_attention_scales()["decoder_self"]
    assert scales["method"] == "ssmax" and scales["offset"] == 0.0
    assert torch.equal(scales["gamma"], torch.ones(2, 4))
    assert scales["scaled"].tolist() == [[False, False, True, True]] * 2
    module = model.model.decoder.layers[1].self_attn
    factor = module.query_scale(None, 20, torch.float32).flatten()
    expected = scales["offset"] + scales["beta"][1] * math.log(21) ** scales["gamma"][1]
    torch.testing.assert_close(factor, torch.where(scales["scaled"][1], expected, torch.ones(4)))
    assert tiny_decoder(attention_scaling="asentmax_per_token").get_attention_scales() == {}


def test_weights_with_per_token_scaling_refuse_a_config_without_it(tmp_path):
    model = tiny_decoder(attention_scaling="asentmax_per_token")
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["attention_scaling"] = None  # edited after saving: the weights still hold the maps
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="back to 'asentmax_per_token'") as error:
        AdaptiveEntmaxMarianForCausalLM.from_pretrained(tmp_path)
    assert "scale_beta_proj.weight" in str(error.value)


def test_weights_with_projection_biases_refuse_a_config_without_them(tmp_path):
    model = tiny_decoder(attention_scaling="asentmax_per_token", attention_scaling_projection_bias=True)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["attention_scaling_projection_bias"] = False  # edited after saving: the weights still hold the biases
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="`attention_scaling_projection_bias` is False: loading would drop it"):
        AdaptiveEntmaxMarianForCausalLM.from_pretrained(tmp_path)


def test_translation_pipeline_takes_long_inputs_with_relative_positions(tokenizer, monkeypatch):
    model = tiny_model(vocab_size=len(tokenizer), position_embedding_type="alibi", max_position_embeddings=8)
    monkeypatch.setattr(tokenizer, "model_max_length", 10**30)  # no limit of its own, as a fresh tokenizer
    translator = TranslationPipeline(model=model, tokenizer=tokenizer)
    long_text = " ".join(["der kleine hund läuft"] * 10)
    assert len(tokenizer(long_text).input_ids) > 8
    assert translator(long_text, max_new_tokens=20)[0]["translation_text"] is not None
    sinusoidal = tiny_model(vocab_size=len(tokenizer), max_position_embeddings=8)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        TranslationPipeline(model=sinusoidal, tokenizer=tokenizer)(long_text)


def test_the_decoder_only_example_of_the_docs_runs_as_shown():
    """docs/model.md, "The decoder-only model": the example runs as written and trains on the target only."""
    page = (Path(__file__).parent.parent / "docs" / "model.md").read_text()
    example = next(block for block in re.findall(r"```python\n(.*?)```", page, re.S) if "ForCausalLM(config)" in block)
    namespace: dict = {}
    exec(example, namespace)
    assert torch.isfinite(namespace["loss"]) and namespace["loss"] > 0
    assert namespace["answer"].shape[0] == 1 and namespace["answer"].shape[1] > 5
    assert (namespace["labels"][0, :5] == -100).all()


@pytest.mark.parametrize(
    ("position_type", "cross_positions"), [("rope", "none"), ("sinusoidal", "none"), ("sinusoidal", "rope")]
)
def test_sparsefinder_collects_the_queries_and_keys_attention_sees(
    tokenizer, monkeypatch, position_type, cross_positions
):
    """The predictor's graph is computed from the queries and keys that reach the attention function (rotated under
    RoPE): training data for it must be the same ones."""
    from hf_entmax.sparsefinder.collect import collect_attention

    model = tiny_model(
        vocab_size=len(tokenizer),
        init_std=0.3,
        position_embedding_type=position_type,
        cross_attention_positions=cross_positions,
    )
    seen = {}
    original = modeling.entmax_attention_forward

    def recording(module, query, key, *args, **kwargs):
        seen.setdefault((module.attention_type, module.layer_idx), (query, key))
        return original(module, query, key, *args, **kwargs)

    monkeypatch.setattr(modeling, "entmax_attention_forward", recording)
    kinds = ("encoder_self", "decoder_self", "cross")
    sample = collect_attention(model, tokenizer, ["der kleine hund"], ["the small dog"], kinds, progress=False)
    for kind in kinds:
        batch = sample.layers[kind][0][0]
        query, key = seen[(kind, 0)]
        torch.testing.assert_close(batch.query, query.float())
        torch.testing.assert_close(batch.key, key.float())


@pytest.mark.parametrize(
    ("position_type", "directions"),
    [
        ("nape", "both"),
        ("alibi", "both"),
        ("nape", "split"),
        ("alibi", "split"),
        ("rope", "both"),
        ("sinusoidal", "both"),
    ],
)
def test_distance_only_positions_leave_the_encoder_blind_to_direction(position_type, directions):
    """docs/model.md's warning, kept true: with a bias of |i − j| alone (ALiBi, NAPE) a source and its mirror image
    (end-of-sentence token mirrored too) give the same outputs; split directions, RoPE and sinusoidal positions tell
    them apart."""
    model = tiny_model(
        vocab_size=64, init_std=0.5, position_embedding_type=position_type, encoder_alibi_directions=directions
    )
    source = torch.tensor([[5, 6, 7, 8, 9, 10, EOS]])
    decoder_input_ids = torch.tensor([[PAD, 11, 12, 13]])
    with torch.no_grad():
        logits = model(input_ids=source, decoder_input_ids=decoder_input_ids).logits
        mirrored = model(input_ids=source.flip(-1), decoder_input_ids=decoder_input_ids).logits
    if position_type in ("nape", "alibi") and directions == "both":
        # The same sums in another order: float32 rounding of logits of size ~10.
        torch.testing.assert_close(mirrored, logits, rtol=0, atol=1e-4)
    else:
        assert (mirrored - logits).abs().max() > 1.0
