"""ASEntmax (Vasylenko et al., 2026): a learned, length-dependent temperature per head, as a config option."""

import json
import math

import pytest
import torch
from helpers import AttentionHeads, padded_attention_inputs, tiny_config, tiny_model
from huggingface_hub.errors import StrictDataclassError
from torch.autograd import gradcheck
from transformers import AutoModelForSeq2SeqLM

from hf_entmax import AdaptiveEntmaxMarianConfig, AdaptiveEntmaxMarianMTModel
from hf_entmax.kernels.cpu import kernel_available
from hf_entmax.modeling import modeling_adaptive_entmax_marian as modeling
from hf_entmax.modeling.modeling_adaptive_entmax_marian import AdaptiveEntmaxMarianAttention, entmax_attention_forward


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"attention_scaling": "asentmx"},
            "`attention_scaling` must be one of 'none', 'asentmax', 'asentmax_per_token', 'ssmax', "
            "'softmax_matched' or None",
        ),
        ({"attention_scaling_heads": "some"}, "`attention_scaling_heads` must be one of 'all', 'nope' or None"),
        ({"attention_scaling_heads": "nope"}, "which only NAPE positions have"),
        ({"cross_attention_scaling": "temperature"}, "`cross_attention_scaling` must be one of"),
        ({"cross_attention_scaling": 1}, "cross_attention_scaling"),
        ({"attention_scaling_offset": float("nan")}, "`attention_scaling_offset` must be a finite number >= 0"),
        ({"attention_scaling_offset": -1.0}, "`attention_scaling_offset` must be a finite number >= 0, got -1.0"),
        ({"attention_scaling_offset": "1"}, "attention_scaling_offset"),
        ({"atention_scaling": "asentmax"}, "did you mean `attention_scaling`"),
    ],
)
def test_config_refuses_bad_scaling_fields(overrides, message):
    with pytest.raises(StrictDataclassError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tiny_config(**overrides)


def test_scaling_is_off_by_default_and_chosen_per_attention_type():
    assert AdaptiveEntmaxMarianConfig().scaling_method("cross") == "none"
    assert not any("scale_" in name for name in tiny_model().state_dict())
    model = tiny_model(attention_scaling="asentmax", cross_attention_scaling="none")
    scaled = {name.split(".")[-1] for name in model.state_dict() if "scale_" in name}
    assert scaled == {"scale_beta", "scale_gamma"}
    assert not any("encoder_attn.scale_" in name for name in model.state_dict())
    assert set(model.get_attention_scales()) == {"encoder_self", "decoder_self"}
    only_cross = tiny_model(cross_attention_scaling="asentmax").get_attention_scales()
    assert set(only_cross) == {"cross"} and only_cross["cross"]["beta"].shape == (2, 4)
    assert tiny_model().get_attention_scales() == {}


def test_parameters_start_as_the_reference_does():
    """β ~ U(0.1, 1) and γ ~ N(0, 0.1²) (32 heads of each here: all within the support, |γ| well inside 6σ)."""
    model = tiny_model(attention_scaling="asentmax", attention_scaling_offset=0.5)
    scales = model.get_attention_scales()
    beta = torch.cat([scales[kind]["beta"].flatten() for kind in scales])
    gamma = torch.cat([scales[kind]["gamma"].flatten() for kind in scales])
    assert ((beta >= 0.1) & (beta <= 1.0)).all() and beta.std() > 0
    assert (gamma.abs() < 0.6).all() and gamma.std() > 0
    assert all(scales[kind]["offset"] == 0.5 for kind in scales)


def recorded_query_scales(model: AdaptiveEntmaxMarianMTModel, monkeypatch) -> dict[str, list[torch.Tensor]]:
    """Every factor each attention type applies in the next forward passes, by attention type, in call order."""
    recorded: dict[str, list[torch.Tensor]] = {"encoder_self": [], "decoder_self": [], "cross": []}
    query_scale = AdaptiveEntmaxMarianAttention.query_scale

    def recording(module, mask, key_len, dtype, query_hidden_states=None):
        scale = query_scale(module, mask, key_len, dtype, query_hidden_states)
        recorded[module.attention_type].append((module, scale))
        return scale

    monkeypatch.setattr(AdaptiveEntmaxMarianAttention, "query_scale", recording)
    return recorded


def expected_scale(module: AdaptiveEntmaxMarianAttention, visible_keys: torch.Tensor) -> torch.Tensor:
    """δ + β_h · log(n + 1) ** γ_h for ``visible_keys`` n of shape ``(batch, query_len)``: ``(batch, H, Lq, 1)``."""
    log_n = torch.log(visible_keys.double() + 1)[:, None, :, None]
    beta = module.scale_beta.detach().double()[None, :, None, None]
    gamma = module.scale_gamma.detach().double()[None, :, None, None]
    return module.scale_offset + beta * log_n**gamma


def test_each_query_is_scaled_by_the_number_of_keys_it_may_attend_to(batch, monkeypatch):
    """Encoder self- and cross-attention: the sentence's real tokens; decoder self-attention: the causal prefix."""
    model = tiny_model(attention_scaling="asentmax").double()
    recorded = recorded_query_scales(model, monkeypatch)
    model(**batch)
    source_lengths = batch["attention_mask"].sum(-1)  # (2,): 6 and 4
    target_len = batch["decoder_input_ids"].shape[1]
    visible = {
        "encoder_self": source_lengths[:, None].expand(-1, batch["input_ids"].shape[1]),
        "cross": source_lengths[:, None].expand(-1, target_len),
        "decoder_self": torch.arange(1, target_len + 1).expand(2, -1),
    }
    for kind, calls in recorded.items():
        assert len(calls) == 2  # one per layer
        for module, scale in calls:
            torch.testing.assert_close(scale.expand(2, -1, -1, -1), expected_scale(module, visible[kind]))


@pytest.mark.parametrize("cache_implementation", [None, "static"])
def test_cached_decoding_scales_each_new_query_by_its_growing_prefix(batch, monkeypatch, cache_implementation):
    """A static cache's keys are its whole length (6 here), masked beyond the prefix: n comes from the mask."""
    model = tiny_model(attention_scaling="asentmax", init_std=0.5).double()
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    recorded = recorded_query_scales(model, monkeypatch)
    generated = model.generate(
        **inputs,
        max_new_tokens=6,
        min_new_tokens=6,
        do_sample=False,
        use_cache=True,
        cache_implementation=cache_implementation,
    )
    steps = generated.shape[1] - 1
    first_layer = [scale for module, scale in recorded["decoder_self"] if module.layer_idx == 0]
    assert len(first_layer) == steps
    module = next(module for module, _ in recorded["decoder_self"] if module.layer_idx == 0)
    for step, scale in enumerate(first_layer):  # one query per step, seeing step + 1 tokens
        torch.testing.assert_close(scale.expand(2, -1, -1, -1), expected_scale(module, torch.full((2, 1), step + 1)))


def test_zero_beta_with_offset_one_is_the_model_without_scaling(batch):
    """β = 0 makes the factor exactly δ = 1: the scaled model computes what the unscaled one does."""
    plain = tiny_model(init_std=0.5)
    scaled = AdaptiveEntmaxMarianMTModel(tiny_config(attention_scaling="asentmax")).eval()
    missing, unexpected = scaled.load_state_dict(plain.state_dict(), strict=False)
    assert unexpected == [] and {name.split(".")[-1] for name in missing} == {"scale_beta", "scale_gamma"}
    with torch.no_grad():
        for module in scaled.modules():
            if isinstance(module, AdaptiveEntmaxMarianAttention):
                module.scale_beta.zero_()
    # query × (scaling × 1.0) against query × scaling: the same float32 products
    torch.testing.assert_close(scaled(**batch).logits, plain(**batch).logits, rtol=0, atol=0)
    # and with β > 0 the function changes (the scaling is not a no-op)
    with torch.no_grad():
        for module in scaled.modules():
            if isinstance(module, AdaptiveEntmaxMarianAttention):
                module.scale_beta.fill_(1.0)
    assert not torch.allclose(scaled(**batch).logits, plain(**batch).logits)


def test_gradcheck_of_the_scaling_parameters_through_attention(attention_path):
    """float64 gradients of the output w.r.t. β, γ, α and the query, with a padding mask (n differs by row)."""
    generator = torch.Generator().manual_seed(0)
    query, key, value, mask = padded_attention_inputs(generator, heads=3)
    beta = (0.1 + 0.9 * torch.rand(3, generator=generator, dtype=torch.float64)).requires_grad_()
    gamma = (0.1 * torch.randn(3, generator=generator, dtype=torch.float64)).requires_grad_()
    alpha = torch.tensor([1.3, 1.5, 1.8], dtype=torch.float64, requires_grad=True)

    def attention(beta, gamma, alpha, query):
        heads = AttentionHeads(alpha, "asentmax", beta=beta, gamma=gamma)
        output, _ = entmax_attention_forward(heads, query, key, value, mask)
        return output

    assert gradcheck(attention, (beta, gamma, alpha, query.requires_grad_()))


def test_fused_and_composed_paths_agree_with_scaling(batch, monkeypatch):
    if not kernel_available():
        pytest.skip("the native kernel is not available here")
    model = tiny_model(init_std=0.5, attention_scaling="asentmax").double()
    fused = model(**batch).logits
    monkeypatch.setattr(modeling, "native_entmax_attention", None)
    # float64 throughout: the two paths differ by the rounding of different summation orders
    torch.testing.assert_close(model(**batch).logits, fused, rtol=1e-10, atol=1e-10)


def test_scales_are_learned(batch):
    model = tiny_model(init_std=0.5, attention_scaling="asentmax").train()
    before = model.get_attention_scales()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model(**batch, labels=batch["decoder_input_ids"]).loss.backward()
    assert all(module.scale_beta.grad.abs().sum() > 0 for module in model.modules() if hasattr(module, "scale_beta"))
    optimizer.step()
    after = model.get_attention_scales()
    for kind in before:
        assert not torch.equal(before[kind]["beta"], after[kind]["beta"])
        assert not torch.equal(before[kind]["gamma"], after[kind]["gamma"])


def test_saved_folder_keeps_the_scaling_and_loads_through_the_auto_classes(batch, tmp_path):
    model = tiny_model(init_std=0.5, attention_scaling="asentmax", cross_attention_scaling="none")
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["attention_scaling"] == "asentmax" and config["cross_attention_scaling"] == "none"
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, trust_remote_code=True).eval()
    torch.testing.assert_close(loaded(**batch).logits, model(**batch).logits, rtol=0, atol=0)
    scales, loaded_scales = model.get_attention_scales(), loaded.get_attention_scales()
    assert set(loaded_scales) == {"encoder_self", "decoder_self"}
    for kind in scales:
        assert torch.equal(scales[kind]["beta"], loaded_scales[kind]["beta"])
        assert torch.equal(scales[kind]["gamma"], loaded_scales[kind]["gamma"])


def test_factor_grows_with_the_number_of_keys_for_positive_gamma():
    """The point of the method: with γ > 0 a head sharpens (a larger factor) as n grows, with γ < 0 it softens."""
    module = tiny_model(attention_scaling="asentmax").model.encoder.layers[0].self_attn
    with torch.no_grad():
        module.scale_beta.fill_(0.5)
        module.scale_gamma.copy_(torch.tensor([0.5, 0.0, -0.5, 1.0]))
    lengths = [1, 16, 256]
    factors = []
    for n in lengths:
        mask = torch.zeros(1, 1, 1, n)
        factors.append(module.query_scale(mask, n, torch.float32).flatten())
    factors = torch.stack(factors)  # (lengths, heads)
    assert (factors[1:, 0] > factors[:-1, 0]).all() and (factors[1:, 3] > factors[:-1, 3]).all()
    assert torch.allclose(factors[:, 1], torch.full((3,), 1.5))  # γ = 0: δ + β
    assert (factors[1:, 2] < factors[:-1, 2]).all()
    assert math.isclose(factors[0, 0].item(), 1 + 0.5 * math.log(2) ** 0.5, rel_tol=1e-6)
