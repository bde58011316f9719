"""The model a training run starts from, and the attention settings (α, query scaling) it trains with.

A run starts from one of three places, and the attention flags (`AlphaOptions` and `ScalingOptions`, given or not)
resolve differently for each:

- **fresh** (no ``--model_name_or_path``): a model of ``--model_size``; flags not given take the config's defaults.
- **MarianMT** checkpoint (folder or Hub id): its weights, with every softmax head turned into an α-entmax head; flags
  not given make α learned from 1.1 (`recipes.START_DEFAULTS`), near the softmax the weights were trained with.
- **AdaptiveEntmaxMarian** checkpoint: flags not given keep the checkpoint's settings, and a learned α resumes from
  its values; a flag given overrides them (``--alpha_init`` restarts a learned α from that value, and a global flag
  replaces the checkpoint's per-attention-type values of the same option).

Query scaling (ASEntmax) resolves the same way; its parameters are new (initialised as the config says) wherever a
run turns it on for an attention type, or changes its method (SSMax to ASEntmax, per head to per token, …), and
dropped where a run turns it off. Per-token maps that gain a bias (``--attention_scaling_projection_bias``) start it at
0, which leaves what they compute unchanged; maps that lose it drop it.

Positions (`PositionOptions`) are a fresh model's choice: a checkpoint keeps its own (a MarianMT checkpoint's are
sinusoidal), since its weights were trained with them, and a flag asking for others is refused.
"""

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from transformers import AutoConfig, PreTrainedConfig, PreTrainedTokenizerBase

from ..common.config import (
    build_config,
    describe_positions,
    is_scaling_parameter,
    scaled_heads_text,
    scaling_formula,
)
from ..common.hub_ids import is_hub_id
from ..common.model_folder import load_pretrained, read_model_config
from ..errors import HfEntmaxError, HfEntmaxFileNotFoundError, HfEntmaxValueError, one_line
from ..modeling.configuration_adaptive_entmax_marian import (
    ATTENTION_TITLES,
    ATTENTION_TYPES,
    AdaptiveEntmaxMarianConfig,
    AlphaOptions,
    PositionOptions,
    ScalingOptions,
)
from ..modeling.modeling_adaptive_entmax_marian import (
    PROJECTION_BIASES,
    AdaptiveEntmaxMarianAttention,
    AdaptiveEntmaxMarianMTModel,
)
from .arguments import ATTENTION_OPTION_NAMES, POSITION_OPTION_NAMES, SCALING_OPTION_NAMES, ModelArguments
from .presets import preset_config_kwargs
from .recipes import START_DEFAULTS


logger = logging.getLogger(__name__)

ATTENTION_LABELS = {kind: title.lower() for kind, title in ATTENTION_TITLES.items()}  # inside a sentence


@dataclass
class StartingPoint:
    """Where a run starts: ``kind`` is "fresh", "marian" or "adaptive_entmax_marian"; ``config`` the checkpoint's."""

    kind: str
    name: str | None = None
    config: PreTrainedConfig | None = None


