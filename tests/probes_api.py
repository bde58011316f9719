"""Reliability probes of item 14 and 15 (the Python API as strict as the CLI; attention weights keep their
gradient); registered on import by tests/test_reliability.py.
"""

import json
from collections.abc import Callable
from pathlib import Path

import torch
from helpers import SENTENCES, tiny_config, tiny_model
from probing import (
    CLEAR,
    DOCUMENTED,
    PROBES,
    Outcome,
    Probe,
    Workbench,
    api,
    cli,
    documented,
    probe,
    register_config_probes,
    run_command,
)
from safetensors.torch import load_file, save_file
from transformers import GenerationConfig, pipeline

from hf_entmax import AdaptiveEntmaxMarianMTModel
from hf_entmax.kernels.cpu import kernel_available


STRICT = 14
GRADIENT = 15
# 10**22: more than an int64 holds.
HUGE = str(10**22)


# --- item 14: the config refuses at construction what would fail later, or silently -------------------------------

CONFIG_VALUES = {
    "dropout_above_one": {"dropout": 1.5},
    "attention_dropout_negative": {"attention_dropout": -0.5},
    "activation_dropout_nan": {"activation_dropout": float("nan")},
    "encoder_layerdrop_two": {"encoder_layerdrop": 2},
    "eos_beyond_the_vocabulary": {"eos_token_id": 64},
    "one_of_the_eos_beyond_the_vocabulary": {"eos_token_id": [1, 99]},
    "decoder_vocab_size_with_shared_embeddings": {"decoder_vocab_size": 80},
    "decoder_start_beyond_a_separate_target_vocabulary": {
        "decoder_start_token_id": 40,
        "share_encoder_decoder_embeddings": False,
        "decoder_vocab_size": 32,
    },
    "unknown_activation": {"activation_function": "foo"},
    "init_std_negative": {"init_std": -1.0},
    "one_position": {"max_position_embeddings": 1},
}


register_config_probes(STRICT, CONFIG_VALUES)


@probe(STRICT, DOCUMENTED)
def probe_config_separate_target_vocabulary(bench):
    """AdaptiveEntmaxMarianConfig(share_encoder_decoder_embeddings=False, decoder_vocab_size=32): a model"""
    config = tiny_config(share_encoder_decoder_embeddings=False, decoder_vocab_size=32, eos_token_id=31)
    model = AdaptiveEntmaxMarianMTModel(config)
    shapes = model.model.encoder.embed_tokens.weight.shape, model.lm_head.weight.shape
    return documented(shapes == ((64, 32), (32, 32)), f"source and target embeddings {shapes}")


# --- item 14: from_pretrained of a folder whose config no longer fits its weights --------------------------------


def _edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def _edit_weights(folder: Path, change: Callable[[dict], None]) -> None:
    weights = folder / "model.safetensors"
    tensors = load_file(weights)
    change(tensors)
    save_file(tensors, weights, metadata={"format": "pt"})


def _load(folder: Path) -> Callable[[], object]:
    return lambda: AdaptiveEntmaxMarianMTModel.from_pretrained(folder)


def _with_config(bench: Workbench, **changes) -> Path:
    folder = bench.hub_folder()
    _edit_json(folder / "config.json", **changes)
    return folder


def _nan_alpha(tensors: dict) -> None:
    tensors["model.encoder.layers.0.self_attn.alpha_logits"][1] = float("nan")


FOLDER_CONFIGS = {
    "alpha_min_above_the_learned_alpha": ({"alpha_min": 1.9}, "alpha_min"),
    "alpha_max_below_the_learned_alpha": ({"alpha_max": 1.1}, "alpha_max"),
    "learn_alpha_false_over_learned_logits": ({"learn_alpha": False, "alpha_init": 1.5}, "learn_alpha"),
    "cross_learn_alpha_false_over_learned_logits": (
        {"cross_learn_alpha": False, "cross_alpha_init": 1.5},
        "cross_learn_alpha",
    ),
    "fewer_encoder_layers_than_the_weights": ({"encoder_layers": 1}, "encoder_layers"),
    "more_decoder_layers_than_the_weights": ({"decoder_layers": 3}, "decoder_layers"),
    "another_vocab_size": ({"vocab_size": 70, "decoder_vocab_size": 70}, "vocab_size"),
    "another_ffn_size": ({"encoder_ffn_dim": 128}, "encoder_ffn_dim"),
    "more_heads_than_the_learned_alpha": ({"encoder_attention_heads": 8}, "encoder_attention_heads"),
}


