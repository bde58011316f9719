"""Model cards for AdaptiveEntmaxMarian checkpoints, rendered from `hf_entmax/model_cards/` with huggingface_hub.

The card's YAML metadata (languages, license, tags, datasets, base model and its relation, a `model-index` with
BLEU/chrF) is written by `huggingface_hub.ModelCardData`, so `ModelCard.load` reads back exactly what was written.
The body says where the weights came from (converted, fine-tuned or trained from scratch), shows how to load the
model with `trust_remote_code=True`, states its intended uses and limitations, tabulates α per layer and head,
the final scores with their sacreBLEU signatures and the evaluations during training, and describes the
training: data, tokenizer, preprocessing, hyper-parameters and framework versions.
"""

import importlib.resources
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..common.config import (
    LAYER_STYLE_DESCRIPTIONS,
    describe_positions,
    describe_scaling_method,
    scaled_heads_text,
)
from ..common.hub_ids import check_language_code, check_repo_id, is_hub_id
from ..common.model_folder import load_pretrained
from ..common.records import CONVERTED_TAG, SUMMARY_FILE, SYNTHETIC_DATA
from ..errors import HfEntmaxFileNotFoundError, HfEntmaxValueError
from ..modeling.configuration_adaptive_entmax_marian import ATTENTION_TITLES, ATTENTION_TYPES
from ..modeling.modeling_adaptive_entmax_marian import AdaptiveEntmaxMarianMTModel


TEMPLATE_NAME = "adaptive_entmax_marian.md"
DEFAULT_TAGS = ["entmax", "sparse-attention", "adaptive-sparsity", "marian", "translation", "custom_code"]
BASE_MODEL_RELATIONS = ("converted", "fine-tuned", "from-scratch")
# Our relations in the Hub's `base_model_relation` metadata (which knows adapter, merge, quantized, finetune).
HUB_BASE_MODEL_RELATIONS = {"fine-tuned": "finetune"}
SYNTHETIC_INTENDED_USE = (
    "A demonstration: it was trained on hf_entmax's synthetic language pair, an artificial language made for "
    "testing, so it translates no natural language."
)
EVALUATION_ONLY_NOTE = "This run evaluated the checkpoint without training it: the weights are the base model's."
_ENUM_REPR = re.compile(r"[A-Z]\w*\.([A-Z][A-Z0-9_]*)")
# License ids as the Hub's metadata takes them: lower-case SPDX-style (apache-2.0, mit, cc-by-4.0, other).
LICENSE_ID = re.compile(r"[a-z0-9][a-z0-9.+-]*")
# What the summary holds under these keys, when it holds them: anything else is not a `hf-entmax train` summary.
_SUMMARY_TYPES = {
    "metrics": dict,
    "num_examples": dict,
    "evaluations": list,
    "preprocessing": dict,
    "hyperparameters": dict,
    "sacrebleu_signatures": dict,
    "framework_versions": dict,
}
# A sentence for the usage snippet, in the source language when it is one of these.
EXAMPLE_SENTENCES = {
    "de": "Ein kleiner Hund läuft durch den Park.",
    "en": "A small dog runs through the park.",
    "es": "Un perro pequeño corre por el parque.",
    "fr": "Un petit chien court dans le parc.",
    "it": "Un piccolo cane corre nel parco.",
    "ro": "Un câine mic aleargă prin parc.",
}


@dataclass
class TranslationScores:
    """BLEU, chrF (sacreBLEU scale, 0–100) and loss of the model on one split of one dataset."""

    dataset_name: str
    split: str
    bleu: float | None = None
    chrf: float | None = None
    dataset_type: str = "custom"  # the dataset's Hub id, or "custom" for local files
    dataset_config: str | None = None
    loss: float | None = None