def read_starting_point(model_name_or_path: str | None) -> StartingPoint:
    """Read the config of ``--model_name_or_path`` (a folder, or a Hub id from the cache or the Hub).

    Raises:
        HfEntmaxFileNotFoundError: a local path that does not exist or holds no config.json.
        HfEntmaxValueError: an unreadable config.json, or a model that is neither Marian nor AdaptiveEntmaxMarian, or a
            decoder-only one.
        HfEntmaxError: a Hub id that cannot be fetched (offline, unknown).
    """
    if model_name_or_path is None:
        return StartingPoint("fresh")
    flag = f"--model_name_or_path {model_name_or_path}"
    path = Path(model_name_or_path).expanduser()
    if path.is_dir():
        model_type = read_model_config(path, flag).get("model_type")
    elif path.exists() or not is_hub_id(model_name_or_path):
        raise HfEntmaxFileNotFoundError(f"{flag}: no such folder (give a model folder or a Hub id such as org/name)")
    else:
        model_type = None
    if model_type not in (None, "marian", AdaptiveEntmaxMarianConfig.model_type):
        raise HfEntmaxValueError(
            f"{flag} is a {model_type!r} model; hf-entmax trains AdaptiveEntmaxMarian models and starts from their "
            "own or MarianMT checkpoints"
        )
    try:
        config = (
            AdaptiveEntmaxMarianConfig.from_pretrained(model_name_or_path)
            if model_type == AdaptiveEntmaxMarianConfig.model_type
            else AutoConfig.from_pretrained(model_name_or_path)
        )
    except (OSError, ValueError) as error:
        raise HfEntmaxError(f"{flag}: could not load its config ({one_line(error)})") from None
    if config.model_type not in ("marian", AdaptiveEntmaxMarianConfig.model_type):
        raise HfEntmaxValueError(
            f"{flag} is a {config.model_type!r} model; hf-entmax trains AdaptiveEntmaxMarian models and starts from "
            "their own or MarianMT checkpoints"
        )
    if not config.is_encoder_decoder:  # AdaptiveEntmaxMarianForCausalLM shares the config class
        architecture = ", ".join(config.architectures or ["a decoder stack"])
        raise HfEntmaxValueError(
            f"{flag} is a decoder-only model ({architecture}); hf-entmax train trains translation (encoder–decoder) "
            "models"
        )
    kind = "marian" if config.model_type == "marian" else "adaptive_entmax_marian"
    return StartingPoint(kind, model_name_or_path, config)


def resolve_attention_options(start: StartingPoint, given: dict[str, object]) -> dict[str, object]:
    """The attention fields (α, query scaling) of the model to train: the flags given over the starting point's.

    Raises:
        HfEntmaxValueError: a change the flags ask for that would silently lose or invent α values (fixing an α that
            was learned per head without saying at which value; learning an α whose fixed value lies below
            ``alpha_min`` without saying where to start).
    """
    if start.kind in ("fresh", "marian"):
        defaults = START_DEFAULTS[start.kind].model
        return {**{name: value for name, value in defaults.items() if name in ATTENTION_OPTION_NAMES}, **given}
    options = {name: getattr(start.config, name) for name in ATTENTION_OPTION_NAMES}
    for name, value in given.items():
        options[name] = value
        if name in ("alpha_init", "learn_alpha", "attention_scaling"):
            # `--alpha_init 1.2` means every head: the checkpoint's per-type values of the option give way to it.
            for kind in ATTENTION_TYPES:
                options[f"{kind}_{name}"] = given.get(f"{kind}_{name}")
    resolved = AlphaOptions(**{name: value for name, value in options.items() if name not in SCALING_OPTION_NAMES})
    for kind in ATTENTION_TYPES:
        before, after = start.config.alpha_settings(kind), resolved.alpha_settings(kind)
        init_given = "alpha_init" in given or f"{kind}_alpha_init" in given
        if before.learn and not after.learn and not init_given:
            raise HfEntmaxValueError(
                f"--learn_alpha False: α of {ATTENTION_LABELS[kind]} was learned per head in {start.name}; give "
                "--alpha_init (one α for every head) to fix it"
            )
        if not before.learn and after.learn and not init_given and after.init != "random":
            if not after.minimum <= float(after.init) <= after.maximum:
                raise HfEntmaxValueError(
                    f"--learn_alpha True: α of {ATTENTION_LABELS[kind]} is fixed at {after.init} in {start.name}, "
                    f"outside [alpha_min, alpha_max] = [{after.minimum}, {after.maximum}] where a learned α lives; "
                    "give --alpha_init (e.g. 1.1) to say where it starts"
                )
    scaling = ScalingOptions(**{name: options[name] for name in SCALING_OPTION_NAMES})
    if "attention_scaling_projection_bias" not in given and not scaling.scales_per_token():
        # The checkpoint's per-token maps had biases; the scaling the flags chose instead has no maps to give them.
        options["attention_scaling_projection_bias"] = False
    return options


