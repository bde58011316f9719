"""Train or fine-tune an AdaptiveEntmaxMarian translation model with Seq2SeqTrainer: the logic behind
`hf-entmax train` and `hf-entmax demo`, usable from Python as :func:`train`.

The flow is transformers' translation example (run_translation.py), adapted: load parallel text (Hub dataset, local
files or the built-in synthetic pair), get a tokenizer (given, the model's, or trained on the data), build the model
(fresh from a size preset, an AdaptiveEntmaxMarian checkpoint, or a MarianMT checkpoint whose softmax heads become
α-entmax heads; see `model_loading`), tokenize, then train, evaluate and predict as ``--do_train``/``--do_eval``/
``--do_predict`` ask (all three with the data there is, when none is given), with sacreBLEU and chrF, and save a
self-contained folder with the files run_translation.py writes. The model card (README.md) is written by the layer
above, which knows where the model goes: `hf-entmax train` calls `hf_entmax.hub.model_card.write_training_card`.
"""

import contextlib
import json
import logging
import math
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np
import torch
import transformers
from huggingface_hub import ModelCard
from transformers import (
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    PreTrainedTokenizerBase,
    Seq2SeqTrainingArguments,
    set_seed,
)
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

from ..common.hub_ids import check_language_code
from ..common.outputs import (
    OWN_ENTRIES,
    claimed_output_folder,
    staged_outputs,
    write_failures_reported,
)
from ..common.records import (
    ALPHA_HISTORY_FILE,
    CONVERTED_TAG,
    PREDICTIONS_FILE,
    SCALE_HISTORY_FILE,
    SUMMARY_FILE,
    SYNTHETIC_DATA,
    framework_versions,
)
from ..errors import HfEntmaxFileNotFoundError, HfEntmaxInterrupted, HfEntmaxValueError
from ..modeling.configuration_adaptive_entmax_marian import position_limit
from ..modeling.modeling_adaptive_entmax_marian import AdaptiveEntmaxMarianMTModel
from .arguments import DataArguments, ModelArguments
from .data import load_parallel_data, report_truncation, run_examples
from .metrics import sacrebleu_signatures, translation_metrics
from .model_loading import (
    StartingPoint,
    describe_alpha,
    describe_positions_line,
    describe_scaling,
    load_model,
    read_starting_point,
)
from .recipes import apply_recipe
from .records import alpha_history, evaluations, plain, scale_history
from .tokenizer import train_joint_tokenizer
from .trainer import AdaptiveEntmaxTrainer, is_alpha_parameter


logger = logging.getLogger(__name__)

__all__ = ["train"]
DEFAULT_NUM_BEAMS = 4


@dataclass
class Stages:
    """What a run does: train, evaluate on the validation split, predict (and score) the test split."""

    train: bool
    evaluate: bool
    predict: bool


def choose_stages(training_args: Seq2SeqTrainingArguments, splits: datasets.DatasetDict) -> Stages:
    """The stages of a run from ``do_train``/``do_eval``/``do_predict``: each True (run it; its data is required),
    False (skip it) or None (run it if the data has the split, as `hf-entmax train` sets the flags not given).

    All three False, as `Seq2SeqTrainingArguments` has them by default, means: train, then evaluate and predict with
    the data there is.

    Raises:
        HfEntmaxValueError: a stage required without its data.
    """
    flags = {"train": training_args.do_train, "validation": training_args.do_eval, "test": training_args.do_predict}
    if not any(flags.values()) and None not in flags.values():
        flags = {"train": True, "validation": None, "test": None}
    for split, flag, files in (
        ("train", "--do_train", "--train_file (or --train_source_file/--train_target_file)"),
        ("validation", "--do_eval", "--validation_file (or its source/target files, or a dataset with such a split)"),
        ("test", "--do_predict", "--test_file (or its source/target files, or a dataset with such a split)"),
    ):
        if flags[split] and split not in splits:
            raise HfEntmaxValueError(f"{flag} needs {split} data: give {files}")
    run = {split: split in splits if flag is None else flag for split, flag in flags.items()}
    return Stages(train=run["train"], evaluate=run["validation"], predict=run["test"])