@dataclass
class ModelCardInfo:
    """What a model card says beyond what the model itself knows (its α, its size).

    Attributes:
        model_id: The repo id (or path) shown in the usage snippet.
        model_name: Title of the card and name of the `model-index` entry (defaults to the last part of `model_id`).
        source_lang, target_lang: Language codes of the translation direction.
        license: An SPDX-like license id, as the Hub expects.
        datasets: Hub ids of the training datasets (local files go into `training_data` instead).
        base_model: Hub id of the checkpoint this model was converted or fine-tuned from (the card's metadata).
        base_model_relation: How this model came from its base: "converted" (`hf-entmax convert`: every weight
            carried over, only the attention changed), "fine-tuned" (trained further from the base's weights) or
            "from-scratch" (no base model); None when unknown.
        base_model_local_name: The folder name of a base model that is not on the Hub (named in the text only).
        base_model_type: What the base was: "marian" (softmax attention) or "adaptive_entmax_marian".
        base_model_converted: The base was itself an `hf-entmax convert` output (an AdaptiveEntmaxMarian model).
        eval_results: Final BLEU/chrF per dataset split; they go into the metadata's `model-index` and a table.
        training_evaluations: One row per evaluation during training: ``{"step", "epoch", "training_loss",
            "validation_loss", "bleu", "chrf"}`` (any may be missing).
        sacrebleu_signatures: ``{"bleu_signature": …, "chrf_signature": …}``, shown under the results.
        training_data: A sentence describing the training data.
        tokenizer: A sentence describing the tokenizer.
        preprocessing: Preprocessing settings (``max_source_length``, ``source_prefix``, …).
        hyperparameters: Training hyper-parameters (for a conversion: its settings), listed as plain values.
        training_note: A sentence shown in the training section (e.g. that a run only evaluated).
        intended_use: What the model is for; by default derived from the relation and the languages.
        framework_versions: ``{package: version}`` of the software that trained (or wrote) the model.
        mean_sparsity: Share of exact zeros in attention per attention type, if measured
            (`hf_entmax.analysis.findings.mean_sparsity`: 1 − the analysis's mean density).
        analysis: Markdown of the card's attention analysis section (from an `hf-entmax analyze` report, see
            `hf_entmax.analysis.report.model_card_section`), if any.
        tags: Tags added to the default ones (`entmax`, `sparse-attention`, …).
    """

    model_id: str = "path/to/this-model"
    model_name: str | None = None
    source_lang: str | None = None
    target_lang: str | None = None
    license: str = "apache-2.0"
    datasets: list[str] = field(default_factory=list)
    base_model: str | None = None
    base_model_relation: str | None = None
    base_model_local_name: str | None = None
    base_model_type: str | None = None
    base_model_converted: bool = False
    eval_results: list[TranslationScores] = field(default_factory=list)
    training_evaluations: list[dict[str, Any]] = field(default_factory=list)
    sacrebleu_signatures: dict[str, str] = field(default_factory=dict)
    training_data: str | None = None
    tokenizer: str | None = None
    preprocessing: dict[str, Any] = field(default_factory=dict)
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    training_note: str | None = None
    intended_use: str | None = None
    framework_versions: dict[str, str] = field(default_factory=dict)
    mean_sparsity: dict[str, float] | None = None
    analysis: str | None = None
    tags: list[str] = field(default_factory=list)

    def __post_init__(self):
        if self.base_model_relation is not None and self.base_model_relation not in BASE_MODEL_RELATIONS:
            raise HfEntmaxValueError(
                f"base_model_relation {self.base_model_relation!r}: expected one of {', '.join(BASE_MODEL_RELATIONS)}"
            )
        check_card_fields(vars(self))

    @classmethod
    def from_training_summary(cls, summary: Mapping[str, Any], **overrides) -> "ModelCardInfo":
        """What `hf-entmax train`'s ``training_summary.json`` tells: name, languages, data, base model, results,
        evaluations during training, hyper-parameters, tokenizer, preprocessing and versions.

        ``overrides`` are fields that win over the summary's. ``datasets`` also names the evaluation data in the
        `model-index` (its first entry), and a ``base_model`` given for a run without one makes it "fine-tuned".
        """
        for key, kind in _SUMMARY_TYPES.items():
            if summary.get(key) is not None and not isinstance(summary[key], kind):
                raise HfEntmaxValueError(
                    f"{SUMMARY_FILE}: {key} holds a JSON {type(summary[key]).__name__}, not a JSON "
                    f"{'object' if kind is dict else 'array'}; write it again with `hf-entmax train`"
                )
        data = summary.get("data")
        dataset_config = summary.get("dataset_config_name")
        datasets, dataset_type, intended_use = [], "custom", None
        if isinstance(data, Mapping):
            dataset_name = "local files"
            training_data = "local files (" + ", ".join(f"`{Path(str(path)).name}`" for path in data.values()) + ")"
        elif data == SYNTHETIC_DATA:
            dataset_name = "hf_entmax synthetic pair"
            training_data = "the built-in synthetic language pair of hf_entmax (`hf-entmax demo`)"
            intended_use = SYNTHETIC_INTENDED_USE
        elif isinstance(data, str) and is_hub_id(data):
            datasets, dataset_type, dataset_name = [data], data, data
            training_data = f"[{data}](https://huggingface.co/datasets/{data})"
        elif isinstance(data, str):
            dataset_name = Path(data).name
            training_data = f"a local dataset (`{dataset_name}`)"
        else:
            dataset_name, training_data = "unknown", None
        if dataset_config is not None:
            check_card_text(dataset_config, f"{SUMMARY_FILE} dataset_config_name")
        if training_data and dataset_config:
            training_data += f", configuration `{dataset_config}`"
        if training_data and (sizes := summary.get("num_examples")):
            training_data += " (" + ", ".join(f"{split}: {count:,} pairs" for split, count in sizes.items()) + ")"
        if overrides.get("datasets"):  # e.g. `hf-entmax export --dataset`: the data the local files came from
            if overrides["datasets"][0] != data:
                dataset_config = None
            dataset_type = dataset_name = overrides["datasets"][0]

        metrics = summary.get("metrics") or {}
        for prefix in ("eval", "test"):
            for metric in ("bleu", "chrf", "loss"):
                key = f"{prefix}_{metric}"
                check_score(metrics.get(key), f"{SUMMARY_FILE} metrics.{key}", finite=metric != "loss")
        eval_results = [
            TranslationScores(
                dataset_name=dataset_name,
                dataset_type=dataset_type,
                dataset_config=dataset_config,
                split=split,
                bleu=metrics.get(f"{prefix}_bleu"),
                chrf=metrics.get(f"{prefix}_chrf"),
                loss=metrics.get(f"{prefix}_loss"),
            )
            for prefix, split in (("eval", "validation"), ("test", "test"))
            if f"{prefix}_bleu" in metrics or f"{prefix}_chrf" in metrics
        ]

        did_train = summary.get("did_train", True) is not False
        base = summary.get("base_model")
        # Summaries record whether base_model is a local folder (by its name only); older ones, the path as given.
        local = summary.get("base_model_is_local")
        base_is_hub_id = bool(base) and (not local if local is not None else is_hub_id(base))
        fields = {
            "model_name": summary.get("model_name"),
            "source_lang": summary.get("source_lang"),
            "target_lang": summary.get("target_lang"),
            "datasets": datasets,
            "base_model": base if base_is_hub_id else None,
            "base_model_local_name": Path(base).name if base and not base_is_hub_id else None,
            "base_model_type": summary.get("base_model_type"),
            "base_model_converted": bool(summary.get("base_model_converted")),
            "eval_results": eval_results,
            "training_evaluations": list(summary.get("evaluations") or []),
            "sacrebleu_signatures": dict(summary.get("sacrebleu_signatures") or {}),
            "training_data": training_data,
            "tokenizer": summary.get("tokenizer"),
            "preprocessing": dict(summary.get("preprocessing") or {}),
            "hyperparameters": training_hyperparameters(summary) if did_train else {},
            "training_note": None if did_train else EVALUATION_ONLY_NOTE,
            "intended_use": intended_use,
            "framework_versions": dict(summary.get("framework_versions") or {}),
        }
        if fields["model_name"]:
            fields["model_id"] = f"path/to/{fields['model_name']}"
        # What the summary gave is checked under its name (the overrides, under theirs, when the card is made).
        check_card_fields({name: value for name, value in fields.items() if name not in overrides}, f"{SUMMARY_FILE} ")
        fields.update(overrides)
        if "base_model_relation" not in overrides:
            has_base = fields["base_model"] or fields["base_model_local_name"]
            if did_train:
                fields["base_model_relation"] = "fine-tuned" if has_base else "from-scratch"
            elif fields["base_model_type"] == "marian":
                fields["base_model_relation"] = "converted"  # loaded from Marian and saved: weights unchanged
        return cls(**fields)


