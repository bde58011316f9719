"""Marian → AdaptiveEntmaxMarian: the logic behind `hf-entmax convert`.

The two architectures share every module and parameter name; AdaptiveEntmaxMarian only adds ``alpha_logits``
(one per head, and only for a learned α) and, with query scaling (ASEntmax), ``scale_beta`` and ``scale_gamma``.
Conversion therefore copies the Marian state dict key by key, checking that nothing is left over or reshaped, and
proves the result: with α = 1 fixed everywhere and no scaling (the default) the new model computes the same function
as the source, which is checked on a few sentences before anything is written.
"""

import copy
import logging
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch
from huggingface_hub import snapshot_download
from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled
from transformers import MarianMTModel, PreTrainedTokenizerBase

from ..common.config import build_config, is_scaling_parameter
from ..common.hub_ids import is_hub_id
from ..common.model_folder import SAFETENSORS_WEIGHTS, load_pretrained, load_tokenizer, read_model_config
from ..common.records import framework_versions
from ..errors import HfEntmaxError, HfEntmaxFileNotFoundError, HfEntmaxValueError, one_line
from ..modeling.configuration_adaptive_entmax_marian import (
    ATTENTION_TYPES,
    AdaptiveEntmaxMarianConfig,
    AlphaOptions,
    ScalingOptions,
)
from ..modeling.modeling_adaptive_entmax_marian import AdaptiveEntmaxMarianMTModel
from .export import check_export_target, check_shard_size, export_hub_folder
from .load_check import CHECK_SENTENCES
from .model_card import ModelCardInfo


logger = logging.getLogger(__name__)

PICKLE_WEIGHT_PATTERNS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "*.pt", "*.pth", "*.ckpt")
# What a Marian repo needs besides weights: configs and tokenizer files (SentencePiece models, vocabularies).
_DOWNLOAD_PATTERNS = ["*.json", "*.model", "*.spm", "*.txt", "*.safetensors"]
LOGIT_TOLERANCE = 1e-5
ATTENTION_OPTION_NAMES = tuple(option.name for option in (*fields(AlphaOptions), *fields(ScalingOptions)))
_OPUS_MT_NAME = re.compile(r"opus-mt-([a-z]{2,3})-([a-z]{2,3})")
# A Hub cache snapshot folder: .../models--{owner}--{name}/snapshots/{commit}
_HUB_CACHE_SNAPSHOT = re.compile(r"models--([^/\\]+?)--([^/\\]+)[/\\]snapshots[/\\]")


@dataclass
class ConversionReport:
    """What `convert_marian` did and what its check found.

    Attributes:
        source: The Marian folder or Hub id that was converted.
        output_dir: The Hub-ready folder written.
        same_function_expected: Whether α = 1 is fixed everywhere, so the model must compute the source's function.
        max_logit_difference: Largest absolute difference between the two models' logits on the check sentences.
        greedy_identical, beam_identical: Whether greedy and beam-4 translations were identical, sentence by sentence.
        num_sentences: How many sentences were checked.
        num_weights: How many weight tensors were carried over.
        alphas: The mean initial α per attention type.
        alphas_changed: Whether α differs from 1 anywhere (fixed at another value, or learned).
        scaled_attention_types: The attention types whose queries are scaled (ASEntmax), new parameters.
    """

    source: str
    output_dir: Path
    same_function_expected: bool
    max_logit_difference: float
    greedy_identical: bool
    beam_identical: bool
    num_sentences: int
    num_weights: int
    alphas: dict[str, float] = field(default_factory=dict)
    alphas_changed: bool = False
    scaled_attention_types: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """A few sentences for people: what was checked and what it means."""
        check = (
            f"Checked on {self.num_sentences} sentences: logits differ from the source's by at most "
            f"{self.max_logit_difference:.1e}; greedy translations "
            f"{'identical' if self.greedy_identical else 'differ'}, beam-4 translations "
            f"{'identical' if self.beam_identical else 'differ'}."
        )
        if self.same_function_expected:
            meaning = "With α = 1 fixed everywhere, the converted model computes the same function as the source."
        else:
            alphas = ", ".join(f"{kind} {alpha:.3f}" for kind, alpha in self.alphas.items())
            changes = [f"α is not fixed at 1 (mean initial α: {alphas})"] if self.alphas_changed else []
            if self.scaled_attention_types:
                changes.append(f"queries are scaled (ASEntmax) in {', '.join(self.scaled_attention_types)}")
            meaning = (
                f"{' and '.join(changes)}, so the converted model is not expected to compute the same function as "
                "the source: fine-tune it (`hf-entmax train --model_name_or_path ...`)."
            )
        return f"Converted {self.source} ({self.num_weights} weight tensors carried over). {check}\n{meaning}"