def _folder_config_probe(changes: dict, field: str) -> Callable[[Workbench], Outcome]:
    def run(bench):
        folder = _with_config(bench, **changes)
        return api(_load(folder), str(folder), field)

    return run


for _name, (_changes, _field) in FOLDER_CONFIGS.items():
    _description = (
        "AdaptiveEntmaxMarianMTModel.from_pretrained: config.json edited to "
        + ", ".join(f"{key}={value!r}" for key, value in _changes.items())
        + " over its trained weights"
    )
    PROBES.append(
        Probe(STRICT, f"from_pretrained_{_name}", _description, _folder_config_probe(_changes, _field), CLEAR)
    )


@probe(STRICT)
def probe_from_pretrained_nan_alpha_logits(bench):
    """AdaptiveEntmaxMarianMTModel.from_pretrained: weights with a NaN α logit (a run that diverged)"""
    folder = bench.hub_folder()
    _edit_weights(folder, _nan_alpha)
    return api(_load(folder), str(folder), "alpha_logits", "NaN")


@probe(STRICT)
def probe_from_pretrained_fewer_positions_than_the_weights(bench):
    """AdaptiveEntmaxMarianMTModel.from_pretrained: weights with 64 position embeddings, config.json 16"""
    folder = bench.hub_folder()
    positions = AdaptiveEntmaxMarianMTModel.from_pretrained(folder).model.encoder.embed_positions.weight.detach()

    def add_positions(tensors):
        for stack in ("encoder", "decoder"):
            tensors[f"model.{stack}.embed_positions.weight"] = positions.clone()

    _edit_weights(folder, add_positions)
    _edit_json(folder / "config.json", max_position_embeddings=16)
    return api(_load(folder), str(folder), "max_position_embeddings")


@probe(STRICT)
def probe_from_pretrained_scaling_off_over_learned_scaling(bench):
    """AdaptiveEntmaxMarianMTModel.from_pretrained: ASEntmax weights, config.json edited to attention_scaling=None"""
    folder = bench.folder("asentmax") / "model"
    tiny_model(vocab_size=len(bench.tokenizer), attention_scaling="asentmax").save_pretrained(folder)
    _edit_json(folder / "config.json", attention_scaling=None)
    return api(_load(folder), str(folder), "attention_scaling")


@probe(STRICT, DOCUMENTED)
def probe_from_pretrained_with_a_config_that_fixes_alpha(bench):
    """AdaptiveEntmaxMarianMTModel.from_pretrained(folder, config=<learn_alpha=False, alpha_init=1.2>): α fixed"""
    folder = bench.hub_folder()
    config = AdaptiveEntmaxMarianMTModel.config_class.from_pretrained(folder)
    config.learn_alpha, config.alpha_init = False, 1.2
    alphas = AdaptiveEntmaxMarianMTModel.from_pretrained(folder, config=config).get_alphas()
    fixed = all(torch.equal(values, torch.full_like(values, 1.2)) for values in alphas.values())
    return documented(fixed, "α of every head 1.2" if fixed else f"α {alphas}")


# --- item 14: generation configs, where the model loads and where the pipeline generates --------------------------

GENERATION_VALUES = {
    "num_beams_zero": {"num_beams": 0},
    "forced_bos_beyond_the_vocabulary": {"forced_bos_token_id": 999},
    "max_length_beyond_the_positions": {"max_length": 1000},
    "max_length_one": {"max_length": 1},
}


def _generation_probe(changes: dict) -> Callable[[Workbench], Outcome]:
    def run(bench):
        folder = bench.hub_folder()
        _edit_json(folder / "generation_config.json", **changes)
        return api(_load(folder), str(folder), next(iter(changes)))

    return run


for _name, _changes in GENERATION_VALUES.items():
    _description = "AdaptiveEntmaxMarianMTModel.from_pretrained: generation_config.json with " + ", ".join(
        f"{key}={value!r}" for key, value in _changes.items()
    )
    PROBES.append(
        Probe(STRICT, f"from_pretrained_generation_{_name}", _description, _generation_probe(_changes), CLEAR)
    )


def _translator(bench: Workbench):
    return pipeline("translation", model=str(bench.hub_folder()), trust_remote_code=True)