def check_card_text(value: object, name: str) -> str:
    """``value`` if it is one line of printable text (what a card field that lands in the YAML metadata or a title
    may hold: a line break could start a line of its own there); a one-line error naming ``name`` otherwise."""
    if not isinstance(value, str) or not value.strip() or not value.isprintable():
        raise HfEntmaxValueError(f"{name} must be one line of printable text, got {value!r}")
    return value


def check_license(value: object, name: str) -> str:
    """``value`` if it is a license id as the Hub's metadata takes them (`LICENSE_ID`: apache-2.0, mit, other)."""
    if not isinstance(value, str) or not LICENSE_ID.fullmatch(value):
        raise HfEntmaxValueError(
            f"{name} {value!r} is not a license id: expected a lower-case id such as apache-2.0, mit, cc-by-4.0 or "
            "other (letters, digits, '.', '-', '+')"
        )
    return value


def check_score(value: object, name: str, *, finite: bool = True) -> None:
    """Refuse a score that is not a number (or None): the model-index metadata holds BLEU and chrF as numbers, so
    they must also be ``finite``; a loss may be nan (a run that diverged)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (finite and not math.isfinite(value)):
        raise HfEntmaxValueError(f"{name} must be a {'finite ' if finite else ''}number, got {value!r}")


def check_card_fields(fields: Mapping[str, Any], prefix: str = "") -> None:
    """Check the `ModelCardInfo` fields in ``fields`` that go into the card's YAML metadata, its title or its code
    snippet: a license id, language codes, Hub ids, one-line names and tags, numeric scores. Text from a user or a
    file then cannot add lines (keys) to the metadata. Errors name the field after ``prefix`` (e.g. the file).

    Raises:
        HfEntmaxValueError: naming the field and its value.
    """
    for name, value in fields.items():
        if value is None:
            continue
        where = f"{prefix}{name}"
        if name == "license":
            check_license(value, where)
        elif name in ("source_lang", "target_lang"):
            check_language_code(value, where)
        elif name == "base_model":
            check_repo_id(value, where)
        elif name == "datasets":
            for dataset in value:
                check_repo_id(dataset, where)
        elif name == "tags":
            for tag in value:
                check_card_text(tag, where)
        elif name in ("model_name", "base_model_local_name"):
            check_card_text(value, where)
        elif name == "model_id":
            # Shown inside a Python string in the usage snippet: a quote or a backslash would change the code.
            if '"' in check_card_text(value, where) or "\\" in value:
                raise HfEntmaxValueError(
                    f"{where} must not hold a quote or a backslash (the usage snippet shows it in a Python string), "
                    f"got {value!r}; give the repo id (--repo_id)"
                )
        elif name == "eval_results":
            for scores in value:
                for text in ("dataset_name", "dataset_type", "dataset_config", "split"):
                    if getattr(scores, text) is not None:
                        check_card_text(getattr(scores, text), f"{where} {text}")
                for score in ("bleu", "chrf"):
                    check_score(getattr(scores, score), f"{where} {scores.split} {score}")
                check_score(scores.loss, f"{where} {scores.split} loss", finite=False)


def training_hyperparameters(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The hyper-parameters worth a card line: the recipe, the summary's settings with only the one of
    ``max_steps``/``num_train_epochs`` that governed training, the total batch size, steps and devices."""
    hyperparameters = {"recipe": summary.get("recipe")}
    hyperparameters.update(summary.get("hyperparameters") or {})
    max_steps = hyperparameters.get("max_steps")
    if isinstance(max_steps, (int, float)) and max_steps > 0:  # Trainer: max_steps > 0 overrides the epochs
        hyperparameters.pop("num_train_epochs", None)
    else:
        hyperparameters.pop("max_steps", None)
    batch_size = hyperparameters.get("per_device_train_batch_size")
    if "total_train_batch_size" not in hyperparameters and isinstance(batch_size, int):
        accumulation = hyperparameters.get("gradient_accumulation_steps") or 1
        hyperparameters["total_train_batch_size"] = batch_size * accumulation * (summary.get("world_size") or 1)
    for key in ("global_step", "world_size"):
        hyperparameters[key] = summary.get(key)
    return {name: value for name, value in hyperparameters.items() if value is not None}