def resolve_position_options(start: StartingPoint, given: dict[str, object]) -> dict[str, object]:
    """The position fields of the model to train: a fresh model's from the flags given over the config's defaults, a
    checkpoint's own.

    Raises:
        HfEntmaxValueError: a flag asking a checkpoint for other positions (type, θ, encoder directions) than its
            weights were trained with, or ``--rope_theta`` for positions other than RoPE (it would be ignored).
    """
    defaults = {option: getattr(PositionOptions, option) for option in POSITION_OPTION_NAMES}
    if start.kind == "fresh":
        fresh = START_DEFAULTS["fresh"].model
        options = defaults | {name: value for name, value in fresh.items() if name in POSITION_OPTION_NAMES} | given
    else:
        options = {name: getattr(start.config, name, default) for name, default in defaults.items()}
        kind = options["position_embedding_type"]
        if given.get("position_embedding_type", kind) != kind:
            raise HfEntmaxValueError(
                f"--position_embedding_type {given['position_embedding_type']}: --model_name_or_path {start.name} "
                f"has {kind} positions, which its weights were trained with; leave the flag out, or train a fresh "
                "model with other positions"
            )
    if "rope_theta" in given and "rope" not in (
        options["position_embedding_type"],
        options["cross_attention_positions"],
    ):
        raise HfEntmaxValueError(
            f"--rope_theta applies to RoPE positions, but the model's are {options['position_embedding_type']}: give "
            "--position_embedding_type rope or --cross_attention_positions rope (a fresh model), or leave "
            "--rope_theta out"
        )
    if given.get("rope_theta", options["rope_theta"]) != options["rope_theta"]:
        raise HfEntmaxValueError(
            f"--rope_theta {given['rope_theta']:g}: --model_name_or_path {start.name} rotates with θ = "
            f"{options['rope_theta']:g}, which its weights were trained with; leave the flag out"
        )
    cross = options["cross_attention_positions"]
    if given.get("cross_attention_positions", cross) != cross:
        raise HfEntmaxValueError(
            f"--cross_attention_positions {given['cross_attention_positions']}: --model_name_or_path {start.name} has "
            f"{cross!r}, which its weights were trained with; leave the flag out, or train a fresh model"
        )
    directions = options["encoder_alibi_directions"]
    if given.get("encoder_alibi_directions", directions) != directions:
        raise HfEntmaxValueError(
            f"--encoder_alibi_directions {given['encoder_alibi_directions']}: --model_name_or_path {start.name} has "
            f"{directions!r}, which its weights were trained with; leave the flag out"
        )
    return options


def describe_positions_line(model: AdaptiveEntmaxMarianMTModel, start: StartingPoint, given: dict[str, object]) -> str:
    """The positions a run trains with, and where the setting comes from, in one line."""
    source = "given" if given else {"fresh": "default"}.get(start.kind, "checkpoint's")
    return f"Positions ({source}): {describe_positions(model.config)}"