def load_tokenizer(
    model_args: ModelArguments,
    train_split: datasets.Dataset | None,
    source_lang: str,
    target_lang: str,
    output_dir: Path,
) -> tuple[PreTrainedTokenizerBase, str]:
    """The named tokenizer, the model's own, one saved by an earlier run in ``output_dir``, or a new one, with a
    description for the summary."""
    if model_args.tokenizer_name is not None:
        return AutoTokenizer.from_pretrained(model_args.tokenizer_name), model_args.tokenizer_name
    if model_args.model_name_or_path is not None:
        return AutoTokenizer.from_pretrained(model_args.model_name_or_path), "the base model's tokenizer"
    if (output_dir / "tokenizer.json").exists():
        # A resumed (or repeated) run keeps the vocabulary its checkpoints were trained with.
        logger.warning(f"using the tokenizer already in {output_dir} (delete tokenizer.json there to train a new one)")
        tokenizer = AutoTokenizer.from_pretrained(output_dir)
        return tokenizer, f"a joint SentencePiece unigram tokenizer ({len(tokenizer):,} pieces) trained on the data"
    if train_split is None:
        raise HfEntmaxValueError("a fresh model needs training data to train its tokenizer on (or --tokenizer_name)")
    texts = (text for pair in train_split["translation"] for text in (pair[source_lang], pair[target_lang]))
    tokenizer = train_joint_tokenizer(texts, vocab_size=model_args.vocab_size)
    tokenizer.save_pretrained(output_dir)
    return tokenizer, f"a joint SentencePiece unigram tokenizer ({len(tokenizer):,} pieces) trained on the data"


def tokenize_splits(
    examples: datasets.DatasetDict,
    tokenizer: PreTrainedTokenizerBase,
    data_args: DataArguments,
    source_lang: str,
    target_lang: str,
    training_args: Seq2SeqTrainingArguments,
) -> datasets.DatasetDict:
    """``input_ids``/``attention_mask`` from the (prefixed) source and ``labels`` from the target of each split's
    ``examples`` (`run_examples`), truncated (the validation and test targets at ``--val_max_target_length``), padded
    only with ``--pad_to_max_length``."""
    padding = "max_length" if data_args.pad_to_max_length else False
    prefix = data_args.source_prefix or ""

    def tokenizer_for(max_target_length: int):
        def tokenize(batch):
            sources = [prefix + pair[source_lang] for pair in batch["translation"]]
            targets = [pair[target_lang] for pair in batch["translation"]]
            features = tokenizer(sources, max_length=data_args.max_source_length, padding=padding, truncation=True)
            labels = tokenizer(text_target=targets, max_length=max_target_length, padding=padding, truncation=True)
            features["labels"] = labels["input_ids"]
            if padding and data_args.ignore_pad_token_for_loss:
                # Padding the labels to a fixed length adds pad tokens, which must not count in the loss.
                features["labels"] = [
                    [token if token != tokenizer.pad_token_id else -100 for token in label]
                    for label in labels["input_ids"]
                ]
            return features

        return tokenize

    tokenized = {}
    with training_args.main_process_first(desc="tokenizing"):
        for split_name, split in examples.items():
            _, max_target_length = data_args.split_limits(split_name)
            tokenized[split_name] = split.map(
                tokenizer_for(max_target_length),
                batched=True,
                remove_columns=split.column_names,
                num_proc=data_args.preprocessing_num_workers,
                load_from_cache_file=not data_args.overwrite_cache,
                desc=f"Tokenizing {split_name}",
            )
    return datasets.DatasetDict(tokenized)


def mean_tokens_per_example(split: datasets.Dataset) -> float:
    total = sum(len(ids) for ids in split["input_ids"]) + sum(len(ids) for ids in split["labels"])
    return round(total / len(split), 2)


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


# What a run writes before anything else: the tokenizer (a folder of these and checkpoints is a run's).
_FIRST_FILES = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}