@probe(STRICT)
def probe_pipeline_generation_config_num_beams_zero(bench):
    """pipeline("translation")(text, generation_config=GenerationConfig(num_beams=0))"""
    translator = _translator(bench)
    return api(lambda: translator(SENTENCES[0], generation_config=GenerationConfig(num_beams=0)), "num_beams")


@probe(STRICT)
def probe_pipeline_forced_bos_beyond_the_vocabulary(bench):
    """pipeline("translation")(text, forced_bos_token_id=999)"""
    translator = _translator(bench)
    return api(lambda: translator(SENTENCES[0], forced_bos_token_id=999), "forced_bos_token_id")


# --- item 14: the loss of a batch without target tokens ----------------------------------------------------------


@probe(STRICT, DOCUMENTED)
def probe_loss_of_labels_all_ignored(bench):
    """AdaptiveEntmaxMarianMTModel(input_ids, labels=<all -100>).loss: 0, with zero gradients"""
    model = tiny_model(init_std=0.5).train()
    input_ids = torch.tensor([[5, 6, 7, 1]])
    loss = model(input_ids=input_ids, labels=torch.full((1, 3), -100)).loss
    loss.backward()
    gradients = [parameter.grad for parameter in model.parameters() if parameter.grad is not None]
    zero = all(not gradient.any() for gradient in gradients)
    return documented(loss.item() == 0.0 and bool(gradients) and zero, f"loss {loss.item()}, zero gradients: {zero}")


# --- item 14: the same through `hf-entmax translate` --------------------------------------------------------------


def _translate(folder: Path, bench: Workbench, *extra: str) -> list[str]:
    return ["translate", "--model", str(folder), "--input", bench.sentences(), "--no-progress", *extra]


@probe(STRICT)
def probe_translate_nan_alpha_logits(bench):
    """translate --model: a folder whose weights hold a NaN α logit"""
    folder = bench.hub_folder()
    _edit_weights(folder, _nan_alpha)
    return cli(_translate(folder, bench), str(folder), "alpha_logits")


@probe(STRICT)
def probe_translate_alpha_min_above_the_learned_alpha(bench):
    """translate --model: a folder whose config.json raised alpha_min above the learned α"""
    folder = _with_config(bench, alpha_min=1.9)
    return cli(_translate(folder, bench), str(folder), "alpha_min")


@probe(STRICT)
def probe_translate_one_position(bench):
    """translate --model: a folder whose config.json has max_position_embeddings 1"""
    folder = _with_config(bench, max_position_embeddings=1)
    return cli(_translate(folder, bench), str(folder), "max_position_embeddings")


@probe(STRICT)
def probe_translate_generation_num_beams_zero(bench):
    """translate --model: a folder whose generation_config.json has num_beams 0"""
    folder = bench.hub_folder()
    _edit_json(folder / "generation_config.json", num_beams=0)
    return cli(_translate(folder, bench), str(folder), "num_beams")


@probe(STRICT)
def probe_translate_generation_forced_bos_beyond_the_vocabulary(bench):
    """translate --model: a folder whose generation_config.json forces a BOS token beyond the vocabulary"""
    folder = bench.hub_folder()
    _edit_json(folder / "generation_config.json", forced_bos_token_id=999)
    return cli(_translate(folder, bench), str(folder), "forced_bos_token_id")


@probe(STRICT, DOCUMENTED)
def probe_translate_sparsefinder_window_beyond_int64(bench):
    """translate --sparsefinder window:size=10^22: every pair kept, the translations of full attention"""
    folder = bench.hub_folder()
    plain, windowed = (bench.folder("translations") / "out.txt" for _ in range(2))
    codes = [
        run_command(_translate(folder, bench, "--output", str(plain)))[0],
        run_command(_translate(folder, bench, "--output", str(windowed), "--sparsefinder", f"window:size={HUGE}"))[0],
    ]
    same = codes == [0, 0] and plain.read_text() == windowed.read_text()
    return documented(same, f"exit codes {codes}, the same translations: {same}")


@probe(STRICT)
def probe_translate_sparsefinder_buckets_beyond_int64(bench):
    """translate --sparsefinder quantization:buckets=10^22"""
    return cli(bench.translate_argv("--sparsefinder", f"quantization:buckets={HUGE}"), "buckets", HUGE)