def render_model_card(model: AdaptiveEntmaxMarianMTModel, info: ModelCardInfo) -> ModelCard:
    """The model card of ``model``: metadata from ``info``, body from the template, α table from the model."""
    model_name = info.model_name or info.model_id.rstrip("/").split("/")[-1]
    languages = [lang for lang in (info.source_lang, info.target_lang) if lang]
    eval_results = []
    for scores in info.eval_results:
        for metric_type, metric_name, value in (("bleu", "BLEU", scores.bleu), ("chrf", "chrF", scores.chrf)):
            if value is not None:
                eval_results.append(
                    EvalResult(
                        task_type="translation",
                        task_name="Translation",
                        dataset_type=scores.dataset_type,
                        dataset_name=scores.dataset_name,
                        dataset_config=scores.dataset_config,
                        dataset_split=scores.split,
                        metric_type=metric_type,
                        metric_name=metric_name,
                        metric_value=round(float(value), 2),
                    )
                )
    tags = [*DEFAULT_TAGS, *info.tags, *([CONVERTED_TAG] if info.base_model_relation == "converted" else [])]
    # The Hub's model tree knows finetune, adapter, merge and quantized. A conversion changes no weight, which none
    # of them describes: it gets no relation (and the tag above), the text says what happened.
    hub_relation = HUB_BASE_MODEL_RELATIONS.get(info.base_model_relation) if info.base_model else None
    card_data = ModelCardData(
        model_name=model_name,
        language=languages or None,
        license=info.license,
        library_name="transformers",
        pipeline_tag="translation",
        tags=list(dict.fromkeys(tags)),
        datasets=info.datasets or None,
        base_model=info.base_model,
        eval_results=eval_results or None,
        **({"base_model_relation": hub_relation} if hub_relation else {}),
    )
    direction = f" from {info.source_lang} to {info.target_lang}" if info.source_lang and info.target_lang else ""
    summary = (
        f"An adaptively sparse Marian translation model{direction} "
        f"({model.num_parameters():,} parameters, {model.config.encoder_layers} encoder and "
        f"{model.config.decoder_layers} decoder layers, d_model {model.config.d_model})."
    )
    return ModelCard.from_template(
        card_data,
        template_str=importlib.resources.files("hf_entmax").joinpath("model_cards", TEMPLATE_NAME).read_text("utf-8"),
        model_name=model_name,
        model_id=info.model_id,
        summary=summary,
        origin=origin_sentence(info),
        example=EXAMPLE_SENTENCES.get(info.source_lang or "", EXAMPLE_SENTENCES["en"]),
        intended_use=info.intended_use or default_intended_use(info),
        positions=describe_positions(model.config),
        layer_style=LAYER_STYLE_DESCRIPTIONS.get(model.config.layer_style),
        alpha_tables=alpha_tables(model),
        scaling_tables=scaling_tables(model),
        sparsity_table=sparsity_table(info.mean_sparsity),
        analysis=info.analysis,
        results_table=results_table(info.eval_results),
        signatures=signature_lines(info.sacrebleu_signatures),
        evaluations_table=evaluations_table(info.training_evaluations),
        training_data=info.training_data,
        training_items=training_items(info),
        training_note=info.training_note,
        settings_title="Conversion settings"
        if info.base_model_relation == "converted"
        else "Training hyper-parameters",
        hyperparameters={name: plain_text(value) for name, value in info.hyperparameters.items()},
        framework_versions=info.framework_versions,
        versions_verb="Trained" if info.base_model_relation != "converted" else "Converted",
    )