def holds_only_checkpoints(folder: Path) -> bool:
    """Whether ``folder`` holds nothing but a run's tokenizer files and AdaptiveEntmaxMarian ``checkpoint-<step>``
    folders: an earlier run killed before it finished, or checkpoints copied to resume from, written before output
    folders had markers."""
    for entry in folder.iterdir():
        if entry.name in _FIRST_FILES or entry.name in OWN_ENTRIES:
            continue
        step = entry.name.removeprefix("checkpoint-")
        if not (entry.is_dir() and step.isdigit()):
            return False
        try:
            model_type = json.loads((entry / "config.json").read_text(encoding="utf-8")).get("model_type")
        except (OSError, ValueError, AttributeError):
            return False
        if model_type != AdaptiveEntmaxMarianMTModel.config_class.model_type:
            return False
    return True


def claimed_output_dir(model_args: ModelArguments, training_args: Seq2SeqTrainingArguments):
    """``--output_dir`` held for this run (`claimed_output_folder`): a folder the run creates, an earlier run's (by
    its marker, or `holds_only_checkpoints`), or any with ``--overwrite_output_dir``; never the model trained from.

    Raises:
        HfEntmaxValueError: a file, the starting model, or a folder of other files; another run holds it.
        HfEntmaxWriteError: it cannot be created.
    """
    output_dir = Path(training_args.output_dir)
    start = model_args.model_name_or_path
    if start is not None and Path(start).exists() and Path(start).resolve() == output_dir.resolve():
        raise HfEntmaxValueError(
            f"--output_dir {output_dir} is the model being trained from (--model_name_or_path): write the new "
            "model to another folder"
        )
    return claimed_output_folder(
        output_dir,
        "train",
        "--output_dir",
        overwrite=bool(getattr(training_args, "overwrite_output_dir", False)),
        earlier_output=holds_only_checkpoints,
        main_process=training_args.process_index == 0,
    )


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


def describe_data(data_args: DataArguments) -> str | dict:
    """The summary's "data": the synthetic pair, a Hub dataset id, or the local files and folders by flag."""
    if data_args.uses_synthetic_data():
        return SYNTHETIC_DATA
    if data_args.dataset_name is not None and not Path(data_args.dataset_name).exists():
        return data_args.dataset_name
    local = dict(data_args.local_files())
    if data_args.dataset_name is not None:
        local["dataset_name"] = data_args.dataset_name  # a local folder means nothing on the Hub
    # The summary is published with the model: an absolute path would tell where the files lay (and whose they were).
    return {flag: Path(path).name if Path(path).is_absolute() else path for flag, path in local.items()}


def converted_from_marian(start: StartingPoint) -> bool:
    """Whether the starting checkpoint is a local folder that `hf-entmax convert` wrote (its card says so)."""
    card_path = Path(start.name or "") / "README.md"
    if start.kind != "adaptive_entmax_marian" or not card_path.is_file():
        return False
    try:
        return CONVERTED_TAG in (ModelCard.load(card_path).data.tags or [])
    except (OSError, ValueError):  # a hand-written README without card metadata
        return False


def generation_settings(data_args: DataArguments, training_args: Seq2SeqTrainingArguments) -> tuple[int, int]:
    """Beams and length limit of evaluation: ``--num_beams`` (run_translation's name) or ``--generation_num_beams``,
    ``--generation_max_length`` or ``--val_max_target_length``.

    Raises:
        HfEntmaxValueError: if ``--num_beams`` and ``--generation_num_beams`` disagree.
    """
    beams = {data_args.num_beams, training_args.generation_num_beams} - {None}
    if len(beams) > 1:
        raise HfEntmaxValueError(
            f"--num_beams {data_args.num_beams} and --generation_num_beams {training_args.generation_num_beams} "
            "disagree; give one of them"
        )
    num_beams = beams.pop() if beams else DEFAULT_NUM_BEAMS
    max_length = training_args.generation_max_length or data_args.val_max_target_length
    return num_beams, max_length


def check_lengths(model: AdaptiveEntmaxMarianMTModel, data_args: DataArguments, max_length: int) -> None:
    """Refuse lengths the model has no positions for (they would fail mid-run, deep inside the embeddings); relative
    positions take any length."""
    positions = position_limit(model.config)
    if positions is None:
        return
    for flag, value in (
        ("--max_source_length", data_args.max_source_length),
        ("--max_target_length", data_args.max_target_length),
        ("--val_max_target_length / --generation_max_length", max_length),
    ):
        if value > positions:
            raise HfEntmaxValueError(
                f"{flag} {value} is longer than the model's {positions} positions (max_position_embeddings)"
            )


