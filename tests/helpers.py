"""Tiny models, sentences and quick training flags, made in code (no test downloads anything): import them with
``from helpers import ...``.

pytest puts this folder on ``sys.path`` (the default ``prepend`` import mode, tests/ being no package), so the test
modules import this plain module; the fixtures built on it are in conftest.py.
"""

import torch
from transformers import MarianConfig, MarianMTModel

from hf_entmax import AdaptiveEntmaxMarianConfig, AdaptiveEntmaxMarianMTModel
from hf_entmax.modeling.modeling_adaptive_entmax_marian import AdaptiveEntmaxMarianAttention
from hf_entmax.modeling.sparsefinder_attention import QUANTILE_STEPS, LayerProjections, SparsefinderPredictor


# What a saved model folder holds to load anywhere without hf_entmax: weights, configs, tokenizer and the flat code.
SAVED_FOLDER_FILES = {
    "model.safetensors",
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "configuration_adaptive_entmax_marian.py",
    "modeling_adaptive_entmax_marian.py",
    "entmax.py",
    "sparsefinder_attention.py",
    "pipeline_translation.py",
    "sentence_ends.py",
}
SENTENCES = [
    "der kleine hund läuft schnell",
    "the small dog runs fast",
    "zwei katzen schlafen im haus",
    "two cats sleep in the house",
    "ein mann liest ein buch",
    "a man reads a book",
    "die frau trinkt kaffee",
    "the woman drinks coffee",
]

# `hf-entmax train` flags for a run of seconds on the synthetic pairs: 2 steps, short sequences, nothing saved or
# reported; and the language pair of those pairs.
QUICK = [
    "--max_steps", "2",
    "--per_device_train_batch_size", "8",
    "--generation_max_length", "6",
    "--max_source_length", "32",
    "--max_target_length", "32",
    "--save_strategy", "no",
    "--report_to", "none",
    "--disable_tqdm", "True",
    "--seed", "0",
]  # fmt: skip
PAIR = ["--source_lang", "en", "--target_lang", "syn"]


def tiny_config(vocab_size: int = 64, **overrides) -> AdaptiveEntmaxMarianConfig:
    """A 2+2-layer, 4-head, d_model 32 config with Marian's token conventions (pad 0 starts decoding)."""
    settings = dict(
        vocab_size=vocab_size,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
        forced_eos_token_id=1,
    )
    settings.update(overrides)
    return AdaptiveEntmaxMarianConfig(**settings)


def tiny_model(seed: int = 0, **overrides) -> AdaptiveEntmaxMarianMTModel:
    torch.manual_seed(seed)
    return AdaptiveEntmaxMarianMTModel(tiny_config(**overrides)).eval()


def tiny_marian(vocab_size: int) -> MarianMTModel:
    """A plain (softmax) MarianMTModel of the tiny size: 2+1 layers, d_model 32, in eval mode."""
    torch.manual_seed(0)
    config = MarianConfig(
        vocab_size=vocab_size, d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, forced_eos_token_id=1, init_std=0.5,
    )  # fmt: skip
    return MarianMTModel(config).eval()


def random_predictor(model, dim: int = 3, seed: int = 0) -> SparsefinderPredictor:
    """Untrained projections for every layer of every attention type, with quantiles, 2 centroids and a position
    term."""
    generator = torch.Generator().manual_seed(seed)
    config = model.config
    head_dim = config.d_model // config.encoder_attention_heads
    heads = config.encoder_attention_heads

    def layer() -> LayerProjections:
        return LayerProjections(
            torch.randn(heads, head_dim, dim, generator=generator),
            torch.randn(heads, head_dim, dim, generator=generator),
            torch.linspace(-3, 3, QUANTILE_STEPS + 1).expand(heads, dim, -1).contiguous(),
            {2: torch.randn(heads, 2, dim, generator=generator)},
            torch.rand(heads, generator=generator),
        )

    layers = {
        kind: [layer() for _ in range(config.encoder_layers)] for kind in ("encoder_self", "decoder_self", "cross")
    }
    return SparsefinderPredictor(layers, {"thresholds": {kind: [1.0] for kind in layers}})


class AttentionHeads:
    """The parts of an attention module that `entmax_attention_forward` reads (α, the query scaling), as plain
    tensors that gradcheck can vary: ``AttentionHeads(alpha, "asentmax", beta=..., gamma=...)``."""

    query_scale = AdaptiveEntmaxMarianAttention.query_scale

    def __init__(self, alpha, scaling_method: str = "none", beta=None, gamma=None, offset: float = 1.0):
        self.alpha_value, self.scaling_method = alpha, scaling_method
        self.scale_beta, self.scale_gamma, self.scale_offset = beta, gamma, offset
        self.scaled_heads = None  # every head scales
        self.training = False

    def alpha(self):
        return self.alpha_value


def padded_attention_inputs(generator: torch.Generator, heads: int = 3, length: int = 5, head_dim: int = 4):
    """float64 ``query, key, value`` of two sentences, ``(2, heads, length, head_dim)``, and their additive mask
    ``(2, 1, length, length)``: the second sentence has 3 real tokens, so n differs by row."""
    query, key, value = (
        torch.randn(2, heads, length, head_dim, generator=generator, dtype=torch.float64) for _ in range(3)
    )
    mask = torch.zeros(2, 1, length, length, dtype=torch.float64)
    mask[1, :, :, 3:] = float("-inf")
    return query, key, value, mask


def punctuated_tokenizer():
    """A tokenizer of `SENTENCES` with a full stop after each, so that "." is a token of its own."""
    from hf_entmax.training.tokenizer import train_joint_tokenizer

    return train_joint_tokenizer([f"{sentence}." for sentence in SENTENCES] * 4, vocab_size=64)


def eager_to_stop(tokenizer) -> AdaptiveEntmaxMarianMTModel:
    """A model that would rather stop than go on, and rather end a sentence than write a word: it outputs nothing
    unless made to go on, and then only full stops (``tokenizer`` from `punctuated_tokenizer`)."""
    from hf_entmax.modeling.sentence_ends import sentence_end_token_ids

    model = tiny_model(seed=2, vocab_size=len(tokenizer), init_std=2.0)
    model.generation_config.max_length = 12
    with torch.no_grad():
        model.final_logits_bias[0, model.config.eos_token_id] = 1000.0
        model.final_logits_bias[0, sentence_end_token_ids(tokenizer)] = 500.0
    return model