def read_training_summary(path: Path) -> dict:
    """``training_summary.json`` as a dict; a one-line error when it is not a JSON object."""
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise HfEntmaxValueError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(summary, dict):
        raise HfEntmaxValueError(f"{path}: expected a JSON object, found {type(summary).__name__}")
    return summary


def write_training_card(folder: str | os.PathLike) -> Path:
    """Write ``README.md``, the model card of a `hf-entmax train` output, from the folder's training summary and model.

    `hf-entmax train` and `hf-entmax demo` write it after a run that trained; from Python, call it on the output
    folder after `hf_entmax.training.run.train`.

    Returns:
        The card's path.

    Raises:
        HfEntmaxFileNotFoundError: If the folder has no ``training_summary.json``.
        HfEntmaxValueError: If the summary is not a JSON object or the model in the folder cannot be loaded.
    """
    folder = Path(folder)
    summary_path = folder / SUMMARY_FILE
    if not summary_path.is_file():
        raise HfEntmaxFileNotFoundError(f"{folder}: no {SUMMARY_FILE} there (not a hf-entmax train output)")
    summary = read_training_summary(summary_path)
    model = load_pretrained(AdaptiveEntmaxMarianMTModel, folder, str(folder), use_safetensors=True, progress=False)
    card_path = folder / "README.md"
    render_model_card(model, ModelCardInfo.from_training_summary(summary)).save(card_path)
    return card_path


