import pytest
import torch
from helpers import tiny_config, tiny_model
from huggingface_hub.errors import StrictDataclassClassValidationError
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, MarianConfig, MarianMTModel

from hf_entmax import (
    AdaptiveEntmaxMarianConfig,
    AdaptiveEntmaxMarianModel,
    AdaptiveEntmaxMarianMTModel,
    entmax,
)
from hf_entmax.modeling import modeling_adaptive_entmax_marian as modeling
from hf_entmax.modeling.modeling_adaptive_entmax_marian import AdaptiveEntmaxMarianAttention


ALPHA_KEYS = {"encoder_self", "decoder_self", "cross"}


def attention_modules(model):
    return [module for module in model.modules() if isinstance(module, AdaptiveEntmaxMarianAttention)]


# --- configuration ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"alpha_init": 2.5}, "`alpha_init` must be a number in \\[1, 2\\] or 'random', got 2.5"),
        ({"alpha_init": "uniform"}, "`alpha_init` must be a number in \\[1, 2\\] or 'random', got 'uniform'"),
        ({"cross_alpha_init": 0.9}, "`cross_alpha_init` must be a number in \\[1, 2\\]"),
        ({"learn_alpha": False}, "'random' needs a learned α"),
        ({"alpha_min": 0.5}, "`alpha_min` and `alpha_max` must satisfy"),
        ({"alpha_min": 1.5, "alpha_max": 1.2}, "`alpha_min` and `alpha_max` must satisfy"),
        ({"alpha_init": 1.0}, "lives in \\[alpha_min, alpha_max\\]"),
        ({"alph_init": 1.2}, "unknown field `alph_init`: did you mean `alpha_init`\\?"),
        ({"encoder_layers": -1}, "`encoder_layers` must be a positive whole number, got -1"),
        ({"decoder_attention_heads": 0}, "`decoder_attention_heads` must be a positive whole number, got 0"),
        ({"d_model": 30}, "`d_model` \\(30\\) must be divisible by `encoder_attention_heads` \\(4\\)"),
        ({"pad_token_id": 64}, "`pad_token_id` \\(64\\) must be a token id below `vocab_size` \\(64\\)"),
    ],
)
def test_config_rejects_invalid_settings_naming_the_field(overrides, message):
    with pytest.raises(StrictDataclassClassValidationError, match=message):
        tiny_config(**overrides)


def test_config_per_type_overrides_fall_back_to_global_settings():
    config = tiny_config(alpha_init=1.5, cross_alpha_init=1.0, cross_learn_alpha=False)
    assert config.alpha_settings("encoder_self").init == 1.5
    assert config.alpha_settings("encoder_self").learn
    assert config.alpha_settings("cross").init == 1.0
    assert not config.alpha_settings("cross").learn
    with pytest.raises(ValueError, match="attention type"):
        config.alpha_settings("self")


def test_config_round_trips_through_json(tmp_path):
    config = tiny_config(alpha_init=1.5, decoder_self_learn_alpha=False, alpha_max=1.9)
    config.save_pretrained(tmp_path)
    reloaded = AdaptiveEntmaxMarianConfig.from_pretrained(tmp_path)
    for kind in ALPHA_KEYS:
        assert reloaded.alpha_settings(kind) == config.alpha_settings(kind)


# --- α parameters ----------------------------------------------------------------------------------


def test_every_attention_module_holds_one_alpha_logit_per_head():
    model = tiny_model()
    modules = attention_modules(model)
    assert len(modules) == 2 + 2 * 2  # encoder self, then decoder self and cross per layer
    for module in modules:
        assert module.alpha_logits.shape == (4,)
        assert module.alpha_logits.requires_grad


