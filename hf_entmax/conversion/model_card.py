"""Model cards for AdaptiveEntmaxMarian checkpoints, rendered from `hf_entmax/model_cards/` with huggingface_hub.

The card's YAML metadata (languages, license, tags, datasets, base model, a `model-index` with BLEU/chrF) is
written by `huggingface_hub.ModelCardData`, so `ModelCard.load` reads back exactly what was written; the body
explains the model, shows how to load it with `trust_remote_code=True`, and tabulates α per layer and head.
"""

import importlib.resources
from dataclasses import dataclass, field
from typing import Any

import torch
from huggingface_hub import EvalResult, ModelCard, ModelCardData
from transformers import PreTrainedTokenizerBase

from ..modeling.configuration_adaptive_entmax_marian import ATTENTION_TYPES
from ..modeling.modeling_adaptive_entmax_marian import AdaptiveEntmaxMarianMTModel


TEMPLATE_NAME = "adaptive_entmax_marian.md"
DEFAULT_TAGS = ["entmax", "sparse-attention", "adaptive-sparsity", "marian", "translation", "custom_code"]
ATTENTION_TITLES = {
    "encoder_self": "Encoder self-attention",
    "decoder_self": "Decoder self-attention",
    "cross": "Cross-attention",
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
    """BLEU and chrF of the model on one split of one dataset (sacreBLEU scale, 0–100)."""

    dataset_name: str
    split: str
    bleu: float | None = None
    chrf: float | None = None
    dataset_type: str = "custom"  # the dataset's Hub id, or "custom" for local files
    dataset_config: str | None = None


@dataclass
class ModelCardInfo:
    """What a model card says beyond what the model itself knows (its α, its size).

    Attributes:
        model_id: The repo id (or path) shown in the usage snippet.
        model_name: Title of the card and name of the `model-index` entry (defaults to the last part of `model_id`).
        source_lang, target_lang: Language codes of the translation direction.
        license: An SPDX-like license id, as the Hub expects.
        datasets: Hub ids of the training datasets (local files go into `training_data` instead).
        base_model: Hub id of the checkpoint this model was converted or fine-tuned from.
        eval_results: BLEU/chrF per dataset split; they go into the metadata's `model-index` and a table.
        training_data: A sentence describing the training data.
        hyperparameters: Training hyper-parameters, listed as they are.
        mean_sparsity: Fraction of exactly-zero attention probabilities per attention type, if measured.
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
    eval_results: list[TranslationScores] = field(default_factory=list)
    training_data: str | None = None
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    mean_sparsity: dict[str, float] | None = None
    analysis: str | None = None
    tags: list[str] = field(default_factory=list)

    @classmethod
    def from_training_summary(cls, summary: dict, **overrides) -> "ModelCardInfo":
        """What `hf-entmax train`'s ``training_summary.json`` tells: languages, data, BLEU/chrF, hyper-parameters."""
        data = summary.get("data")
        datasets, training_data, dataset_type = [], None, "custom"
        if isinstance(data, str) and data != "built-in synthetic pair":
            datasets, dataset_type, dataset_name = [data], data, data
            training_data = f"[{data}](https://huggingface.co/datasets/{data})"
        elif isinstance(data, dict):
            training_data = "local files: " + ", ".join(f"`{name}`" for name in data)
            dataset_name = "local files"
        else:
            training_data = "the built-in synthetic language pair of hf_entmax (`hf-entmax demo`)"
            dataset_name = "hf_entmax synthetic pair"
        if sizes := summary.get("num_examples"):
            training_data += " (" + ", ".join(f"{split}: {count:,} pairs" for split, count in sizes.items()) + ")"

        metrics = summary.get("metrics", {})
        eval_results = [
            TranslationScores(
                dataset_name=dataset_name,
                dataset_type=dataset_type,
                split=split,
                bleu=metrics.get(f"{prefix}_bleu"),
                chrf=metrics.get(f"{prefix}_chrf"),
            )
            for prefix, split in (("eval", "validation"), ("test", "test"))
            if f"{prefix}_bleu" in metrics or f"{prefix}_chrf" in metrics
        ]
        hyperparameters = dict(summary.get("hyperparameters", {}))
        for key in ("global_step", "world_size", "num_parameters"):
            if summary.get(key) is not None:
                hyperparameters[key] = summary[key]
        fields = {
            "source_lang": summary.get("source_lang"),
            "target_lang": summary.get("target_lang"),
            "datasets": datasets,
            "eval_results": eval_results,
            "training_data": training_data,
            "hyperparameters": hyperparameters,
        }
        return cls(**{**fields, **overrides})


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
    card_data = ModelCardData(
        model_name=model_name,
        language=languages or None,
        license=info.license,
        library_name="transformers",
        pipeline_tag="translation",
        tags=list(dict.fromkeys([*DEFAULT_TAGS, *info.tags])),
        datasets=info.datasets or None,
        base_model=info.base_model,
        eval_results=eval_results or None,
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
        example=EXAMPLE_SENTENCES.get(info.source_lang or "", EXAMPLE_SENTENCES["en"]),
        alpha_tables=alpha_tables(model),
        sparsity_table=sparsity_table(info.mean_sparsity),
        analysis=info.analysis,
        results_table=results_table(info.eval_results),
        training_data=info.training_data,
        hyperparameters=info.hyperparameters,
    )


def alpha_tables(model: AdaptiveEntmaxMarianMTModel) -> str:
    """One markdown table of α per attention type: a row per layer, a column per head."""
    sections = []
    alphas = model.get_alphas()  # {type: (layers, heads)}
    for kind in ATTENTION_TYPES:
        settings = model.config.alpha_settings(kind)
        how = "learned" if settings.learn else "fixed"
        values = alphas[kind]
        num_heads = values.shape[1]
        lines = [
            f"**{ATTENTION_TITLES[kind]}** ({how}; mean α {values.mean().item():.3f})",
            "",
            "| layer | " + " | ".join(f"head {head}" for head in range(num_heads)) + " |",
            "| --- |" + " --- |" * num_heads,
        ]
        lines += [
            f"| {layer} | " + " | ".join(f"{alpha:.3f}" for alpha in row.tolist()) + " |"
            for layer, row in enumerate(values)
        ]
        sections.append("\n".join(lines))
    return "\n\n".join(sections)


def sparsity_table(mean_sparsity: dict[str, float] | None) -> str | None:
    if not mean_sparsity:
        return None
    lines = ["| attention | exact zeros |", "| --- | --- |"]
    lines += [f"| {ATTENTION_TITLES.get(kind, kind)} | {100 * value:.1f}% |" for kind, value in mean_sparsity.items()]
    return "\n".join(lines)


def results_table(eval_results: list[TranslationScores]) -> str | None:
    if not eval_results:
        return None
    lines = ["| dataset | split | BLEU | chrF |", "| --- | --- | --- | --- |"]
    for scores in eval_results:
        bleu = "–" if scores.bleu is None else f"{scores.bleu:.2f}"
        chrf = "–" if scores.chrf is None else f"{scores.chrf:.2f}"
        lines.append(f"| {scores.dataset_name} | {scores.split} | {bleu} | {chrf} |")
    lines += ["", "sacreBLEU scores (BLEU and chrF, 0–100) of beam-search translations."]
    return "\n".join(lines)


@torch.no_grad()
def measure_attention_sparsity(
    model: AdaptiveEntmaxMarianMTModel,
    tokenizer: PreTrainedTokenizerBase,
    sentences: list[str],
    max_new_tokens: int = 32,
) -> dict[str, float]:
    """Fraction of exactly-zero attention probabilities per attention type, over the model's own translations.

    Only entries a head could attend to count: real (non-padding) queries and keys, and for decoder
    self-attention keys at or before the query.
    """
    model.eval()
    inputs = tokenizer(sentences, return_tensors="pt", padding=True, truncation=True).to(model.device)
    decoder_input_ids = model.generate(**inputs, num_beams=1, do_sample=False, max_new_tokens=max_new_tokens)
    outputs = model(**inputs, decoder_input_ids=decoder_input_ids, output_attentions=True)

    source_mask = inputs["attention_mask"].bool()  # (B, S)
    # Decoder positions after the first end-of-sequence token are padding.
    is_eos = decoder_input_ids == model.config.eos_token_id
    target_mask = (is_eos.long().cumsum(-1) - is_eos.long()) == 0  # (B, T)
    length = target_mask.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=model.device).tril()  # (T, T)
    valid = {
        "encoder_self": source_mask[:, :, None] & source_mask[:, None, :],  # (B, S, S)
        "decoder_self": target_mask[:, :, None] & target_mask[:, None, :] & causal,  # (B, T, T)
        "cross": target_mask[:, :, None] & source_mask[:, None, :],  # (B, T, S)
    }
    attentions = {
        "encoder_self": outputs.encoder_attentions,
        "decoder_self": outputs.decoder_attentions,
        "cross": outputs.cross_attentions,
    }
    sparsity = {}
    for kind, layers in attentions.items():
        mask = valid[kind][:, None]  # (B, 1, Q, K): the same for every head
        zeros = sum(((probabilities == 0) & mask).sum().item() for probabilities in layers)
        total = sum(mask.expand_as(probabilities).sum().item() for probabilities in layers)
        sparsity[kind] = zeros / total
    return sparsity


__all__ = ["ModelCardInfo", "TranslationScores", "measure_attention_sparsity", "render_model_card"]