def origin_sentence(info: ModelCardInfo) -> str | None:
    """Where the weights came from, in one or two sentences (None when the card does not know)."""
    if info.base_model:
        base = f"[`{info.base_model}`](https://huggingface.co/{info.base_model})"
    elif info.base_model_local_name:
        base = f"a local checkpoint (`{info.base_model_local_name}`)"
    else:
        base = "a checkpoint"
    if info.base_model_relation == "converted":
        return (
            f"It was converted from {base}, a MarianMT model: every weight is carried over unchanged, only the "
            "attention changed from softmax to α-entmax. α was set by the conversion, not learned."
        )
    if info.base_model_relation == "fine-tuned":
        if info.base_model_type == "marian":
            kind = ", a MarianMT model whose softmax attention became α-entmax (weights carried over) before training"
        elif info.base_model_type == "adaptive_entmax_marian":
            kind = ", an AdaptiveEntmaxMarian model" + (
                " converted from MarianMT" if info.base_model_converted else ""
            )
        else:
            kind = ""
        return f"It was fine-tuned from {base}{kind}: training continued from its weights, α included."
    if info.base_model_relation == "from-scratch":
        return "It was trained from scratch: randomly initialised, no pre-trained checkpoint."
    return None


def default_intended_use(info: ModelCardInfo) -> str:
    """The default intended-use paragraph: a conversion is a starting point, a trained model translates."""
    if info.base_model_relation == "converted":
        return (
            "A starting point for fine-tuning: α was set by the conversion, not learned, so fine-tune it on your "
            f"data (`hf-entmax train --model_name_or_path {info.model_id}`) before relying on its translations. "
            "See the source model's card for the data it was trained on."
        )
    direction = f" from {info.source_lang} to {info.target_lang}" if info.source_lang and info.target_lang else ""
    return (
        f"Translation{direction} of text like the training data, and research on sparse attention: every head's "
        "α and the exact zeros of its attention can be inspected."
    )