def describe_recipe(
    model_args: ModelArguments, training_args: Seq2SeqTrainingArguments, alpha_learning_rate: float | None
) -> str:
    """The optimiser settings the run trains with, in one line; ``alpha_learning_rate`` None: α is not learned."""
    warmup = training_args.warmup_steps
    warmup_text = f"{warmup:.0%} of the steps" if 0 < warmup < 1 else f"{int(warmup)} steps"
    alpha_text = "α fixed" if alpha_learning_rate is None else f"α learning rate {alpha_learning_rate:g}"
    return (
        f"Recipe {model_args.recipe} (flags given win): learning rate {training_args.learning_rate:g}, "
        f"{plain(training_args.lr_scheduler_type)} schedule, warm-up {warmup_text}, {plain(training_args.optim)} "
        f"betas ({training_args.adam_beta1:g}, {training_args.adam_beta2:g}), weight decay "
        f"{training_args.weight_decay:g}, gradient clipping {training_args.max_grad_norm:g}, {alpha_text}"
    )


def hyperparameters(
    model_args: ModelArguments,
    training_args: Seq2SeqTrainingArguments,
    trainer: AdaptiveEntmaxTrainer,
    num_beams: int,
) -> dict:
    """The settings that shaped training, as plain values; only the one of max_steps and epochs that governed."""
    model_config = trainer.model.config
    values = {
        "learning_rate": training_args.learning_rate,
        "alpha_learning_rate": trainer.effective_alpha_learning_rate,
        "lr_scheduler_type": plain(training_args.lr_scheduler_type),
        "warmup_steps": training_args.warmup_steps,
        "optimizer": f"{plain(training_args.optim)} (betas=({training_args.adam_beta1:g}, "
        f"{training_args.adam_beta2:g}), epsilon={training_args.adam_epsilon:g})",
        "weight_decay": training_args.weight_decay,
        "max_grad_norm": training_args.max_grad_norm,
        "label_smoothing_factor": training_args.label_smoothing_factor,
        "dropout": model_config.dropout,
        "attention_dropout": model_config.attention_dropout,
        "per_device_train_batch_size": training_args.per_device_train_batch_size,
        "gradient_accumulation_steps": training_args.gradient_accumulation_steps,
        "total_train_batch_size": training_args.per_device_train_batch_size
        * training_args.gradient_accumulation_steps
        * training_args.world_size,
    }
    if training_args.max_steps > 0:
        values["max_steps"] = training_args.max_steps
    else:
        values["num_train_epochs"] = training_args.num_train_epochs
    values.update(generation_num_beams=num_beams, seed=training_args.seed)
    return values


def write_predictions(path: Path, predictions: np.ndarray, tokenizer: PreTrainedTokenizerBase) -> None:
    """The test split's translations, one a line, as run_translation.py writes ``generated_predictions.txt``."""
    predictions = np.where(predictions < 0, tokenizer.pad_token_id, predictions)  # -100 marks padding
    texts = tokenizer.batch_decode(predictions, skip_special_tokens=True, clean_up_tokenization_spaces=True)
    path.write_text("".join(" ".join(text.split()) + "\n" for text in texts), encoding="utf-8")


