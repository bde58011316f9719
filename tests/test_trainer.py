import numpy as np
import pytest
import torch
from helpers import SENTENCES, tiny_model
from transformers import DataCollatorForSeq2Seq, EvalPrediction, Seq2SeqTrainingArguments

from hf_entmax.training.metrics import corpus_scores, translation_metrics
from hf_entmax.training.presets import preset_config_kwargs
from hf_entmax.training.trainer import AdaptiveEntmaxTrainer, attention_logs, without_per_head_values


@pytest.fixture
def train_features(tokenizer):
    sources, targets = SENTENCES[0::2], SENTENCES[1::2]
    encoded = tokenizer(sources, text_target=targets)
    return [{key: encoded[key][index] for key in encoded} for index in range(len(sources))] * 4


def make_trainer(tmp_path, tokenizer, train_features, **overrides):
    model = tiny_model(vocab_size=len(tokenizer), init_std=0.3, **overrides.pop("config", {}))
    settings = dict(
        output_dir=str(tmp_path / "run"),
        max_steps=4,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        weight_decay=0.1,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        seed=0,
    )
    settings.update(overrides.pop("arguments", {}))
    return AdaptiveEntmaxTrainer(
        model=model,
        args=Seq2SeqTrainingArguments(**settings),
        train_dataset=train_features,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        processing_class=tokenizer,
        **overrides,
    )


def test_alpha_logits_get_their_own_group_without_weight_decay(tmp_path, tokenizer, train_features):
    trainer = make_trainer(tmp_path, tokenizer, train_features, alpha_learning_rate=0.05)
    optimizer = trainer.create_optimizer()
    alpha_group = optimizer.param_groups[-1]
    model_alphas = {id(p) for name, p in trainer.model.named_parameters() if name.endswith("alpha_logits")}
    assert {id(p) for p in alpha_group["params"]} == model_alphas
    assert alpha_group["lr"] == 0.05
    assert alpha_group["weight_decay"] == 0.0
    for group in optimizer.param_groups[:-1]:
        assert not model_alphas & {id(p) for p in group["params"]}
    all_trainable = {id(p) for p in trainer.model.parameters() if p.requires_grad}
    assert {id(p) for group in optimizer.param_groups for p in group["params"]} == all_trainable


def test_scaling_parameters_train_at_the_models_rate_without_weight_decay(tmp_path, tokenizer, train_features):
    """Decay (0.1 here) would pull β and γ towards no length scaling; they train with the model's learning rate."""
    trainer = make_trainer(tmp_path, tokenizer, train_features, config={"attention_scaling": "asentmax"})
    optimizer = trainer.create_optimizer()
    scales = {id(p) for name, p in trainer.model.named_parameters() if name.endswith(("scale_beta", "scale_gamma"))}
    assert len(scales) == 3 * 2 * 2  # three attention types, two layers, β and γ
    groups = [group for group in optimizer.param_groups if scales & {id(p) for p in group["params"]}]
    assert len(groups) == 1 and scales <= {id(p) for p in groups[0]["params"]}
    assert groups[0]["weight_decay"] == 0.0 and groups[0]["lr"] == 1e-3


def test_alpha_learning_rate_defaults_to_ten_times_the_models(tmp_path, tokenizer, train_features):
    trainer = make_trainer(tmp_path, tokenizer, train_features)
    optimizer = trainer.create_optimizer()
    assert optimizer.param_groups[-1]["lr"] == pytest.approx(10 * trainer.args.learning_rate)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(trainer.args.learning_rate)


@pytest.mark.slow
def test_training_moves_alpha_and_logs_it_at_every_logging_step(tmp_path, tokenizer, train_features):
    trainer = make_trainer(tmp_path, tokenizer, train_features, alpha_learning_rate=0.05)
    before = trainer.model.get_alphas()
    trainer.train()
    after = trainer.model.get_alphas()
    assert not torch.allclose(before["encoder_self"], after["encoder_self"])
    training_logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(training_logs) == 4
    for entry in training_logs:
        assert "alpha/cross/layer_1/head_3" in entry
        assert 1.01 <= entry["alpha/encoder_self/mean"] <= 2.0
    last = training_logs[-1]
    assert last["alpha/decoder_self/layer_0/head_2"] == pytest.approx(after["decoder_self"][0, 2].item(), abs=1e-5)


def test_attention_logs_of_a_model_without_alphas_is_empty():
    assert attention_logs(torch.nn.Linear(2, 2)) == {}


def test_attention_logs_carry_the_scales_of_scaled_attention_and_the_console_only_their_means():
    model = tiny_model(attention_scaling="asentmax", encoder_self_attention_scaling="none")
    logs = attention_logs(model)
    scales = model.get_attention_scales()
    assert logs["scale_beta/cross/layer_1/head_2"] == pytest.approx(scales["cross"]["beta"][1, 2].item(), abs=1e-5)
    mean_gamma = scales["decoder_self"]["gamma"].mean().item()
    assert logs["scale_gamma/decoder_self/mean"] == pytest.approx(mean_gamma, abs=1e-5)
    assert not any(key.startswith("scale_beta/encoder_self") for key in logs)
    console = without_per_head_values({"loss": 1.0, **logs})
    assert set(console) == {"loss", *(key for key in logs if key.endswith("/mean"))}


def test_presets_name_their_sizes_and_reject_unknown_names():
    assert preset_config_kwargs("base")["d_model"] == 512
    assert preset_config_kwargs("base")["encoder_layers"] == 6
    assert preset_config_kwargs("small")["d_model"] == 256
    with pytest.raises(ValueError, match="`model_size` must be one of \\['base', 'small', 'tiny'\\], got 'huge'"):
        preset_config_kwargs("huge")


def test_corpus_scores_are_sacrebleu_with_signatures():
    perfect = corpus_scores(["the small dog runs fast"], ["the small dog runs fast"])
    assert perfect["bleu"] == pytest.approx(100.0)
    assert perfect["chrf"] == pytest.approx(100.0)
    assert perfect["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    partial = corpus_scores(["the small cat runs fast"], ["the small dog runs fast"])
    assert 0 < partial["bleu"] < 100


def test_translation_metrics_ignore_padding_and_label_masking(tokenizer):
    references = ["the small dog runs fast", "a man reads a book"]
    labels = tokenizer(references, padding=True, return_tensors="np")["input_ids"]
    labels = np.where(labels == tokenizer.pad_token_id, -100, labels)
    predictions = tokenizer(references, padding="max_length", max_length=40, return_tensors="np")
    metrics = translation_metrics(tokenizer)(EvalPrediction(predictions["input_ids"], labels))
    assert metrics["bleu"] == pytest.approx(100.0)
    assert metrics["chrf"] == pytest.approx(100.0)
    assert set(metrics) == {"bleu", "chrf", "gen_len"}


@pytest.mark.parametrize("disable_tqdm", [False, True])
def test_console_shows_mean_alpha_while_history_keeps_every_head(
    tmp_path, tokenizer, train_features, capsys, disable_tqdm
):
    trainer = make_trainer(tmp_path, tokenizer, train_features, arguments={"disable_tqdm": disable_tqdm})
    trainer.train()
    printed = capsys.readouterr()
    console = printed.out + printed.err
    assert "alpha/cross/mean" in console
    assert "alpha/cross/layer_0/head_0" not in console
    assert "alpha/cross/layer_0/head_0" in trainer.state.log_history[0]
