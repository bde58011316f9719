"""Train or fine-tune an AdaptiveEntmaxMarian translation model with Seq2SeqTrainer: the logic behind
`hf-entmax train` and `hf-entmax demo`, usable from Python as :func:`train`.

The flow is transformers' translation example, adapted: load parallel text (Hub dataset, local files or the
built-in synthetic pair), get a tokenizer (given, the model's, or trained on the data), build the model
(fresh from a size preset, an AdaptiveEntmaxMarian checkpoint, or a MarianMT checkpoint whose softmax heads
become α-entmax heads), tokenize, train, evaluate with sacreBLEU and chrF, and save a self-contained folder.
"""

import json
import logging
import math
import re
from pathlib import Path

import datasets
import transformers
from transformers import (
    AutoConfig,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    PreTrainedTokenizerBase,
    Seq2SeqTrainingArguments,
    set_seed,
)

from ..conversion.model_card import ModelCardInfo, render_model_card
from ..errors import HfEntmaxFileNotFoundError, HfEntmaxValueError
from ..modeling.configuration_adaptive_entmax_marian import AdaptiveEntmaxMarianConfig
from ..modeling.modeling_adaptive_entmax_marian import AdaptiveEntmaxMarianMTModel
from .arguments import DataArguments, ModelArguments
from .data import limit_samples, load_parallel_data
from .metrics import sacrebleu_signatures, translation_metrics
from .presets import build_config, preset_config_kwargs
from .tokenizer import train_joint_tokenizer
from .trainer import AdaptiveEntmaxTrainer


logger = logging.getLogger(__name__)

SUMMARY_FILE = "training_summary.json"
ALPHA_HISTORY_FILE = "alpha_history.json"
_ALPHA_LOG_KEY = re.compile(r"alpha/(\w+)/layer_(\d+)/head_(\d+)")


def load_tokenizer(
    model_args: ModelArguments, train_split: datasets.Dataset, source_lang: str, target_lang: str, output_dir: Path
) -> PreTrainedTokenizerBase:
    """The named tokenizer, the model's own, one saved by an earlier run in ``output_dir``, or a new one."""
    name = model_args.tokenizer_name or model_args.model_name_or_path
    if name is not None:
        return AutoTokenizer.from_pretrained(name)
    if (output_dir / "tokenizer.json").exists():
        # A resumed (or repeated) run keeps the vocabulary its checkpoints were trained with.
        logger.warning(f"using the tokenizer already in {output_dir} (delete tokenizer.json there to train a new one)")
        return AutoTokenizer.from_pretrained(output_dir)
    texts = (text for pair in train_split["translation"] for text in (pair[source_lang], pair[target_lang]))
    tokenizer = train_joint_tokenizer(texts, vocab_size=model_args.vocab_size)
    tokenizer.save_pretrained(output_dir)
    return tokenizer


def load_model(
    model_args: ModelArguments, tokenizer: PreTrainedTokenizerBase, max_length: int
) -> AdaptiveEntmaxMarianMTModel:
    """A fresh model of ``--model_size``, or one started from ``--model_name_or_path``."""
    if model_args.model_name_or_path is None:
        config = build_config(
            **preset_config_kwargs(model_args.model_size),
            **model_args.alpha_config(),
            vocab_size=len(tokenizer),
            max_position_embeddings=max(512, max_length),
            dropout=model_args.dropout,
            attention_dropout=model_args.dropout,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=tokenizer.pad_token_id,
            forced_eos_token_id=tokenizer.eos_token_id,
            scale_embedding=True,
        )
        return AdaptiveEntmaxMarianMTModel(config)

    source_config = AutoConfig.from_pretrained(model_args.model_name_or_path)
    if source_config.model_type == AdaptiveEntmaxMarianConfig.model_type:
        return AdaptiveEntmaxMarianMTModel.from_pretrained(model_args.model_name_or_path)
    if source_config.model_type != "marian":
        raise HfEntmaxValueError(
            f"--model_name_or_path {model_args.model_name_or_path!r} is a {source_config.model_type!r} model; "
            "hf-entmax trains AdaptiveEntmaxMarian models and starts from their own or Marian checkpoints"
        )
    # A Marian checkpoint: same modules and weights, its attention becomes α-entmax (α logits start from the config).
    marian_fields = {
        key: value
        for key, value in source_config.to_dict().items()
        if key in AdaptiveEntmaxMarianConfig.__dataclass_fields__
    }
    config = build_config(**{**marian_fields, **model_args.alpha_config()})
    return AdaptiveEntmaxMarianMTModel.from_pretrained(model_args.model_name_or_path, config=config)