def run_stages(
    trainer: AdaptiveEntmaxTrainer,
    stages: Stages,
    tokenized: datasets.DatasetDict,
    train_result: transformers.trainer_utils.TrainOutput | None,
    staging: Path,
    num_beams: int,
    max_length: int,
) -> dict:
    """Save the trained model and evaluate and predict as ``stages`` ask, writing every file into ``staging`` (the
    trainer writes there, see `trainer_writes_to`); returns the metrics of all stages."""
    metrics = {}
    if stages.train:
        trainer.save_model()
        train_metrics = dict(train_result.metrics, train_samples=len(tokenized["train"]))
        trainer.log_metrics("train", train_metrics)
        trainer.save_metrics("train", train_metrics)
        trainer.save_state()
        metrics.update(
            {key if key.startswith("train_") else f"train_{key}": value for key, value in train_metrics.items()}
        )
    if stages.evaluate:
        eval_metrics = trainer.evaluate(metric_key_prefix="eval", num_beams=num_beams, max_length=max_length)
        eval_metrics["eval_samples"] = len(tokenized["validation"])
        trainer.log_metrics("eval", eval_metrics)
        trainer.save_metrics("eval", eval_metrics)
        metrics.update(eval_metrics)
    if stages.predict:
        prediction = trainer.predict(
            tokenized["test"], metric_key_prefix="test", num_beams=num_beams, max_length=max_length
        )
        test_metrics = dict(prediction.metrics, test_samples=len(tokenized["test"]))
        trainer.log_metrics("test", test_metrics)
        trainer.save_metrics("test", test_metrics)
        metrics.update(test_metrics)
        if trainer.is_world_process_zero():
            write_predictions(staging / PREDICTIONS_FILE, prediction.predictions, trainer.processing_class)
    return metrics


@dataclass
class RunFacts:
    """What a run settled before training, for its summary."""

    output_dir: Path
    source_lang: str
    target_lang: str
    tokenizer_description: str
    start: StartingPoint
    stages: Stages
    num_beams: int
    truncated: dict[str, dict[str, int]]  # per split, the examples the length limits cut (`report_truncation`)


def run_summary(
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: Seq2SeqTrainingArguments,
    trainer: AdaptiveEntmaxTrainer,
    facts: RunFacts,
    tokenized: datasets.DatasetDict,
    metrics: dict,
) -> dict:
    """The run's summary (``training_summary.json``), as plain values."""
    model = trainer.model
    start = facts.start
    base_is_local = start.name is not None and Path(start.name).expanduser().exists()
    return {
        "model_name": facts.output_dir.resolve().name,
        "source_lang": facts.source_lang,
        "target_lang": facts.target_lang,
        "data": describe_data(data_args),
        "dataset_config_name": data_args.dataset_config_name,
        "num_examples": {split_name: len(split) for split_name, split in tokenized.items()},
        # Source plus target tokens of an average training pair: turns examples/s into tokens/s.
        "mean_tokens_per_example": mean_tokens_per_example(tokenized["train"]) if "train" in tokenized else None,
        # A local folder is recorded by its name: the summary is published with the model.
        "base_model": Path(start.name).name if base_is_local else start.name,
        "base_model_is_local": base_is_local,
        "base_model_type": None if start.kind == "fresh" else start.kind,
        "base_model_converted": converted_from_marian(start),
        "model_size": model_args.model_size if start.kind == "fresh" else None,
        "num_parameters": model.num_parameters(),
        "global_step": trainer.state.global_step,
        "world_size": training_args.world_size,
        "did_train": facts.stages.train,
        "metrics": {
            key: value for key, value in metrics.items() if isinstance(value, (int, float)) and math.isfinite(value)
        },
        "sacrebleu_signatures": sacrebleu_signatures(),
        "alphas": {kind: alphas.tolist() for kind, alphas in model.get_alphas().items()},
        # The most tokens an input may have: None for relative positions, which take any length.
        "positions": {"type": model.config.position_embedding_type, "limit": position_limit(model.config)},
        "alpha_settings": {
            kind: vars(model.config.alpha_settings(kind)) for kind in ("encoder_self", "decoder_self", "cross")
        },
        # The per-head parameters of learned query scaling, as the model gives them (per-token scaling has none).
        "attention_scales": {
            kind: {name: value.tolist() if torch.is_tensor(value) else value for name, value in scales.items()}
            for kind, scales in model.get_attention_scales().items()
        },
        "recipe": model_args.recipe if facts.stages.train else None,  # an evaluation-only run used no recipe
        "hyperparameters": hyperparameters(model_args, training_args, trainer, facts.num_beams),
        "evaluations": evaluations(trainer.state.log_history),
        "tokenizer": facts.tokenizer_description,
        "preprocessing": {
            "max_source_length": data_args.max_source_length,
            "max_target_length": data_args.max_target_length,
            "val_max_target_length": data_args.val_max_target_length,
            "source_prefix": data_args.source_prefix,
            "document_context": None
            if data_args.document_context is None
            else {
                "max_sentences": data_args.document_context,
                "ratio": data_args.document_context_ratio,
                "document_column": data_args.document_column,
            },
            "truncated": facts.truncated,
        },
        "framework_versions": framework_versions(),
    }