def plain_text(value: Any) -> str:
    """A hyper-parameter as people write it: ``0.001``, ``linear`` (not ``SchedulerType.LINEAR``), ``[0.9, 0.98]``."""
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, str):
        # Summaries written before enums were recorded by value hold their repr, e.g. "SchedulerType.LINEAR".
        return match.group(1).lower() if (match := _ENUM_REPR.fullmatch(value)) else value
    if isinstance(value, float):
        return repr(value)  # the shortest text that reads back as the same float: 0.001, 1e-08
    if isinstance(value, (bool, list, tuple, dict)) or value is None:
        return json.dumps(value, default=str)
    return str(value)


def _per_head_table(values, decimals: int) -> list[str]:
    """Markdown rows of a ``(layers, heads)`` tensor: a header of heads, a row per layer."""
    num_heads = values.shape[1]
    lines = [
        "| layer | " + " | ".join(f"head {head}" for head in range(num_heads)) + " |",
        "| --- |" + " --- |" * num_heads,
    ]
    lines += [
        f"| {layer} | " + " | ".join(f"{value:.{decimals}f}" for value in row.tolist()) + " |"
        for layer, row in enumerate(values)
    ]
    return lines


def scaling_tables(model: AdaptiveEntmaxMarianMTModel) -> str | None:
    """How each attention type that scales its queries does it: the factor, which heads, and the learned values per
    head (ASEntmax's β and γ, SSMax's s) with a row per layer; None without scaling."""
    scales = model.get_attention_scales()
    projection_bias = model.config.attention_scaling_projection_bias
    sections = []
    for kind in ATTENTION_TYPES:
        method = model.config.scaling_method(kind)
        if method == "none":
            continue
        heads = scaled_heads_text(model.config, kind)
        heads = f", in {heads}" if heads else ""
        if method == "softmax_matched":
            sections.append(
                f"**{ATTENTION_TITLES[kind]}** (softmax_matched): a query that may attend to n tokens is multiplied "
                f"by n^(1 − α) of its head{heads}, so that every head starts as sharp as softmax whatever its α and "
                "the input's length."
            )
            continue
        lines = [
            f"**{ATTENTION_TITLES[kind]}**: a query that may attend to n tokens is multiplied by "
            f"{describe_scaling_method(method, model.config.attention_scaling_offset, projection_bias)}{heads}"
        ]
        # Per-token scaling has no value per head to show (its β and γ differ from token to token); SSMax's γ is 1.
        names = {"beta": "s"} if method == "ssmax" else {"beta": "β", "gamma": "γ"}
        for name, symbol in names.items():
            if kind in scales:
                lines += ["", f"{symbol}:", "", *_per_head_table(scales[kind][name], 3)]
        sections.append("\n".join(lines))
    return "\n\n".join(sections) or None


def alpha_tables(model: AdaptiveEntmaxMarianMTModel) -> str:
    """One markdown table of α per attention type: a row per layer, a column per head."""
    sections = []
    alphas = model.get_alphas()  # {type: (layers, heads)}
    for kind in ATTENTION_TYPES:
        settings = model.config.alpha_settings(kind)
        how = "learned" if settings.learn else "fixed"
        values = alphas[kind]
        title = f"**{ATTENTION_TITLES[kind]}** ({how}; mean α {values.mean().item():.3f})"
        sections.append("\n".join([title, "", *_per_head_table(values, 3)]))
    return "\n\n".join(sections)