def test_get_alphas_shapes_bounds_and_random_init_mean():
    alphas = tiny_model(
        encoder_layers=2, decoder_layers=1, encoder_attention_heads=8, decoder_attention_heads=4
    ).get_alphas()
    assert set(alphas) == ALPHA_KEYS
    assert alphas["encoder_self"].shape == (2, 8)
    assert alphas["decoder_self"].shape == (1, 4)
    assert alphas["cross"].shape == (1, 4)
    every_alpha = torch.cat([alpha.flatten() for alpha in alphas.values()])
    assert every_alpha.min() >= 1.01 and every_alpha.max() <= 2.0
    # Random logits ~ N(0, 1): α has mean 1.5; distinct heads get distinct values.
    many = torch.cat(
        [a.flatten() for a in tiny_model(encoder_attention_heads=16, encoder_layers=2).get_alphas().values()]
    )
    assert abs(many.mean().item() - 1.5) < 0.1
    assert many.unique().numel() == many.numel()


def test_numeric_alpha_init_is_exact_and_per_type():
    model = tiny_model(alpha_init=1.3, cross_alpha_init=1.8)
    alphas = model.get_alphas()
    torch.testing.assert_close(alphas["encoder_self"], torch.full((2, 4), 1.3))
    torch.testing.assert_close(alphas["decoder_self"], torch.full((2, 4), 1.3))
    torch.testing.assert_close(alphas["cross"], torch.full((2, 4), 1.8))


def test_fixed_alpha_is_not_a_parameter():
    model = tiny_model(alpha_init=1.5, learn_alpha=False, cross_alpha_init=2.0)
    assert not [name for name, _ in model.named_parameters() if "alpha" in name]
    assert not [name for name in model.state_dict() if "alpha" in name]
    alphas = model.get_alphas()
    assert torch.equal(alphas["encoder_self"], torch.full((2, 4), 1.5))
    assert torch.equal(alphas["cross"], torch.full((2, 4), 2.0))


def test_alpha_is_recomputed_from_logits_every_forward(batch):
    model = tiny_model(init_std=0.5)
    before = model(**batch).logits
    with torch.no_grad():
        for module in attention_modules(model):
            module.alpha_logits.fill_(3.0)
    after = model(**batch).logits
    assert not torch.allclose(before, after)
    assert torch.allclose(
        model.get_alphas()["cross"], torch.full((2, 4), 1.0 + torch.sigmoid(torch.tensor(3.0)).item())
    )


def test_learned_alpha_is_clamped_to_configured_bounds():
    model = tiny_model(alpha_min=1.2, alpha_max=1.6)
    with torch.no_grad():
        modules = attention_modules(model)
        modules[0].alpha_logits.fill_(-10.0)
        modules[1].alpha_logits.fill_(10.0)
    alphas = model.get_alphas()["encoder_self"]
    assert torch.allclose(alphas[0], torch.full((4,), 1.2))
    assert torch.allclose(alphas[1], torch.full((4,), 1.6))


def test_loss_backpropagates_to_every_alpha_logit(batch):
    model = tiny_model(init_std=0.3).train()
    labels = batch["decoder_input_ids"][:, 1:].contiguous()
    loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels).loss
    loss.backward()
    for module in attention_modules(model):
        assert module.alpha_logits.grad is not None
        assert torch.isfinite(module.alpha_logits.grad).all()
        assert module.alpha_logits.grad.abs().sum() > 0


# --- attention behaviour ---------------------------------------------------------------------------


def test_fixed_alpha_one_is_exactly_marian_softmax(batch):
    """α = 1 must compute the same function as MarianMTModel with the same weights."""
    model = tiny_model(alpha_init=1.0, learn_alpha=False, init_std=0.3)
    marian_config = MarianConfig(
        **{key: value for key, value in model.config.to_dict().items() if key in MarianConfig.__dataclass_fields__}
    )
    for implementation in ("eager", "sdpa"):
        marian_config._attn_implementation = implementation
        marian = MarianMTModel(marian_config).eval()
        marian.load_state_dict(model.state_dict())
        torch.testing.assert_close(model(**batch).logits, marian(**batch).logits, rtol=1e-5, atol=1e-5)
    greedy = model.generate(batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=6)
    marian_greedy = marian.generate(batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=6)
    assert torch.equal(greedy, marian_greedy)