@probe(STRICT)
def probe_translate_sparsefinder_predictor_that_is_text(bench):
    """translate --sparsefinder_predictor: a text file named predictor.safetensors"""
    predictor = bench.write(bench.folder("text") / "predictor.safetensors", "not a predictor\n")
    argv = bench.translate_argv("--sparsefinder", "distance:threshold=1.5", "--sparsefinder_predictor", str(predictor))
    return cli(argv, str(predictor))


@probe(STRICT)
def probe_translate_sparsefinder_folder_predictor_that_is_text(bench):
    """translate --sparsefinder distance:threshold=1.5: the model folder's sparsefinder.safetensors is text"""
    folder = bench.hub_folder()
    predictor = bench.write(folder / "sparsefinder.safetensors", "not a predictor\n")
    return cli(_translate(folder, bench, "--sparsefinder", "distance:threshold=1.5"), str(predictor))


# --- item 15: attention weights keep their gradient --------------------------------------------------------------


def _weights_with_gradients(model) -> tuple[bool, str]:
    """transformers' `test_retain_grad_hidden_states_attentions` on ``model``: the first layer's weights of each kind,
    and its hidden states, retained and reached by the gradient of one output value."""
    input_ids = torch.tensor([[5, 6, 7, 8, 1], [9, 10, 1, 0, 0]])
    outputs = model(
        input_ids=input_ids,
        attention_mask=(input_ids != 0).long(),
        decoder_input_ids=torch.tensor([[0, 11, 12], [0, 13, 14]]),
        output_attentions=True,
        output_hidden_states=True,
    )
    names = ("encoder_hidden_states", "encoder_attentions", "decoder_hidden_states", "decoder_attentions")
    retained = {name: getattr(outputs, name)[0] for name in (*names, "cross_attentions")}
    for tensor in retained.values():
        tensor.retain_grad()
    outputs[0].flatten()[0].backward(retain_graph=True)
    missing = [name for name, tensor in retained.items() if tensor.grad is None]
    path = "native kernel" if kernel_available() else "PyTorch (no native kernel here)"
    return not missing, f"{path}: " + (f"no gradient for {', '.join(missing)}" if missing else "every gradient there")


@probe(GRADIENT, DOCUMENTED)
def probe_attention_weights_gradient_in_evaluation(bench):
    """model(..., output_attentions=True) in evaluation: the weights of every kind get a gradient (retain_grad)"""
    return documented(*_weights_with_gradients(tiny_model(init_std=0.5)))


@probe(GRADIENT, DOCUMENTED)
def probe_attention_weights_gradient_in_training(bench):
    """model(..., output_attentions=True) in training with attention dropout: the weights get a gradient"""
    return documented(*_weights_with_gradients(tiny_model(init_std=0.5, attention_dropout=0.1).train()))


@probe(GRADIENT, DOCUMENTED)
def probe_attention_weights_do_not_change_the_function(bench):
    """model(..., output_attentions=True) in training: the same logits and dropout as without, from the same seed"""
    model = tiny_model(init_std=0.5, attention_dropout=0.3).train()
    input_ids = torch.tensor([[5, 6, 7, 8, 1], [9, 10, 1, 0, 0]])
    logits = []
    for wanted in (False, True):
        torch.manual_seed(0)
        logits.append(model(input_ids=input_ids, labels=torch.tensor([[11, 12, 1]] * 2), output_attentions=wanted))
    same = torch.equal(logits[0].logits, logits[1].logits) and torch.equal(logits[0].loss, logits[1].loss)
    return documented(same, f"largest difference {(logits[0].logits - logits[1].logits).abs().max().item():.1e}")


@probe(STRICT)
def probe_train_from_a_checkpoint_with_fewer_layers_in_its_config(bench):
    """train --model_name_or_path: a checkpoint whose config.json says fewer encoder layers than its weights"""
    folder = _with_config(bench, encoder_layers=1)
    argv = bench.train_argv(bench.folder() / "run", "--model_name_or_path", str(folder), fresh=False)
    return cli(argv, "--model_name_or_path", "encoder_layers")


@probe(STRICT)
def probe_train_from_a_checkpoint_with_zero_beams(bench):
    """train --model_name_or_path: a checkpoint whose generation_config.json has num_beams 0"""
    folder = bench.hub_folder()
    _edit_json(folder / "generation_config.json", num_beams=0)
    argv = bench.train_argv(bench.folder() / "run", "--model_name_or_path", str(folder), fresh=False)
    return cli(argv, "--model_name_or_path", "num_beams")
