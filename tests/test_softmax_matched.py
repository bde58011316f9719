"""`attention_scaling="softmax_matched"`: each query scaled by n^(1 − α), so that every head is as sharp as softmax
at uniform attention, whatever its α and the number n of keys it may attend to."""

import json

import pytest
import torch
from helpers import AttentionHeads, padded_attention_inputs, tiny_config, tiny_model
from torch.autograd import gradcheck
from transformers import AutoModelForSeq2SeqLM

from hf_entmax.modeling.modeling_adaptive_entmax_marian import entmax_attention_forward


def matched_heads(alpha) -> AttentionHeads:
    return AttentionHeads(alpha, "softmax_matched")


def attention_weights(module, query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    value = torch.eye(key.shape[-2], dtype=key.dtype).expand(*key.shape[:2], -1, -1)  # the output is the weights
    output, _ = entmax_attention_forward(module, query, key, value, mask, scaling=1.0)
    return output.transpose(1, 2)  # (B, H, Lq, Lk)


def response(weights_of, scores: torch.Tensor, epsilon: float = 1e-5) -> torch.Tensor:
    """How the weights move with the scores at uniform attention: the central difference of ``weights_of`` at 0 in
    the direction ``scores``. Its error is of order ε² (third-order remainder, ≈ 1e-10 relative for scores of order
    1) plus float64 rounding over ε (≈ 1e-16 / 1e-5 = 1e-11), so responses that agree to 1e-6 are equal."""
    return (weights_of(epsilon * scores) - weights_of(-epsilon * scores)) / (2 * epsilon)


@pytest.mark.parametrize("n", [3, 8, 30])
@pytest.mark.parametrize("alpha", [1.25, 1.5, 2.0])
def test_every_head_responds_to_small_scores_as_softmax_does(alpha, n):
    """Near uniform attention over n keys the weights move with the scores as softmax's do, for every α; without the
    factor α-entmax's move n^(α−1) times as much."""
    scores = torch.randn(1, 1, 1, n, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
    key = torch.eye(n, dtype=torch.float64).view(1, 1, n, n)  # query · key = the query itself
    mask = torch.zeros(1, 1, 1, n, dtype=torch.float64)
    unmatched = AttentionHeads(alpha)
    softmax = response(lambda query: torch.softmax(query, -1), scores)
    matched = response(lambda query: attention_weights(matched_heads(alpha), query, key, mask), scores)
    plain = response(lambda query: attention_weights(unmatched, query, key, mask), scores)
    torch.testing.assert_close(matched, softmax, rtol=1e-6, atol=1e-12)
    torch.testing.assert_close(plain, n ** (alpha - 1) * softmax, rtol=1e-6, atol=1e-12)


def test_each_query_counts_only_the_keys_it_may_attend_to():
    """With padding, n is a row's real keys: a padded row responds as softmax over those keys does."""
    n_keys, n_real = 6, 4
    scores = torch.randn(1, 1, 1, n_keys, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    key = torch.eye(n_keys, dtype=torch.float64).view(1, 1, n_keys, n_keys)
    mask = torch.zeros(1, 1, 1, n_keys, dtype=torch.float64)
    mask[..., n_real:] = float("-inf")
    matched = response(lambda query: attention_weights(matched_heads(1.5), query, key, mask), scores)
    softmax = response(lambda query: torch.softmax(query + mask, -1), scores)
    torch.testing.assert_close(matched, softmax, rtol=1e-6, atol=1e-12)


def test_softmax_heads_are_unchanged(batch):
    """α = 1: the factor is n^0 = 1 exactly, so the model computes what the unscaled one does, bit for bit."""
    plain = tiny_model(init_std=0.5, alpha_init=1.0, learn_alpha=False)
    matched = tiny_model(init_std=0.5, alpha_init=1.0, learn_alpha=False, attention_scaling="softmax_matched")
    matched.load_state_dict(plain.state_dict())  # no parameters of its own: the same state dict
    torch.testing.assert_close(matched(**batch).logits, plain(**batch).logits, rtol=0, atol=0)
    learned = tiny_model(init_std=0.5, attention_scaling="softmax_matched")
    assert set(learned.state_dict()) == set(tiny_model().state_dict())
    assert not torch.allclose(learned(**batch).logits, tiny_model(init_std=0.5)(**batch).logits)


def test_gradcheck_of_alpha_through_the_factor_and_entmax(attention_path):
    """float64 gradients of the output w.r.t. α (through the factor and the mapping) and the query, with padding."""
    query, key, value, mask = padded_attention_inputs(torch.Generator().manual_seed(0), heads=3)
    alpha = torch.tensor([1.3, 1.5, 1.8], dtype=torch.float64, requires_grad=True)

    def attention(alpha, query):
        output, _ = entmax_attention_forward(matched_heads(alpha), query, key, value, mask)
        return output

    assert gradcheck(attention, (alpha, query.requires_grad_()))


@pytest.mark.parametrize("cache_implementation", [None, "static"])
def test_cached_decoding_gives_the_tokens_of_uncached_decoding(batch, cache_implementation):
    """The causal prefix grows by one per cached step: n from the mask, as without a cache."""
    model = tiny_model(init_std=0.5, attention_scaling="softmax_matched").double()
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    settings = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False, num_beams=1)
    cached = model.generate(**inputs, **settings, use_cache=True, cache_implementation=cache_implementation)
    uncached = model.generate(**inputs, **settings, use_cache=False)
    assert torch.equal(cached, uncached)


def test_saved_folder_loads_through_the_auto_classes(batch, tmp_path):
    model = tiny_model(init_std=0.5, attention_scaling="softmax_matched", cross_attention_scaling="none")
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["attention_scaling"] == "softmax_matched" and config["cross_attention_scaling"] == "none"
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, trust_remote_code=True).eval()
    torch.testing.assert_close(loaded(**batch).logits, model(**batch).logits, rtol=0, atol=0)


def test_config_names_the_methods_it_accepts():
    with pytest.raises(Exception, match="'ssmax', 'softmax_matched' or None"):
        tiny_config(attention_scaling="matched")
    assert tiny_config(decoder_self_attention_scaling="softmax_matched").scaling_method("decoder_self") == (
        "softmax_matched"
    )


def test_a_type_with_alpha_fixed_at_one_is_not_scaled():
    """n^(1 − 1) = 1: a softmax type (α fixed at 1) under softmax_matched reports "none", so nothing that reads the
    method (the model, the training printout, the card, the analysis) calls it scaled; a learned α, α fixed elsewhere
    and ASEntmax's temperature (which does change softmax) keep their method."""
    twin = tiny_config(attention_scaling="softmax_matched", alpha_init=1.0, learn_alpha=False)
    assert [twin.scaling_method(kind) for kind in ("encoder_self", "decoder_self", "cross")] == ["none"] * 3
    mixed = tiny_config(attention_scaling="softmax_matched", cross_alpha_init=1.0, cross_learn_alpha=False)
    assert (mixed.scaling_method("encoder_self"), mixed.scaling_method("cross")) == ("softmax_matched", "none")
    fixed = tiny_config(attention_scaling="softmax_matched", alpha_init=1.5, learn_alpha=False)
    assert fixed.scaling_method("cross") == "softmax_matched"
    tempered = tiny_config(attention_scaling="asentmax", alpha_init=1.0, learn_alpha=False)
    assert tempered.scaling_method("cross") == "asentmax"
    # Only ASEntmax's β and γ are weights: they decide which checkpoint keys a type expects.
    assert tempered.has_learned_scaling("cross") and not fixed.has_learned_scaling("cross")
