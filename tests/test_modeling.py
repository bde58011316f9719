import json
import os
import stat

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
        ({"pad_token_id": 64}, "`pad_token_id` must be a token id below `vocab_size` \\(64\\), got 64"),
        ({"dropout": 1.5}, "`dropout` must be a probability in \\[0, 1\\), got 1.5"),
        ({"attention_dropout": -0.5}, "`attention_dropout` must be a probability in \\[0, 1\\), got -0.5"),
        ({"activation_dropout": float("nan")}, "`activation_dropout` must be a probability in \\[0, 1\\), got nan"),
        ({"encoder_layerdrop": 2}, "`encoder_layerdrop` must be a probability in \\[0, 1\\), got 2"),
        ({"activation_function": "foo"}, "`activation_function` must be one of transformers' activations \\(.*gelu"),
        ({"init_std": -1.0}, "`init_std` must be a finite number > 0, got -1.0"),
        ({"max_position_embeddings": 1}, "`max_position_embeddings` must be at least 2"),
        ({"eos_token_id": 64}, "`eos_token_id` must be a token id below `vocab_size` \\(64\\), got 64"),
        ({"eos_token_id": [1, 70]}, "`eos_token_id` must be a token id below `vocab_size` \\(64\\), got \\[1, 70\\]"),
        ({"forced_eos_token_id": -1}, "`forced_eos_token_id` must be a token id below `vocab_size`"),
        ({"decoder_vocab_size": 80}, "`decoder_vocab_size` \\(80\\) must equal `vocab_size` \\(64\\) when `share_enc"),
        (
            {"share_encoder_decoder_embeddings": False, "decoder_vocab_size": 32, "decoder_start_token_id": 40},
            "`decoder_start_token_id` must be a token id below `decoder_vocab_size` \\(32\\), got 40",
        ),
    ],
)
def test_config_rejects_invalid_settings_naming_the_field(overrides, message):
    with pytest.raises(StrictDataclassClassValidationError, match=message):
        tiny_config(**overrides)


def test_config_with_separate_vocabularies_checks_each_token_against_its_vocabulary():
    """Without shared embeddings the target vocabulary is `decoder_vocab_size`: target tokens are checked against it,
    and the padding token (of both sides) against the smaller of the two."""
    config = tiny_config(share_encoder_decoder_embeddings=False, decoder_vocab_size=32, eos_token_id=31)
    model = AdaptiveEntmaxMarianMTModel(config)
    assert model.lm_head.weight.shape == (32, 32) and model.model.encoder.embed_tokens.weight.shape == (64, 32)
    with pytest.raises(StrictDataclassClassValidationError, match="`vocab_size` and `decoder_vocab_size` \\(32\\)"):
        tiny_config(share_encoder_decoder_embeddings=False, decoder_vocab_size=32, pad_token_id=40)


def test_config_takes_a_marian_config_as_convert_does():
    """`hf-entmax convert` builds the config from a MarianMT config.json's fields: Marian's own values (tokens at the
    end of the vocabulary, a separate decoder vocabulary size equal to the shared one, swish) stay valid."""
    marian = MarianConfig(
        vocab_size=101, decoder_vocab_size=101, d_model=32, encoder_attention_heads=4, decoder_attention_heads=4,
        activation_function="swish", pad_token_id=100, decoder_start_token_id=100, eos_token_id=0, bos_token_id=0,
        forced_eos_token_id=0, max_position_embeddings=512,
    )  # fmt: skip
    fields = {
        key: value for key, value in marian.to_dict().items() if key in AdaptiveEntmaxMarianConfig.__dataclass_fields__
    }
    config = AdaptiveEntmaxMarianConfig(**fields, alpha_init=1.0, learn_alpha=False)
    assert config.decoder_vocab_size == 101 and config.activation_function == "swish"


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


def test_loss_is_marians_mean_over_the_target_tokens(batch):
    """The loss is the mean cross-entropy of the tokens whose label is not −100, as Marian's: equal to Marian's own
    loss on the same weights, and padding labels (−100) change nothing."""
    model = tiny_model(init_std=0.3)
    labels = batch["decoder_input_ids"][:, 1:].contiguous()
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    loss = model(**inputs, labels=labels).loss
    assert torch.equal(loss, MarianMTModel.forward(model, **inputs, labels=labels).loss)
    padded = torch.cat([labels, torch.full((2, 2), -100)], dim=1)
    decoder_input_ids = torch.cat([batch["decoder_input_ids"], torch.zeros((2, 2), dtype=torch.long)], dim=1)
    logits = model(**inputs, decoder_input_ids=decoder_input_ids[:, :-1]).logits
    expected = torch.nn.functional.cross_entropy(logits[:, :3].reshape(-1, 64), labels.reshape(-1))
    torch.testing.assert_close(
        model(**inputs, decoder_input_ids=decoder_input_ids[:, :-1], labels=padded).loss, expected
    )