def convert_marian(
    model: str,
    output_dir: str | os.PathLike,
    *,
    allow_pickle: bool = False,
    check_sentences: list[str] | None = None,
    source_lang: str | None = None,
    target_lang: str | None = None,
    base_model: str | None = None,
    model_id: str | None = None,
    max_shard_size: str | int = "2GB",
    overwrite: bool = False,
    **attention_options: object,
) -> ConversionReport:
    """Turn a MarianMT checkpoint into an AdaptiveEntmaxMarian one and write it as a Hub-ready folder.

    Args:
        model: A local MarianMT folder, or a Hub id (downloaded; needs the network).
        output_dir: Where to write the Hub-ready folder (safetensors only).
        allow_pickle: Accept a checkpoint whose only weights are pickle files (``pytorch_model.bin``, ``*.pt``).
            Unpickling runs code from the file: only for checkpoints you trust.
        check_sentences: Source sentences for the equivalence check (default: a few built-in ones).
        source_lang, target_lang: Language codes for the model card (inferred from ``opus-mt-xx-yy`` names).
        base_model: Hub id of the source for the card (inferred when ``model`` is a Hub id or in the Hub cache).
        model_id: The repo id the folder will be pushed to, for the card's usage snippet.
        max_shard_size: Above this size the weights are written as several safetensors shards.
        overwrite: Replace ``output_dir`` whole even if it is not an earlier export left as it was written.
        **attention_options: Fields of `AlphaOptions` (``alpha_init``, ``learn_alpha``, ``alpha_min``, ``alpha_max``,
            ``cross_alpha_init``, …) and of `ScalingOptions` (``attention_scaling="asentmax"``, …). Those not given
            keep the source's function: α = 1 fixed, exactly softmax, and no scaling. A learned α is
            1 + sigmoid(logit) and cannot start at exactly 1: give ``alpha_init`` ≥ ``alpha_min``.

    Returns:
        A `ConversionReport` (its ``summary()`` says what was checked).

    Raises:
        HfEntmaxValueError: a checkpoint that is not Marian, has only pickle weights (without ``allow_pickle``) or
            pickles holding more than tensors (even with it), a config, weights or tokenizer that cannot be read,
            unknown or inconsistent α options, a bad ``max_shard_size``, or an ``output_dir`` that is a file or a
            folder other than an earlier export. HfEntmaxError: a failed download, or a failed equivalence check
            (then nothing is written).
    """
    attention_fields = conversion_attention_options(attention_options)
    # What can be refused without loading anything is refused first: the target, then the source.
    check_shard_size(max_shard_size, "max_shard_size")
    check_export_target(Path(output_dir), overwrite)
    source_dir, from_hub = resolve_source(model, allow_pickle=allow_pickle)
    # The card's fields (languages, ids, names) are checked as it is made: before the slow part.
    inferred_source_lang, inferred_target_lang = infer_languages(model)
    hub_id = base_model or (model if from_hub else hub_id_from_cache_path(source_dir))
    card = ModelCardInfo(
        model_id=model_id or Path(output_dir).resolve().name,
        source_lang=source_lang or inferred_source_lang,
        target_lang=target_lang or inferred_target_lang,
        base_model=hub_id,
        base_model_relation="converted",
        base_model_local_name=None if hub_id else Path(model).name,
        training_data="none beyond the source model's: this is a conversion, α was not trained yet",
        hyperparameters={name: value for name, value in attention_fields.items() if value is not None},
        framework_versions=framework_versions(),
    )
    source_config = read_marian_config(source_dir, model)
    use_safetensors = choose_weights(source_dir, model, allow_pickle=allow_pickle, from_hub=from_hub)
    tokenizer = load_tokenizer(source_dir, f"--model {model}")

    source = load_pretrained(MarianMTModel, source_dir, f"--model {model}", use_safetensors=use_safetensors).eval()
    marian_fields = {
        key: value
        for key, value in source_config.items()
        if key in AdaptiveEntmaxMarianConfig.__dataclass_fields__ and key not in attention_fields
    }
    config = build_config(**marian_fields, **attention_fields)
    target = AdaptiveEntmaxMarianMTModel(config).to(source.dtype).eval()
    num_weights = copy_marian_weights(source, target)
    target.generation_config = copy.deepcopy(source.generation_config)

    alphas_changed = not all(
        not config.alpha_settings(kind).learn and float(config.alpha_settings(kind).init) == 1.0
        for kind in ATTENTION_TYPES
    )
    # softmax_matched's factor is 1 while α = 1: only a changed α (reported above) or ASEntmax's learned temperature
    # (δ + β·log(n + 1)^γ, not 1 at its initialisation) changes the function.
    scaled = [kind for kind in ATTENTION_TYPES if config.has_learned_scaling(kind)]
    same_function_expected = not alphas_changed and not scaled
    report = compare_models(source, target, tokenizer, check_sentences or CHECK_SENTENCES)
    report = ConversionReport(
        source=model,
        output_dir=Path(output_dir),
        same_function_expected=same_function_expected,
        num_weights=num_weights,
        alphas={kind: alphas.mean().item() for kind, alphas in target.get_alphas().items()},
        alphas_changed=alphas_changed,
        scaled_attention_types=scaled,
        **report,
    )
    if same_function_expected and not (
        report.max_logit_difference <= LOGIT_TOLERANCE and report.greedy_identical and report.beam_identical
    ):
        raise HfEntmaxError(
            f"conversion check failed, nothing written: with α = 1 the converted model should compute the same "
            f"function as {model!r}, but its logits differ by up to {report.max_logit_difference:.1e} "
            f"(greedy identical: {report.greedy_identical}, beam identical: {report.beam_identical})"
        )

    export_hub_folder(target, tokenizer, output_dir, card=card, max_shard_size=max_shard_size, overwrite=overwrite)
    return report