def test_output_attentions_are_sparse_probabilities(batch):
    model = tiny_model(alpha_init=1.8, init_std=0.5)
    out = model(**batch, output_attentions=True)
    groups = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
    for name, attentions in groups.items():
        assert len(attentions) == 2, name
        for probabilities in attentions:
            assert torch.allclose(probabilities.sum(-1), torch.ones(()), atol=1e-5), name
            assert (probabilities == 0).any(), f"{name} attention has no exact zeros"
    # Padding (the last two source positions of the second sentence) gets exactly zero.
    assert torch.all(out.encoder_attentions[0][1, :, :, 4:] == 0)
    assert torch.all(out.cross_attentions[0][1, :, :, 4:] == 0)
    # The decoder is causal: no query attends to a later position.
    future = torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1)
    assert torch.all(out.decoder_attentions[0][..., future] == 0)


def test_attention_probabilities_match_entmax_of_the_scores(batch):
    """The registered attention function is α-entmax of (q/√d)kᵀ with each head's own α."""
    model = tiny_model(init_std=0.5)
    captured = {}
    layer = model.model.encoder.layers[0].self_attn
    layer.q_proj.register_forward_hook(lambda module, args, output: captured.update(query=output))
    layer.k_proj.register_forward_hook(lambda module, args, output: captured.update(key=output))
    out = model(**batch, output_attentions=True)
    batch_size, length, _ = captured["query"].shape
    query = captured["query"].view(batch_size, length, 4, 8).transpose(1, 2)
    key = captured["key"].view(batch_size, length, 4, 8).transpose(1, 2)
    scores = (query / 8**0.5) @ key.transpose(2, 3)
    scores = scores.masked_fill(batch["attention_mask"][:, None, None, :] == 0, float("-inf"))
    expected = entmax(scores, layer.alpha().view(1, 4, 1, 1))
    torch.testing.assert_close(out.encoder_attentions[0], expected)


@pytest.mark.parametrize("path", ["fused kernel", "composed"])
def test_attention_dropout_in_training_returns_the_weights_that_multiplied_the_values(batch, monkeypatch, path):
    """Training drops attention weights with probability p and multiplies the others by 1 / (1 − p), and the model
    returns those weights, as Marian's eager attention does; a seed reproduces them; evaluation drops none. The first
    encoder layer sees the same inputs in both modes (no other dropout here), so its training weights are its
    evaluation probabilities, each either dropped or doubled (p = 1/2), and about half of the support is kept (within
    6σ, σ² = 1/(4n))."""
    if path == "composed":
        monkeypatch.setattr(modeling, "native_entmax_attention", None)
    model = tiny_model(init_std=0.5, alpha_init=1.3, attention_dropout=0.5, dropout=0.0)
    probabilities = model(**batch, output_attentions=True).encoder_attentions[0]
    torch.manual_seed(0)
    weights = model.train()(**batch, output_attentions=True).encoder_attentions[0]
    kept = weights != 0
    assert torch.equal(weights[kept], 2 * probabilities[kept])
    support = probabilities > 0
    assert abs(kept[support].double().mean().item() - 0.5) < 6 * (0.25 / support.sum().item()) ** 0.5
    torch.manual_seed(0)
    assert torch.equal(model(**batch, output_attentions=True).encoder_attentions[0], weights)
    assert torch.equal(model.eval()(**batch, output_attentions=True).encoder_attentions[0], probabilities)


def test_padding_does_not_change_the_result(batch):
    model = tiny_model(init_std=0.3)
    padded = model(**batch).logits[1]
    alone = model(input_ids=batch["input_ids"][1:, :4], decoder_input_ids=batch["decoder_input_ids"][1:]).logits[0]
    torch.testing.assert_close(padded, alone, rtol=1e-5, atol=1e-5)