def tokenize_splits(
    raw: datasets.DatasetDict,
    tokenizer: PreTrainedTokenizerBase,
    data_args: DataArguments,
    source_lang: str,
    target_lang: str,
    training_args: Seq2SeqTrainingArguments,
) -> datasets.DatasetDict:
    """``input_ids``/``attention_mask`` from the source and ``labels`` from the target, truncated."""

    def tokenize(batch):
        sources = [pair[source_lang] for pair in batch["translation"]]
        targets = [pair[target_lang] for pair in batch["translation"]]
        features = tokenizer(sources, max_length=data_args.max_source_length, truncation=True)
        features["labels"] = tokenizer(text_target=targets, max_length=data_args.max_target_length, truncation=True)[
            "input_ids"
        ]
        return features

    limits = {
        "train": data_args.max_train_samples,
        "validation": data_args.max_eval_samples,
        "test": data_args.max_predict_samples,
    }
    tokenized = {}
    with training_args.main_process_first(desc="tokenizing"):
        for split_name, split in raw.items():
            split = limit_samples(split, limits.get(split_name))
            tokenized[split_name] = split.map(
                tokenize,
                batched=True,
                remove_columns=split.column_names,
                num_proc=data_args.preprocessing_num_workers,
                desc=f"Tokenizing {split_name}",
            )
    return datasets.DatasetDict(tokenized)


def mean_tokens_per_example(split: datasets.Dataset) -> float:
    total = sum(len(ids) for ids in split["input_ids"]) + sum(len(ids) for ids in split["labels"])
    return round(total / len(split), 2)


def alpha_history(log_history: list[dict]) -> list[dict]:
    """α per head at every logged training step, from the trainer's log history.

    Returns:
        ``[{"step": s, "encoder_self": [[α per head] per layer], "decoder_self": …, "cross": …}, …]``.
    """
    history = []
    for entry in log_history:
        per_type: dict[str, dict[int, dict[int, float]]] = {}
        for key, value in entry.items():
            if match := _ALPHA_LOG_KEY.fullmatch(key):
                kind, layer, head = match.group(1), int(match.group(2)), int(match.group(3))
                per_type.setdefault(kind, {}).setdefault(layer, {})[head] = value
        if per_type:
            record = {"step": entry["step"]}
            for kind, layers in per_type.items():
                record[kind] = [[layers[layer][head] for head in sorted(layers[layer])] for layer in sorted(layers)]
            history.append(record)
    return history


def last_complete_checkpoint(output_dir: Path) -> Path | None:
    """The newest ``checkpoint-<step>`` folder that was written to the end.

    Trainer writes ``trainer_state.json`` last, so a run killed while saving leaves a folder without a readable
    one: resuming must skip it and fall back to the checkpoint before.
    """
    checkpoints = [path for path in output_dir.glob("checkpoint-*") if path.name.split("-")[-1].isdigit()]
    for checkpoint in sorted(checkpoints, key=lambda path: int(path.name.split("-")[-1]), reverse=True):
        try:
            json.loads((checkpoint / "trainer_state.json").read_text())
        except (OSError, ValueError):
            logger.warning(f"skipping {checkpoint}: it was not written completely (no readable trainer_state.json)")
            continue
        return checkpoint
    return None


def resolve_checkpoint(training_args: Seq2SeqTrainingArguments) -> str | None:
    """``--resume_from_checkpoint``: a path, or true/last for the newest complete checkpoint in ``output_dir``."""
    requested = training_args.resume_from_checkpoint
    if requested is None or str(requested).lower() in ("false", "no", ""):
        return None
    if str(requested).lower() in ("true", "last", "latest"):
        last = last_complete_checkpoint(Path(training_args.output_dir))
        if last is None:
            raise HfEntmaxFileNotFoundError(
                f"--resume_from_checkpoint {requested}: no complete checkpoint-* folder in {training_args.output_dir}"
            )
        return str(last)
    if not (Path(requested) / "trainer_state.json").is_file():
        raise HfEntmaxFileNotFoundError(
            f"--resume_from_checkpoint {requested}: not a complete checkpoint folder (no trainer_state.json)"
        )
    return str(requested)