def conversion_attention_options(given: dict[str, object]) -> dict[str, object]:
    """The α and query-scaling fields of a converted model: those given, over α = 1 fixed (the source's softmax) and
    no scaling.

    Raises:
        HfEntmaxValueError: an unknown option, or a learned α without a start (1, the source's, is below alpha_min).
    """
    unknown = sorted(set(given) - set(ATTENTION_OPTION_NAMES))
    if unknown:
        raise HfEntmaxValueError(
            f"unknown attention option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; the options are "
            f"{', '.join(ATTENTION_OPTION_NAMES)}"
        )
    options = {"alpha_init": 1.0, "learn_alpha": False, **given}
    learned = [
        name for name in ("learn_alpha", *(f"{kind}_learn_alpha" for kind in ATTENTION_TYPES)) if given.get(name)
    ]
    if learned and not any(name.endswith("alpha_init") for name in given):
        raise HfEntmaxValueError(
            f"{learned[0]}: a learned α lives in [alpha_min, alpha_max] and cannot start at the source's α = 1; "
            "give alpha_init too (e.g. 1.1)"
        )
    return options


def resolve_source(model: str, allow_pickle: bool = False) -> tuple[Path, bool]:
    """The local folder of ``model`` (downloading a Hub id), and whether it came from the Hub."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path, False
    if not is_hub_id(model):
        raise HfEntmaxFileNotFoundError(f"--model {model!r}: no such folder (give a MarianMT folder or a Hub id)")
    patterns = [*_DOWNLOAD_PATTERNS, *(PICKLE_WEIGHT_PATTERNS if allow_pickle else ())]
    try:
        return Path(snapshot_download(model, allow_patterns=patterns)), True
    except (OfflineModeIsEnabled, LocalEntryNotFoundError) as error:
        raise HfEntmaxError(
            f"--model {model!r} is not a local folder and could not be downloaded from the Hub (offline? "
            f"{one_line(error, 150)}); download it where the Hub is reachable and pass the folder"
        ) from error
    except HfHubHTTPError as error:
        raise HfEntmaxError(f"could not download {model!r} from the Hub: {one_line(error)}") from error
    except OSError as error:  # connection failures
        raise HfEntmaxError(f"could not reach the Hub to download {model!r}: {one_line(error)}") from error


def read_marian_config(folder: Path, model: str) -> dict:
    """config.json of a Marian checkpoint; anything else is refused, naming what it is."""
    config = read_model_config(folder, f"--model {model}")
    model_type = config.get("model_type")
    if model_type == AdaptiveEntmaxMarianConfig.model_type:
        raise HfEntmaxValueError(
            f"{model!r} is already an AdaptiveEntmaxMarian checkpoint; make it a Hub folder with `hf-entmax export`"
        )
    if model_type != "marian":
        raise HfEntmaxValueError(
            f"{model!r} is a {model_type!r} checkpoint, not a Marian one: hf-entmax convert turns MarianMT "
            "checkpoints (model_type 'marian', e.g. Helsinki-NLP/opus-mt-*) into AdaptiveEntmaxMarian models"
        )
    return config


def choose_weights(folder: Path, model: str, allow_pickle: bool, from_hub: bool = False) -> bool:
    """Whether to load safetensors (True) or pickle weights (False, only when allowed)."""
    if any((folder / name).is_file() for name in SAFETENSORS_WEIGHTS):
        return True
    if from_hub and not allow_pickle:
        raise HfEntmaxValueError(
            f"{model!r} has no safetensors weights on the Hub, and its pickle weights (pytorch_model.bin) can run "
            "arbitrary code when loaded, so they were not downloaded. If you trust their source, pass --allow_pickle"
        )
    pickles = sorted({path.name for pattern in PICKLE_WEIGHT_PATTERNS for path in folder.glob(pattern)})
    if not pickles:
        raise HfEntmaxFileNotFoundError(f"{model!r} has no weights (no model.safetensors, no pytorch_model.bin)")
    if not allow_pickle:
        raise HfEntmaxValueError(
            f"{model!r} has only pickle weights ({', '.join(pickles)}), and loading them can run arbitrary code. "
            "If you trust their source, pass --allow_pickle (the converted folder is safetensors only)"
        )
    return False


@torch.no_grad()
def copy_marian_weights(source: MarianMTModel, target: AdaptiveEntmaxMarianMTModel) -> int:
    """Copy every tensor of ``source``'s state dict into ``target``, checking names, shapes and ties.

    Every Marian key must exist in ``target`` with the same shape, and ``target``'s only extra keys may be
    ``alpha_logits`` and the query-scaling parameters (``SCALING_PARAMETERS`` of the modeling file). Weights
    tied in ``source`` (embeddings and LM head) must be tied in ``target`` too.

    Returns:
        The number of state-dict entries copied.
    """
    source_state = source.state_dict()
    target_state = target.state_dict()
    missing = sorted(set(source_state) - set(target_state))
    extra = sorted(
        key
        for key in set(target_state) - set(source_state)
        if not (key.endswith("alpha_logits") or is_scaling_parameter(key))
    )
    reshaped = [
        f"{key} {tuple(tensor.shape)} -> {tuple(target_state[key].shape)}"
        for key, tensor in source_state.items()
        if key in target_state and tensor.shape != target_state[key].shape
    ]
    if missing or extra or reshaped:
        raise HfEntmaxError(
            "the Marian weights do not map onto AdaptiveEntmaxMarian: "
            + "; ".join(
                f"{what}: {', '.join(keys[:5])}"
                for what, keys in (("not in the new model", missing), ("new", extra), ("reshaped", reshaped))
                if keys
            )
        )
    for key, tensor in source_state.items():
        target_state[key].copy_(tensor)  # state-dict tensors share storage with the parameters and buffers

    # The copy went through the target's own tensors: check it reached the parameters, ties included.
    target_state = target.state_dict()
    for key, tensor in source_state.items():
        if not torch.equal(target_state[key], tensor):
            raise HfEntmaxError(f"weight {key} was not carried over")
    for group in _storage_groups(source_state):
        if len({target_state[key].data_ptr() for key in group}) != 1:
            raise HfEntmaxError(f"weights tied in the Marian model are not tied after conversion: {', '.join(group)}")
    return len(source_state)


@torch.no_grad()
def compare_models(
    source: MarianMTModel,
    target: AdaptiveEntmaxMarianMTModel,
    tokenizer: PreTrainedTokenizerBase,
    sentences: list[str],
    max_new_tokens: int = 32,
) -> dict:
    """Logits (teacher-forced on the source's greedy translations) and greedy and beam-4 translations of both.

    Both models run in float64 for the comparison and are cast back afterwards (exactly: every float32 value
    is a float64 value): float32 rounding differs between attention implementations and grows with depth,
    and would blur a comparison meant to show that the two compute the same function.

    Returns:
        ``max_logit_difference``, ``greedy_identical``, ``beam_identical`` and ``num_sentences``.
    """
    dtype = source.dtype
    source.to(torch.float64)
    target.to(torch.float64)
    try:
        inputs = tokenizer(sentences, return_tensors="pt", padding=True, truncation=True).to(source.device)
        # max_length=None: the generation config's own limit would otherwise compete with max_new_tokens.
        generate = {"do_sample": False, "max_new_tokens": max_new_tokens, "max_length": None}
        greedy = [model.generate(**inputs, num_beams=1, **generate) for model in (source, target)]
        beam = [model.generate(**inputs, num_beams=4, **generate) for model in (source, target)]
        logits = [model(**inputs, decoder_input_ids=greedy[0]).logits for model in (source, target)]  # (B, T, V)
    finally:
        source.to(dtype)
        target.to(dtype)
    return {
        "max_logit_difference": (logits[0] - logits[1]).abs().max().item(),
        "greedy_identical": _same_sequences(*greedy),
        "beam_identical": _same_sequences(*beam),
        "num_sentences": len(sentences),
    }


def infer_languages(model: str) -> tuple[str | None, str | None]:
    """Source and target language from an OPUS-MT name (``Helsinki-NLP/opus-mt-de-en`` → de, en)."""
    match = _OPUS_MT_NAME.search(Path(model).name if Path(model).is_dir() else model)
    return (match.group(1), match.group(2)) if match else (None, None)


def hub_id_from_cache_path(folder: Path) -> str | None:
    """The repo id of a folder inside the Hub cache (``models--owner--name/snapshots/<commit>``), else None."""
    match = _HUB_CACHE_SNAPSHOT.search(str(folder.resolve()))
    return f"{match.group(1)}/{match.group(2)}" if match else None


def _storage_groups(state: dict[str, torch.Tensor]) -> list[list[str]]:
    """Keys that share storage (tied weights), as groups of two or more."""
    by_pointer: dict[int, list[str]] = {}
    for key, tensor in state.items():
        by_pointer.setdefault(tensor.data_ptr(), []).append(key)
    return [keys for keys in by_pointer.values() if len(keys) > 1]


def _same_sequences(first: torch.Tensor, second: torch.Tensor) -> bool:
    return first.shape == second.shape and torch.equal(first, second)


__all__ = ["ConversionReport", "convert_marian", "copy_marian_weights"]