def load_model(
    model_args: ModelArguments,
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    start: StartingPoint | None = None,
) -> AdaptiveEntmaxMarianMTModel:
    """A fresh model of ``--model_size``, or one started from ``--model_name_or_path``, with the α settings resolved
    by `resolve_attention_options` (the run prints them with `describe_alpha` and `describe_scaling`).

    ``start`` is `read_starting_point(model_args.model_name_or_path)`, read here when not given.
    """
    start = start or read_starting_point(model_args.model_name_or_path)
    given = model_args.attention_options_given()
    options = resolve_attention_options(start, given)
    positions = resolve_position_options(start, model_args.position_options_given())
    dropout = (
        {} if model_args.dropout is None else {"dropout": model_args.dropout, "attention_dropout": model_args.dropout}
    )
    if model_args.attention_dropout is not None:
        dropout["attention_dropout"] = model_args.attention_dropout

    if start.kind == "fresh":
        config = build_config(
            **preset_config_kwargs(model_args.model_size),
            **options,
            **positions,
            vocab_size=len(tokenizer),
            max_position_embeddings=max(512, max_length),
            **({name: START_DEFAULTS["fresh"].model[name] for name in ("dropout", "attention_dropout")} | dropout),
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=tokenizer.pad_token_id,
            forced_eos_token_id=tokenizer.eos_token_id,
            scale_embedding=True,
            **({"layer_style": model_args.layer_style} if model_args.layer_style else {}),
        )
        return AdaptiveEntmaxMarianMTModel(config)

    # The checkpoint's architecture fields (Marian's are a subset of ours), with the resolved α and dropout on top.
    architecture = {
        key: value
        for key, value in start.config.to_dict().items()
        if key in AdaptiveEntmaxMarianConfig.__dataclass_fields__ and key not in ATTENTION_OPTION_NAMES
    }
    config = build_config(**(architecture | dropout), **options)
    # transformers reports every missing key; new α logits and new scaling parameters are expected (initialised from
    # the config), and so are the scaling parameters of a type the run stops scaling; anything else is a checkpoint
    # that does not fit, said here in one line instead.
    verbosity = transformers.utils.logging.get_verbosity()
    transformers.utils.logging.set_verbosity_error()
    try:
        model, loading = load_pretrained(
            AdaptiveEntmaxMarianMTModel,
            Path(model_args.model_name_or_path),
            f"--model_name_or_path {model_args.model_name_or_path}",
            config=config,
            output_loading_info=True,
        )
    finally:
        transformers.utils.logging.set_verbosity(verbosity)
    # Where the learned scaling changes (turned on, off, or from one method to another), the checkpoint's scaling
    # parameters are dropped and the new ones start from the config's initialisation.
    changed = {
        kind
        for kind in ATTENTION_TYPES
        if start.kind == "marian" or start.config.scaling_method(kind) != config.scaling_method(kind)
    }
    scaled_before = {kind for kind in changed if start.kind != "marian" and start.config.has_learned_scaling(kind)}
    scaled_now = {kind for kind in changed if config.has_learned_scaling(kind)}
    # Per-token maps that gain a bias start it at 0 (the same function); those that lose it drop it.
    biased_before = getattr(start.config, "attention_scaling_projection_bias", False)
    biased_now = config.attention_scaling_projection_bias
    missing = [
        key
        for key in loading["missing_keys"]
        if not key.endswith("alpha_logits")
        and not _is_scaling_key(key, scaled_now)
        and not (biased_now and not biased_before and key.endswith(PROJECTION_BIASES))
    ]
    unexpected = [
        key
        for key in loading["unexpected_keys"]
        if not _is_scaling_key(key, scaled_before)
        and not (biased_before and not biased_now and key.endswith(PROJECTION_BIASES))
    ]
    problems = {"missing": missing, "unexpected": unexpected, "mismatched": loading["mismatched_keys"]}
    if any(problems.values()):
        listed = "; ".join(f"{what}: {', '.join(map(str, keys[:4]))}" for what, keys in problems.items() if keys)
        raise HfEntmaxValueError(
            f"--model_name_or_path {model_args.model_name_or_path}: its weights do not fit ({listed})"
        )
    if start.kind == "adaptive_entmax_marian":
        # Logits of a type whose α the user restarts were loaded from the checkpoint: set them to the new start.
        restarted = {kind for kind in ATTENTION_TYPES if "alpha_init" in given or f"{kind}_alpha_init" in given}
        with torch.no_grad():
            for module in model.modules():
                if isinstance(module, AdaptiveEntmaxMarianAttention) and module.attention_type in restarted:
                    module.reset_alpha_logits()
                if isinstance(module, AdaptiveEntmaxMarianAttention) and module.attention_type in scaled_now:
                    module.init_scaling(overwrite=True)
    return model


def _is_scaling_key(key: str, attention_types: set[str]) -> bool:
    """Whether ``key`` is a query-scaling parameter of an attention module of one of ``attention_types``."""
    if not is_scaling_parameter(key):
        return False
    if ".encoder_attn." in key:
        kind = "cross"
    else:
        kind = "encoder_self" if ".encoder." in key else "decoder_self"
    return kind in attention_types