def test_labels_without_target_tokens_give_a_loss_of_zero_with_zero_gradients(batch):
    """A batch whose labels are all −100 has no token to learn from: its loss is 0 and every gradient is 0 (a mean
    would be 0 / 0 = NaN, and one such batch would turn every weight into NaN at the next step)."""
    model = tiny_model(init_std=0.3).train()
    labels = torch.full_like(batch["decoder_input_ids"], -100)
    output = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels)
    assert output.loss.item() == 0.0
    output.loss.backward()
    gradients = [parameter.grad for parameter in model.parameters() if parameter.grad is not None]
    assert gradients and all(torch.equal(gradient, torch.zeros_like(gradient)) for gradient in gradients)
    # As a tuple, the loss comes first, as Marian's.
    as_tuple = model(input_ids=batch["input_ids"], labels=labels, return_dict=False)
    assert as_tuple[0].item() == 0.0 and as_tuple[1].shape == (2, 4, 64)


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


def test_attention_weights_keep_their_gradient(batch, attention_path):
    """transformers' `test_retain_grad_hidden_states_attentions` on both paths, in training (attention dropout on)
    and evaluation: with `output_attentions`, the first layer's attention weights of each kind are in the output's
    graph, so a gradient of one output value reaches them (gradient-based attribution needs it)."""
    model = tiny_model(init_std=0.5, attention_dropout=0.1)
    model.config.output_hidden_states = True
    model.config.output_attentions = True
    for mode in (model.train, model.eval):
        mode()
        outputs = model(**batch)
        retained = [
            outputs.encoder_hidden_states[0],
            outputs.encoder_attentions[0],
            outputs.decoder_hidden_states[0],
            outputs.decoder_attentions[0],
            outputs.cross_attentions[0],
        ]
        for tensor in retained:
            tensor.retain_grad()
        outputs[0].flatten()[0].backward(retain_graph=True)
        assert all(tensor.grad is not None for tensor in retained), mode.__name__
        # That logit is the padding token's, a constant (its tied embedding is zeros); token 5's, at the first
        # position, depends on the first query's weights in every layer.
        outputs.logits[0, 0, 5].backward()
        assert outputs.cross_attentions[0].grad[0, :, 0].abs().sum() > 0


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


def test_beam_search_leaves_the_source_cache_in_place_and_finds_the_same_beams(batch, monkeypatch):
    """Beam search reorders the decoder's self-attention cache only: cross-attention's holds the encoder states, the
    same in every beam of an input, so transformers' default (reordering it too) finds the same beams and scores."""
    model = tiny_model(seed=3, init_std=1.0)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    settings = dict(max_new_tokens=10, num_beams=4, num_return_sequences=4, output_scores=True)
    kept = model.generate(**inputs, **settings, return_dict_in_generate=True)
    monkeypatch.delattr(AdaptiveEntmaxMarianMTModel, "_reorder_cache")
    reordered = model.generate(**inputs, **settings, return_dict_in_generate=True)
    assert torch.equal(kept.sequences, reordered.sequences)
    assert torch.equal(kept.sequences_scores, reordered.sequences_scores)
    # The beams did move: the search reordered the self-attention cache, not an identity.
    assert (kept.beam_indices[:, 1:] != kept.beam_indices[:, :1]).any()


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


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_saved_weights_get_the_mode_of_the_folders_other_files(tmp_path):
    # safetensors 0.8 alone writes them private (0600): other users could read the config but not the weights.
    model = tiny_model()
    umask = os.umask(0o022)
    try:
        model.save_pretrained(tmp_path / "whole")
        model.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    finally:
        os.umask(umask)
    for folder, files in (("whole", 1), ("sharded", 2)):
        weights = sorted((tmp_path / folder).glob("*.safetensors"))
        assert len(weights) >= files
        modes = {
            path.name: stat.S_IMODE(path.stat().st_mode) for path in [tmp_path / folder / "config.json", *weights]
        }
        assert set(modes.values()) == {0o644}, modes
    # Saved again over a file the user made private to a group: it keeps that mode, as a plain write would.
    (tmp_path / "whole" / "model.safetensors").chmod(0o640)
    model.save_pretrained(tmp_path / "whole")
    assert stat.S_IMODE((tmp_path / "whole" / "model.safetensors").stat().st_mode) == 0o640