def sparsity_table(mean_sparsity: dict[str, float] | None) -> str | None:
    if not mean_sparsity:
        return None
    lines = ["| attention | exact zeros |", "| --- | --- |"]
    lines += [f"| {ATTENTION_TITLES.get(kind, kind)} | {100 * value:.1f}% |" for kind, value in mean_sparsity.items()]
    return "\n".join(lines)


def results_table(eval_results: list[TranslationScores]) -> str | None:
    """The final scores: a row per dataset split (a loss column when some loss is known)."""
    if not eval_results:
        return None
    with_loss = any(scores.loss is not None for scores in eval_results)
    header = ["dataset", "split", *(["loss"] if with_loss else []), "BLEU", "chrF"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for scores in eval_results:
        cells = [scores.dataset_name, scores.split, *([_number(scores.loss, 4)] if with_loss else [])]
        cells += [_number(scores.bleu, 2), _number(scores.chrf, 2)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "sacreBLEU scores (BLEU and chrF, 0–100) of beam-search translations."]
    return "\n".join(lines)


def signature_lines(signatures: Mapping[str, str]) -> str | None:
    """The sacreBLEU signatures as a list: what exactly the scores measure (tokenisation, smoothing, version)."""
    if not signatures:
        return None
    names = {"bleu_signature": "BLEU", "chrf_signature": "chrF"}
    return "\n".join(f"- {names.get(key, key)}: `{value}`" for key, value in signatures.items())


def evaluations_table(rows: list[Mapping[str, Any]]) -> str | None:
    """One row per evaluation during training, as in the cards Trainer writes."""
    if not rows:
        return None
    lines = [
        "| step | epoch | training loss | validation loss | BLEU | chrF |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        cells = [
            _number(row.get("step"), 0),
            _number(row.get("epoch"), 2),
            _number(row.get("training_loss"), 4),
            _number(row.get("validation_loss"), 4),
            _number(row.get("bleu"), 2),
            _number(row.get("chrf"), 2),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def training_items(info: ModelCardInfo) -> str | None:
    """The training section's list: data, tokenizer, preprocessing (those known)."""
    items = [
        f"- {label}: {text}"
        for label, text in (
            ("Data", info.training_data),
            ("Tokenizer", info.tokenizer),
            ("Preprocessing", preprocessing_text(info.preprocessing)),
        )
        if text
    ]
    return "\n".join(items) or None


def preprocessing_text(preprocessing: Mapping[str, Any]) -> str | None:
    """``{"max_source_length": 128, …}`` as a sentence: truncation lengths, the source prefix and document-level
    examples."""
    if not preprocessing:
        return None
    settings = dict(preprocessing)
    parts = []
    for key, what in (("max_source_length", "sources"), ("max_target_length", "targets")):
        if settings.get(key) is not None:
            parts.append(f"{what} truncated to {plain_text(settings.pop(key))} tokens")
    if settings.get("val_max_target_length") is not None:
        parts.append(f"evaluation targets to {plain_text(settings.pop('val_max_target_length'))} tokens")
    if "source_prefix" in settings:
        prefix = settings.pop("source_prefix")
        parts.append(f"source prefix `{prefix}`" if prefix else "no source prefix")
    if documents := settings.pop("document_context", None):
        parts.append(
            f"document-level: {plain_text(documents.get('ratio'))} examples per training pair of 2–"
            f"{plain_text(documents.get('max_sentences'))} consecutive pairs of a document joined"
        )
    parts += [f"`{key}` {plain_text(value)}" for key, value in settings.items() if value is not None]
    return "; ".join(parts) if parts else None


def _number(value: Any, decimals: int) -> str:
    if value is None:
        return "–"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:.{decimals}f}"
    return plain_text(value)


__all__ = [
    "BASE_MODEL_RELATIONS",
    "ModelCardInfo",
    "TranslationScores",
    "check_card_fields",
    "check_license",
    "read_training_summary",
    "render_model_card",
    "write_training_card",
]