def train(model_args: ModelArguments, data_args: DataArguments, training_args: Seq2SeqTrainingArguments) -> dict:
    """Train, evaluate and save; returns the training summary (also written to ``training_summary.json``).

    The output folder loads with ``AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)``
    and ``pipeline("translation", model=folder, trust_remote_code=True)``, also without hf_entmax.
    """
    output_dir = Path(training_args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    transformers.utils.logging.set_verbosity_warning()
    set_seed(training_args.seed)
    checkpoint = resolve_checkpoint(training_args)

    raw, source_lang, target_lang = load_parallel_data(data_args)
    if "train" not in raw:
        raise HfEntmaxValueError("no training data: give --train_file or --train_source_file/--train_target_file")
    if training_args.eval_strategy != "no" and "validation" not in raw:
        raise HfEntmaxValueError(
            f"--eval_strategy {training_args.eval_strategy} needs validation data: give --validation_file "
            "(or --validation_source_file/--validation_target_file)"
        )

    with training_args.main_process_first(desc="tokenizer"):
        tokenizer = load_tokenizer(model_args, raw["train"], source_lang, target_lang, output_dir)
    max_length = max(data_args.max_source_length, data_args.max_target_length)
    model = load_model(model_args, tokenizer, max_length)
    num_beams = training_args.generation_num_beams or 4
    model.generation_config.num_beams = num_beams
    model.generation_config.max_length = data_args.max_target_length

    tokenized = tokenize_splits(raw, tokenizer, data_args, source_lang, target_lang, training_args)
    # BLEU needs generated text: evaluation always generates (with the model's beam size and length limit).
    training_args.predict_with_generate = True
    trainer = AdaptiveEntmaxTrainer(
        model=model,
        args=training_args,
        train_dataset=tokenized["train"],
        eval_dataset=tokenized.get("validation"),
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, pad_to_multiple_of=None),
        processing_class=tokenizer,
        compute_metrics=translation_metrics(tokenizer),
        alpha_learning_rate=model_args.alpha_learning_rate,
    )

    train_result = trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model(str(output_dir))
    metrics = {
        f"train_{key}" if not key.startswith("train_") else key: value for key, value in train_result.metrics.items()
    }
    for split_name, prefix in (("validation", "eval"), ("test", "test")):
        if split_name in tokenized:
            metrics.update(trainer.evaluate(tokenized[split_name], metric_key_prefix=prefix, num_beams=num_beams))

    summary = {
        "source_lang": source_lang,
        "target_lang": target_lang,
        "data": "built-in synthetic pair"
        if data_args.uses_synthetic_data()
        else data_args.dataset_name or data_args.local_files(),
        "num_examples": {split_name: len(split) for split_name, split in tokenized.items()},
        # Source plus target tokens of an average training pair: turns examples/s into tokens/s.
        "mean_tokens_per_example": mean_tokens_per_example(tokenized["train"]),
        "base_model": model_args.model_name_or_path,
        "model_size": None if model_args.model_name_or_path else model_args.model_size,
        "num_parameters": model.num_parameters(),
        "global_step": trainer.state.global_step,
        "world_size": training_args.world_size,
        "metrics": {
            key: value for key, value in metrics.items() if isinstance(value, (int, float)) and math.isfinite(value)
        },
        "sacrebleu_signatures": sacrebleu_signatures(),
        "alphas": {kind: alphas.tolist() for kind, alphas in model.get_alphas().items()},
        "hyperparameters": {
            "learning_rate": training_args.learning_rate,
            "alpha_learning_rate": trainer.effective_alpha_learning_rate,
            "per_device_train_batch_size": training_args.per_device_train_batch_size,
            "max_steps": training_args.max_steps,
            "num_train_epochs": training_args.num_train_epochs,
            "warmup_steps": training_args.warmup_steps,
            "lr_scheduler_type": str(training_args.lr_scheduler_type),
            "weight_decay": training_args.weight_decay,
            "generation_num_beams": num_beams,
            "seed": training_args.seed,
        },
    }
    if trainer.is_world_process_zero():
        (output_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
        history = alpha_history(trainer.state.log_history)
        (output_dir / ALPHA_HISTORY_FILE).write_text(json.dumps(history) + "\n")
        render_model_card(model, ModelCardInfo.from_training_summary(summary)).save(output_dir / "README.md")
        # Trainer pickles its arguments next to the model; the folder is meant for the Hub, which should get
        # safetensors and JSON only (each checkpoint-* keeps its copy, training_summary.json the values).
        (output_dir / "training_args.bin").unlink(missing_ok=True)
    return summary