def test_converting_marian_weights_initialises_missing_alpha_logits(tmp_path):
    """Loading a softmax Marian checkpoint: α logits are absent and come from the config's init."""
    marian = MarianMTModel(MarianConfig(**{**tiny_config().to_dict(), "model_type": "marian"}))
    marian.save_pretrained(tmp_path)
    config = tiny_config(alpha_init=1.25)
    model = AdaptiveEntmaxMarianMTModel.from_pretrained(tmp_path, config=config)
    torch.testing.assert_close(model.get_alphas()["encoder_self"], torch.full((2, 4), 1.25))
    torch.testing.assert_close(model.lm_head.weight, marian.lm_head.weight)


# --- the load-time check ----------------------------------------------------------------------------


def saved_folder(tmp_path, **overrides):
    """A tiny model saved to ``tmp_path`` with its config.json changed by ``overrides`` afterwards."""
    model = tiny_model(init_std=0.5, **{"alpha_init": 1.5, **overrides.pop("model", {})})
    model.save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **overrides}))
    return model


def set_alpha_logits(model, alpha):
    with torch.no_grad():
        for module in attention_modules(model):
            module.alpha_logits.fill_(modeling.alpha_to_logit(alpha))


def test_a_learned_alpha_just_past_its_bound_loads_one_moved_later_is_refused(tmp_path):
    """Training stops α at the clamp while its logit may drift a little further: such a model loads. A bound moved
    after training beyond `ALPHA_BOUND_TOLERANCE` would clamp heads to a value they never had: refused."""
    model = tiny_model(alpha_init=1.5, alpha_min=1.2)
    set_alpha_logits(model, 1.2 - modeling.ALPHA_BOUND_TOLERANCE / 2)
    model.save_pretrained(tmp_path)
    reloaded = AdaptiveEntmaxMarianMTModel.from_pretrained(tmp_path)
    torch.testing.assert_close(reloaded.get_alphas()["cross"], torch.full((2, 4), 1.2))
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "alpha_min": 1.3}))
    with pytest.raises(ValueError, match=r"model.safetensors: a learned α of .* is 1.175 .* `alpha_min` \(1.3\)"):
        AdaptiveEntmaxMarianMTModel.from_pretrained(tmp_path)


def test_a_config_with_other_alpha_settings_is_the_callers_choice(tmp_path, batch):
    """Loading learned weights with a config whose α settings differ from the saved ones (as `hf-entmax train` does
    to fix α) drops the learned α on purpose; the same config written into the folder is refused."""
    saved_folder(tmp_path)
    config = AdaptiveEntmaxMarianConfig.from_pretrained(tmp_path)
    config.learn_alpha, config.alpha_init = False, 1.2
    model = AdaptiveEntmaxMarianMTModel.from_pretrained(tmp_path, config=config)
    assert torch.equal(model.get_alphas()["cross"], torch.full((2, 4), 1.2))
    config.save_pretrained(tmp_path)
    with pytest.raises(
        ValueError, match=r"model.safetensors: the weights hold learned α of .* `learn_alpha` is False"
    ):
        AdaptiveEntmaxMarianMTModel.from_pretrained(tmp_path)


def test_weights_that_do_not_fit_the_architecture_are_refused_whatever_the_config(tmp_path):
    saved_folder(tmp_path)
    config = AdaptiveEntmaxMarianConfig.from_pretrained(tmp_path)
    config.decoder_ffn_dim = 48
    with pytest.raises(ValueError, match=r"saved with decoder_ffn_dim = 64 .* the config's `decoder_ffn_dim` is 48"):
        AdaptiveEntmaxMarianMTModel.from_pretrained(tmp_path, config=config)


def test_the_bare_model_loads_the_translation_models_folder_with_its_checks(tmp_path):
    saved_folder(tmp_path)
    assert type(AdaptiveEntmaxMarianModel.from_pretrained(tmp_path)) is AdaptiveEntmaxMarianModel
    saved_folder(tmp_path, encoder_layers=1)
    with pytest.raises(ValueError, match="the weights hold 2 encoder layers, but the config's `encoder_layers` is 1"):
        AdaptiveEntmaxMarianModel.from_pretrained(tmp_path)