def test_half_precision_model_computes_attention_in_float32(batch):
    model = tiny_model(init_std=0.5, alpha_init=1.5)
    reference = model(**batch).logits
    out = model.to(torch.bfloat16)(**batch, output_attentions=True)
    assert out.logits.dtype == torch.bfloat16
    assert torch.isfinite(out.logits).all()
    assert out.encoder_attentions[0].dtype == torch.bfloat16
    # bf16 has 8 bits of mantissa; the model's function is unchanged up to that rounding.
    assert (out.logits.float() - reference).abs().max() < 0.1 * reference.abs().max()


# --- generation ------------------------------------------------------------------------------------


@pytest.mark.parametrize("attention_scaling", [None, "asentmax"])
@pytest.mark.parametrize("alpha_init", ["random", 1.5])
def test_cached_and_uncached_greedy_decoding_agree(batch, alpha_init, attention_scaling):
    model = tiny_model(init_std=0.5, alpha_init=alpha_init, attention_scaling=attention_scaling)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    cached = model.generate(**inputs, max_new_tokens=12, do_sample=False, use_cache=True)
    uncached = model.generate(**inputs, max_new_tokens=12, do_sample=False, use_cache=False)
    assert cached.shape[1] > 3
    assert torch.equal(cached, uncached)


def test_beam_search_returns_the_best_of_its_beams(batch):
    model = tiny_model(init_std=0.5)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    out = model.generate(
        **inputs,
        max_new_tokens=8,
        num_beams=4,
        num_return_sequences=4,
        output_scores=True,
        return_dict_in_generate=True,
    )
    assert out.sequences.shape[0] == 8
    scores = out.sequences_scores.view(2, 4)
    assert torch.all(scores[:, :-1] >= scores[:, 1:])  # beams come back best first
    single = model.generate(**inputs, max_new_tokens=8, num_beams=4)
    assert torch.equal(single[:, : out.sequences.shape[1]], out.sequences.view(2, 4, -1)[:, 0, : single.shape[1]])


# --- registration and saving -----------------------------------------------------------------------


def test_auto_classes_resolve_to_adaptive_entmax_marian(tmp_path):
    model = tiny_model()
    model.save_pretrained(tmp_path)
    assert isinstance(AutoConfig.from_pretrained(tmp_path), AdaptiveEntmaxMarianConfig)
    assert type(AutoModelForSeq2SeqLM.from_pretrained(tmp_path)) is AdaptiveEntmaxMarianMTModel
    assert type(AutoModel.from_config(model.config)) is AdaptiveEntmaxMarianModel


def test_bare_from_pretrained_restores_entmax_attention(tmp_path, batch):
    model = tiny_model(init_std=0.5, alpha_init=1.9)
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    assert not list(tmp_path.glob("*.bin"))
    reloaded = AdaptiveEntmaxMarianMTModel.from_pretrained(tmp_path).eval()
    out = reloaded(**batch, output_attentions=True)
    torch.testing.assert_close(out.logits, model(**batch).logits, rtol=0, atol=0)
    assert (out.encoder_attentions[0][0] == 0).any()
    torch.testing.assert_close(reloaded.get_alphas()["cross"], model.get_alphas()["cross"])


def test_converting_marian_weights_initialises_missing_alpha_logits(tmp_path):
    """Loading a softmax Marian checkpoint: α logits are absent and come from the config's init."""
    marian = MarianMTModel(MarianConfig(**{**tiny_config().to_dict(), "model_type": "marian"}))
    marian.save_pretrained(tmp_path)
    config = tiny_config(alpha_init=1.25)
    model = AdaptiveEntmaxMarianMTModel.from_pretrained(tmp_path, config=config)
    torch.testing.assert_close(model.get_alphas()["encoder_self"], torch.full((2, 4), 1.25))
    torch.testing.assert_close(model.lm_head.weight, marian.lm_head.weight)