def describe_scaling(model: AdaptiveEntmaxMarianMTModel, start: StartingPoint, given: dict[str, object]) -> list[str]:
    """One line per attention type whose queries are scaled (ASEntmax per head or per token, SSMax, softmax_matched),
    and where the setting comes from; none when no attention type is scaled."""
    scales = model.get_attention_scales()
    lines = []
    for kind in ATTENTION_TYPES:
        method = model.config.scaling_method(kind)
        if method == "none":
            continue
        label = f"{ATTENTION_LABELS[kind] + ':':<24}"
        flags = ("attention_scaling", f"{kind}_attention_scaling", "attention_scaling_offset")
        flags += ("attention_scaling_heads", "attention_scaling_projection_bias")
        source = (
            "given" if any(name in given for name in flags) else "default" if start.kind == "fresh" else "checkpoint's"
        )
        heads = scaled_heads_text(model.config, kind)
        heads = f"; {heads}" if heads else ""
        if method == "softmax_matched":
            lines.append(f"{label}queries scaled by n^(1 − α) for n keys (softmax_matched, {source}{heads})")
            continue
        scaled_before = start.kind == "adaptive_entmax_marian" and start.config.scaling_method(kind) == method
        how = "resumed from the checkpoint" if scaled_before else "new"
        formula, name = scaling_formula(method, model.config.attention_scaling_projection_bias)
        values = [] if method == "ssmax" else [f"δ {model.config.attention_scaling_offset:g}"]
        symbols = {"beta": "s"} if method == "ssmax" else {"beta": "β", "gamma": "γ"}
        values += [  # the per-head parameters' range now (per-token scaling has none)
            f"{symbol} {scales[kind][key].min():.2f}–{scales[kind][key].max():.2f}"
            for key, symbol in symbols.items()
            if kind in scales
        ]
        lines.append(f"{label}queries scaled by {formula} ({name}, {how}; {source}{heads}): {', '.join(values)}")
    return lines


def describe_alpha(model: AdaptiveEntmaxMarianMTModel, start: StartingPoint, given: dict[str, object]) -> list[str]:
    """One line per attention type: how α is chosen in this run, and where the setting comes from."""
    default_source = {"fresh": "default", "marian": "MarianMT start", "adaptive_entmax_marian": "checkpoint's"}
    alphas = model.get_alphas()
    lines = []
    for kind in ATTENTION_TYPES:
        settings = model.config.alpha_settings(kind)
        flags = ("alpha_init", f"{kind}_alpha_init", "learn_alpha", f"{kind}_learn_alpha")
        source = "given" if any(name in given for name in flags) else default_source[start.kind]
        label = f"{ATTENTION_LABELS[kind] + ':':<24}"
        if not settings.learn:
            meaning = {1.0: " (softmax)", 1.5: " (1.5-entmax)", 2.0: " (sparsemax)"}.get(float(settings.init), "")
            lines.append(f"{label}α fixed at {float(settings.init):g}{meaning} ({source})")
            continue
        resumed = start.kind == "adaptive_entmax_marian" and start.config.alpha_settings(kind).learn
        resumed = resumed and not any(name in given for name in ("alpha_init", f"{kind}_alpha_init"))
        if resumed:
            how = "resumed from the checkpoint"
        elif settings.init == "random":
            how = "from a random start"
        else:
            how = f"from {float(settings.init):g}"
        values = alphas[kind]
        lines.append(
            f"{label}α learned per head, {how} ({source}; now {values.min():.2f}–{values.max():.2f}), "
            f"bounds [{settings.minimum:g}, {settings.maximum:g}]"
        )
    if all(
        not model.config.alpha_settings(kind).learn and float(model.config.alpha_settings(kind).init) == 1.0
        for kind in ATTENTION_TYPES
    ):
        lines.append(
            "Every head is softmax (α = 1, fixed): this run trains a softmax model. Give --learn_alpha True "
            "--alpha_init 1.1 to learn α per head."
        )
    return lines