def write_run_records(folder: Path, summary: dict, log_history: list[dict], trained: bool) -> None:
    """The summary, and for a run that trained the α (and scale) history, into ``folder``."""
    (folder / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    if trained:
        (folder / ALPHA_HISTORY_FILE).write_text(json.dumps(alpha_history(log_history)) + "\n")
        scales = scale_history(log_history)
        if scales["beta"]:
            (folder / SCALE_HISTORY_FILE).write_text(json.dumps(scales) + "\n")
        # Trainer pickles its arguments next to the model; the folder is meant for the Hub, which should get
        # safetensors and JSON only (each checkpoint-* keeps its copy, training_summary.json the values).
        (folder / "training_args.bin").unlink(missing_ok=True)


@contextlib.contextmanager
def trainer_writes_to(trainer: AdaptiveEntmaxTrainer, folder: Path) -> Iterator[None]:
    """While the block runs, Trainer's writers (`save_model`, `save_metrics`, `save_state`) write into ``folder``
    instead of ``--output_dir``: the staging folder of the run's final outputs. ``all_results.json`` starts as the
    output folder's, which `save_metrics` adds to."""
    output_dir = Path(trainer.args.output_dir)
    if trainer.is_world_process_zero() and (output_dir / "all_results.json").is_file():
        shutil.copyfile(output_dir / "all_results.json", folder / "all_results.json")
    trainer.args.output_dir = str(folder)
    try:
        yield
    finally:
        trainer.args.output_dir = str(output_dir)


def train(model_args: ModelArguments, data_args: DataArguments, training_args: Seq2SeqTrainingArguments) -> dict:
    """Train, evaluate and predict as the stages ask; returns the run's summary (also in ``training_summary.json``).

    The output folder loads with ``AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)``
    and ``pipeline("translation", model=folder, trust_remote_code=True)``, also without hf_entmax. Its model card
    (README.md) is one more call: ``hf_entmax.hub.model_card.write_training_card(training_args.output_dir)``.

    The optimiser settings not given come from the recipe for where the model starts (`recipes.apply_recipe`, as
    `hf-entmax train` applies it; from Python, a setting equal to Trainer's default counts as not given, and
    ``model_args.recipe = "none"`` keeps Trainer's defaults), and so do the model's (`recipes.START_DEFAULTS`).
    """
    if not model_args.recipe_applied:
        training_args = apply_recipe(model_args, training_args)
    with claimed_output_dir(model_args, training_args) as output_dir:
        try:
            with write_failures_reported(output_dir, "--output_dir"):
                return _train(model_args, data_args, training_args, output_dir)
        except KeyboardInterrupt:
            last = last_complete_checkpoint(output_dir)
            resume = (
                f"resume from {last.name} with --resume_from_checkpoint true" if last else "no checkpoint to resume"
            )
            raise HfEntmaxInterrupted(
                f"--output_dir {output_dir}: what was written before is intact ({resume})"
            ) from None


def _train(
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: Seq2SeqTrainingArguments,
    output_dir: Path,
) -> dict:
    """`train` in the output folder it holds."""
    transformers.utils.logging.set_verbosity_warning()
    set_seed(training_args.seed)
    checkpoint = resolve_checkpoint(training_args)

    raw, source_lang, target_lang = load_parallel_data(data_args)
    # The codes go into the model card's metadata: refused now rather than after the run.
    check_language_code(source_lang, "--source_lang")
    check_language_code(target_lang, "--target_lang")
    stages = choose_stages(training_args, raw)
    start = read_starting_point(model_args.model_name_or_path)
    data_args.resolve_lengths(None if start.config is None else position_limit(start.config))
    if not stages.train and start.kind == "fresh":
        raise HfEntmaxValueError(
            "nothing to evaluate: without training (--do_train False) give the model with --model_name_or_path"
        )
    if stages.train and training_args.eval_strategy != "no" and "validation" not in raw:
        raise HfEntmaxValueError(
            f"--eval_strategy {plain(training_args.eval_strategy)} needs validation data: give --validation_file "
            "(or --validation_source_file/--validation_target_file)"
        )
    num_beams, max_length = generation_settings(data_args, training_args)

    with training_args.main_process_first(desc="tokenizer"):
        tokenizer, tokenizer_description = load_tokenizer(
            model_args, raw.get("train"), source_lang, target_lang, output_dir
        )
    model = load_model(
        model_args, tokenizer, max(data_args.max_source_length, data_args.max_target_length), start=start
    )
    check_lengths(model, data_args, max_length)
    if start.kind == "fresh" and model_args.tokenizer_name is None:
        # A tokenizer trained for the model truncates (truncation=True) where the model's inputs end: at its positions,
        # or nowhere for relative ones (`translate` and the pipeline read this limit).
        tokenizer.model_max_length = position_limit(model.config) or VERY_LARGE_INTEGER
    model.generation_config.num_beams = num_beams
    model.generation_config.max_length = max_length

    examples = run_examples(raw, data_args)
    tokenized = tokenize_splits(examples, tokenizer, data_args, source_lang, target_lang, training_args)
    truncated = report_truncation(examples, tokenized, tokenizer, data_args, source_lang, target_lang)
    # BLEU needs generated text: evaluation always generates (with the run's beam size and length limit).
    training_args.predict_with_generate = True
    training_args.generation_num_beams = num_beams
    training_args.generation_max_length = max_length
    trainer = AdaptiveEntmaxTrainer(
        model=model,
        args=training_args,
        train_dataset=tokenized.get("train") if stages.train else None,
        eval_dataset=tokenized.get("validation"),
        data_collator=DataCollatorForSeq2Seq(
            tokenizer,
            model=model,
            label_pad_token_id=-100 if data_args.ignore_pad_token_for_loss else tokenizer.pad_token_id,
        ),
        processing_class=tokenizer,
        compute_metrics=translation_metrics(tokenizer),
        alpha_learning_rate=model_args.alpha_learning_rate,
    )
    given_attention = model_args.attention_options_given()
    if trainer.is_world_process_zero():
        if stages.train:
            learns_alpha = any(
                is_alpha_parameter(name) and parameter.requires_grad for name, parameter in model.named_parameters()
            )
            alpha_learning_rate = trainer.effective_alpha_learning_rate if learns_alpha else None
            print(describe_recipe(model_args, training_args, alpha_learning_rate))
        print(describe_positions_line(model, start, model_args.position_options_given()))
        print("α per attention type:")
        for line in describe_alpha(model, start, given_attention):
            print(f"  {line}")
        scaling_lines = describe_scaling(model, start, given_attention)
        if scaling_lines:
            print("Query scaling per attention type:")
            for line in scaling_lines:
                print(f"  {line}")

    main_process = trainer.is_world_process_zero()
    # What a checkpoint writes: the weights, and AdamW's two moments of each (the optimiser state).
    checkpoint_bytes = 3 * sum(parameter.numel() * parameter.element_size() for parameter in model.parameters())
    with write_failures_reported(output_dir, "--output_dir", lambda: checkpoint_bytes):
        train_result = trainer.train(resume_from_checkpoint=checkpoint) if stages.train else None
        # The final outputs are staged and moved into place at the end: a full disk or a kill on the way leaves the
        # folder's earlier outputs as they were.
        with staged_outputs(output_dir, main_process=main_process) as staging, trainer_writes_to(trainer, staging):
            metrics = run_stages(trainer, stages, tokenized, train_result, staging, num_beams, max_length)
            summary = run_summary(
                model_args,
                data_args,
                training_args,
                trainer,
                RunFacts(
                    output_dir, source_lang, target_lang, tokenizer_description, start, stages, num_beams, truncated
                ),
                tokenized,
                metrics,
            )
            if main_process:
                write_run_records(staging, summary, trainer.state.log_history, stages.train)
    return summary
