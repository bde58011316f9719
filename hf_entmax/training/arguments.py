"""Command-line arguments of `hf-entmax train`, as HfArgumentParser dataclasses.

Together with transformers' `Seq2SeqTrainingArguments` (output_dir, max_steps, eval/save strategy,
predict_with_generate, generation_num_beams, resume_from_checkpoint, report_to, …) they form the
whole command line; a single `.json` or `.yaml` file with the same keys works too.
"""

import argparse
import math
from dataclasses import Field, dataclass, field, fields, make_dataclass

from transformers import Seq2SeqTrainingArguments
from transformers.hf_argparser import string_to_bool

from ..common.config import LAYER_STYLE_DESCRIPTIONS
from ..errors import HfEntmaxValueError
from ..modeling.configuration_adaptive_entmax_marian import (
    ALIBI_DIRECTIONS,
    CROSS_ATTENTION_POSITION_TYPES,
    LAYER_STYLES,
    POSITION_TYPES,
    SCALED_HEADS,
    SCALING_METHODS,
    AlphaOptions,
    PositionOptions,
    ScalingOptions,
)
from .presets import MODEL_PRESETS
from .recipes import RECIPE_CHOICES, RECIPES, START_DEFAULTS, describe_recipe_settings


DEFAULT_MAX_LENGTH = 128
# The shortest length limit that leaves room for text: one token of it and the end-of-sequence token </s> (for
# generation, the decoder's start token) that every sequence has.
MIN_LENGTH = 2
LENGTH_FLAGS = ("max_source_length", "max_target_length", "val_max_target_length")
DEFAULT_MODEL_SIZE = "small"
DEFAULT_VOCAB_SIZE = 8000
# Joined examples per training pair with --document_context: one for every two pairs keeps sentences the majority.
DEFAULT_DOCUMENT_CONTEXT_RATIO = 0.5


def parse_alpha_init(value: str | float | None, flag: str) -> float | str | None:
    """``"random"``, a number in [1, 2] given as text, or None; anything else is a clear error."""
    if value is None or value == "random":
        return value
    try:
        alpha = float(value)
    except (TypeError, ValueError):
        raise HfEntmaxValueError(f"{flag} must be a number in [1, 2] or 'random', got {value!r}") from None
    if not 1.0 <= alpha <= 2.0:
        raise HfEntmaxValueError(f"{flag} must be a number in [1, 2] or 'random', got {value!r}")
    return alpha


def parse_finite_number(value: str | float, flag: str, minimum: float, *, strictly_above: bool = False) -> float:
    """A finite number given as text, at least ``minimum`` (or above it, with ``strictly_above``): the query scaling's
    offset (>= 0) and RoPE's base (> 1). Anything else is a clear error naming the bound."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    bound = number > minimum if strictly_above else number >= minimum  # False for NaN
    if not (bound and number < math.inf):
        raise HfEntmaxValueError(
            f"{flag} must be a finite number {'>' if strictly_above else '>='} {minimum:g}, got {value!r}"
        )
    return number


def check_length(flag: str, value: int | None) -> None:
    """Refuse a length limit (a positive number, or None) that leaves no room for text.

    Raises:
        HfEntmaxValueError: If ``value`` is below `MIN_LENGTH`, naming ``--flag`` and the minimum.
    """
    if value is not None and value < MIN_LENGTH:
        taken = (
            "the decoder's start token, which begins every generated sequence"
            if flag == "generation_max_length"
            else "</s>, which ends every sequence"
        )
        raise HfEntmaxValueError(
            f"--{flag} {value} leaves no room for text: 1 token goes to {taken}; give at least {MIN_LENGTH}"
        )


def attention_flag_help(option: Field, not_given: str) -> str:
    """The help of a model option (α, query scaling, positions) as a flag: its own help, and what happens when it is
    not given."""
    return f"{option.metadata['help']} Not given: {not_given}"


# The α and query-scaling options of the config, as flags of `hf-entmax train` and `hf-entmax convert`.
ATTENTION_OPTIONS = (*fields(AlphaOptions), *fields(ScalingOptions))
ATTENTION_OPTION_NAMES = tuple(option.name for option in ATTENTION_OPTIONS)
SCALING_OPTION_NAMES = tuple(option.name for option in fields(ScalingOptions))
# The position options of the config, as flags of `hf-entmax train` only: a fresh model's choice, since a checkpoint's
# weights were trained with its own positions (`hf_entmax.training.model_loading.resolve_position_options`).
POSITION_OPTIONS = fields(PositionOptions)
POSITION_OPTION_NAMES = tuple(option.name for option in POSITION_OPTIONS)

TRAIN_ALPHA_NOT_GIVEN = (
    "an AdaptiveEntmaxMarian checkpoint's own setting; a learned α from "
    f"{START_DEFAULTS['marian'].model['alpha_init']:g} for a MarianMT checkpoint; the default of "
    "AdaptiveEntmaxMarianConfig for a fresh model."
)
TRAIN_SCALING_NOT_GIVEN = (
    "an AdaptiveEntmaxMarian checkpoint's own setting; none for a MarianMT checkpoint (it keeps its softmax "
    f"function); {START_DEFAULTS['fresh'].model['attention_scaling']} for a fresh model."
)
TRAIN_NOT_GIVEN = {
    **{option.name: TRAIN_ALPHA_NOT_GIVEN for option in fields(AlphaOptions)},
    **dict.fromkeys(SCALING_OPTION_NAMES, TRAIN_SCALING_NOT_GIVEN),
    # Not methods: a run that does not give them has the config's default, unless a checkpoint has its own.
    **dict.fromkeys(
        ("attention_scaling_offset", "attention_scaling_heads", "attention_scaling_projection_bias"),
        "an AdaptiveEntmaxMarian checkpoint's own setting; else the default of AdaptiveEntmaxMarianConfig.",
    ),
    **dict.fromkeys(
        POSITION_OPTION_NAMES,
        "a checkpoint's own (a MarianMT checkpoint's are sinusoidal), which cannot change: its weights were trained "
        "with them; the default of AdaptiveEntmaxMarianConfig for a fresh model.",
    ),
}


def _as_flag(option: Field) -> tuple[str, type, Field]:
    """A model option as a `hf-entmax train` flag that defaults to None, i.e. "not given".

    A flag that is not given keeps the starting checkpoint's setting (see `hf_entmax.training.model_loading`), so the
    command must tell "not given" from "given the default value". Values travel as text ("random" or a number).
    """
    flag_type = bool | None if option.type in (bool, bool | None) else str | None
    help_text = attention_flag_help(option, TRAIN_NOT_GIVEN[option.name])
    return option.name, flag_type, field(default=None, metadata={"help": help_text})


# The α, query-scaling and position flags of `hf-entmax train`, derived from the one definition the config inherits.
AttentionArguments = make_dataclass("AttentionArguments", [_as_flag(option) for option in ATTENTION_OPTIONS])
PositionArguments = make_dataclass("PositionArguments", [_as_flag(option) for option in POSITION_OPTIONS])


def add_attention_arguments(parser: argparse.ArgumentParser, not_given: str) -> None:
    """Add the attention flags (α and query scaling) to an argparse command (``hf-entmax convert``), as
    `hf-entmax train` has them: ``--learn_alpha``, ``--learn_alpha True`` and ``--learn_alpha False`` all work; not
    given means None."""
    for option in ATTENTION_OPTIONS:
        help_text = attention_flag_help(option, not_given)
        if option.type in (bool, bool | None):
            parser.add_argument(f"--{option.name}", type=string_to_bool, nargs="?", const=True, help=help_text)
        else:
            parser.add_argument(f"--{option.name}", help=help_text)


def parse_choice(value: str, choices: tuple[str, ...], flag: str) -> str:
    """One of ``choices``; anything else is a clear error listing them."""
    if value not in choices:
        raise HfEntmaxValueError(f"{flag} must be one of {', '.join(choices)}, got {value!r}")
    return value


def given_attention_options(
    arguments: object, flag_prefix: str = "--", options: tuple[Field, ...] = ATTENTION_OPTIONS
) -> dict[str, object]:
    """The model options (by default the attention ones) given on the command line (not None), parsed: α inits as
    floats or "random", α bounds, the scaling offset and RoPE's base as floats, scaling methods, scaled heads and
    position types checked."""
    given = {}
    for option in options:
        value = getattr(arguments, option.name)
        if value is None:
            continue
        flag = f"{flag_prefix}{option.name}"
        if option.name.endswith("alpha_init"):
            value = parse_alpha_init(value, flag)
        elif option.name.endswith("attention_scaling"):
            value = parse_choice(value, SCALING_METHODS, flag)
        elif option.name == "attention_scaling_heads":
            value = parse_choice(value, SCALED_HEADS, flag)
        elif option.name == "attention_scaling_offset":
            value = parse_finite_number(value, flag, 0.0)
        elif option.name == "position_embedding_type":
            value = parse_choice(value, POSITION_TYPES, flag)
        elif option.name == "encoder_alibi_directions":
            value = parse_choice(value, ALIBI_DIRECTIONS, flag)
        elif option.name == "cross_attention_positions":
            value = parse_choice(value, CROSS_ATTENTION_POSITION_TYPES, flag)
        elif option.name == "rope_theta":
            value = parse_finite_number(value, flag, 1.0, strictly_above=True)
        elif not isinstance(value, bool):
            try:
                value = float(value)
            except ValueError:
                value = math.nan
            if not 1.0 <= value <= 2.0:
                raise HfEntmaxValueError(f"{flag} must be a number in [1, 2], got {getattr(arguments, option.name)!r}")
        given[option.name] = value
    return given


@dataclass
class ModelArguments(PositionArguments, AttentionArguments):
    """Which model to train, how its attention chooses α and scales its queries, how a fresh model knows positions,
    and the optimiser recipe for flags not given."""

    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "An AdaptiveEntmaxMarian folder or Hub id to fine-tune, or a MarianMT one to start from its "
            "weights (its softmax heads become α-entmax heads). Omit to train a fresh model of --model_size."
        },
    )
    model_size: str | None = field(
        default=None,
        metadata={
            "help": f"Size of a fresh model: one of {', '.join(MODEL_PRESETS)} (base = Transformer-Base). "
            f"Default: {DEFAULT_MODEL_SIZE}. Not with --model_name_or_path (the checkpoint has its size)."
        },
    )
    layer_style: str | None = field(
        default=None,
        metadata={
            "help": "Layers of a fresh model: 'marian' = Marian's post-norm layers (the default); "
            + "; ".join(f"'{style}' = {description}" for style, description in LAYER_STYLE_DESCRIPTIONS.items())
            + ". See docs/model.md, Layer styles. Not with --model_name_or_path (the checkpoint has its own)."
        },
    )
    recipe: str = field(
        default="auto",
        metadata={
            "help": "Default optimiser settings for the flags you do not give: "
            # argparse formats help with %: a percentage in it is written %%.
            + "; ".join(
                f"'{name}' ({describe_recipe_settings(recipe).replace('%', '%%')})" for name, recipe in RECIPES.items()
            )
            + f"; or 'auto' ({START_DEFAULTS['adaptive_entmax_marian'].recipe} with --model_name_or_path, else "
            f"{START_DEFAULTS['fresh'].recipe}). One of {', '.join(RECIPE_CHOICES)}."
        },
    )
    alpha_learning_rate: float | None = field(
        default=None,
        metadata={
            "help": "Learning rate of the α logits (own optimizer group, no weight decay; 0 freezes α). "
            "Default: the recipe's, "
            + " and ".join(
                f"{recipe.alpha_learning_rate_ratio:g} × --learning_rate with {name}"
                for name, recipe in RECIPES.items()
                if recipe.settings
            )
            + ", so that α adapts within a short run."
        },
    )
    dropout: float | None = field(
        default=None,
        metadata={
            "help": "Dropout of residual connections and attention probabilities. Default: "
            f"{START_DEFAULTS['fresh'].model['dropout']:g} for a fresh model, the checkpoint's own when fine-tuning."
        },
    )
    attention_dropout: float | None = field(
        default=None,
        metadata={
            "help": "Dropout of the attention probabilities alone, overriding --dropout for them (e.g. 0 to keep "
            "sparse heads' supports whole in training). Default: --dropout."
        },
    )
    tokenizer_name: str | None = field(
        default=None,
        metadata={
            "help": "Tokenizer folder or Hub id. Default: the model's own; for a fresh model, a joint SentencePiece-"
            "style unigram tokenizer trained on the training data."
        },
    )
    vocab_size: int | None = field(
        default=None,
        metadata={
            "help": f"Vocabulary size of a tokenizer trained on the data (a fresh model without --tokenizer_name). "
            f"Default: {DEFAULT_VOCAB_SIZE}."
        },
    )

    # Set by `recipes.apply_recipe`: the recipe has filled in the settings not given (no flag: init=False).
    recipe_applied: bool = field(default=False, init=False, repr=False)

    def __post_init__(self):
        # A flag that would be ignored is refused: the checkpoint or the named tokenizer decides these.
        if self.model_name_or_path is not None and self.model_size is not None:
            raise HfEntmaxValueError(
                f"--model_size {self.model_size} applies to a fresh model; --model_name_or_path "
                f"{self.model_name_or_path} has its own size"
            )
        if self.model_name_or_path is not None and self.layer_style is not None:
            raise HfEntmaxValueError(
                f"--layer_style {self.layer_style} applies to a fresh model; --model_name_or_path "
                f"{self.model_name_or_path} has its own layers, which its weights were trained with"
            )
        if self.layer_style is not None:
            parse_choice(self.layer_style, LAYER_STYLES, "--layer_style")
        if (self.model_name_or_path or self.tokenizer_name) is not None and self.vocab_size is not None:
            raise HfEntmaxValueError(
                "--vocab_size applies to a tokenizer trained on the data; with --model_name_or_path or "
                "--tokenizer_name the given tokenizer keeps its vocabulary"
            )
        self.model_size = self.model_size or DEFAULT_MODEL_SIZE
        self.vocab_size = DEFAULT_VOCAB_SIZE if self.vocab_size is None else self.vocab_size
        if self.model_size not in MODEL_PRESETS:
            raise HfEntmaxValueError(
                f"--model_size must be one of {', '.join(MODEL_PRESETS)}, got {self.model_size!r}"
            )
        if self.recipe not in RECIPE_CHOICES:
            raise HfEntmaxValueError(f"--recipe must be one of {', '.join(RECIPE_CHOICES)}, got {self.recipe!r}")
        if self.alpha_learning_rate is not None and not (
            math.isfinite(self.alpha_learning_rate) and self.alpha_learning_rate >= 0
        ):
            raise HfEntmaxValueError(
                f"--alpha_learning_rate must be a finite number ≥ 0 (0 freezes α), got {self.alpha_learning_rate!r}"
            )
        for flag in ("dropout", "attention_dropout"):
            value = getattr(self, flag)
            if value is not None and not (math.isfinite(value) and 0.0 <= value < 1.0):
                raise HfEntmaxValueError(f"--{flag} must be in [0, 1), got {value!r}")
        if self.vocab_size < 8:
            raise HfEntmaxValueError(
                f"--vocab_size must be at least 8 (three special tokens and some pieces), got {self.vocab_size}"
            )
        # α, scaling and position values are checked now, before any data is read.
        self.attention_options_given()
        self.position_options_given()

    def attention_options_given(self) -> dict[str, object]:
        """The α and query-scaling flags given (parsed), by option name; the others keep the starting point's."""
        return given_attention_options(self)

    def position_options_given(self) -> dict[str, object]:
        """The position flags given (parsed), by option name; not given, a fresh model has the config's defaults."""
        return given_attention_options(self, options=POSITION_OPTIONS)


@dataclass
class DataArguments:
    """Where the parallel text comes from. With no data argument at all, the built-in synthetic pair is used."""

    source_lang: str | None = field(default=None, metadata={"help": "Source language code, e.g. de."})
    target_lang: str | None = field(default=None, metadata={"help": "Target language code, e.g. en."})
    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "A translation dataset: a Hub id (needs the network), a folder written by "
            "DatasetDict.save_to_disk (or Dataset.save_to_disk: the train split), or a folder of data files that "
            "datasets.load_dataset reads. Needs a 'translation' column or columns named by the language codes (or "
            "source/target); splits valid/dev/val serve as validation."
        },
    )
    dataset_config_name: str | None = field(
        default=None,
        metadata={"help": "Configuration of the --dataset_name dataset, e.g. de-en (not for save_to_disk folders)."},
    )
    train_file: str | None = field(
        default=None,
        metadata={
            "help": "Training pairs: .tsv (source<TAB>target), .csv, .json/.jsonl (JSON lines, an array, or an object "
            'holding a list; {"translation": {"de": …, "en": …}} or flat {"de": …, "en": …} records), .parquet, or a '
            "Dataset.save_to_disk folder. A .csv/.tsv header naming the language codes (or source/target) picks the "
            "columns; without one, column 1 is the source."
        },
    )
    validation_file: str | None = field(
        default=None, metadata={"help": "Validation pairs, in any --train_file format."}
    )
    test_file: str | None = field(default=None, metadata={"help": "Test pairs, in any --train_file format."})
    train_source_file: str | None = field(default=None, metadata={"help": "Training source sentences, one per line."})
    train_target_file: str | None = field(default=None, metadata={"help": "Training target sentences, line-aligned."})
    validation_source_file: str | None = field(default=None, metadata={"help": "Validation source sentences."})
    validation_target_file: str | None = field(default=None, metadata={"help": "Validation target sentences."})
    test_source_file: str | None = field(default=None, metadata={"help": "Test source sentences."})
    test_target_file: str | None = field(default=None, metadata={"help": "Test target sentences."})
    max_source_length: int | None = field(
        default=None,
        metadata={
            "help": "Source sentences are truncated to this many tokens. Default: 128, or fewer if the model's "
            "positions are a shorter table (sinusoidal positions: max_position_embeddings; the others have no limit)."
        },
    )
    max_target_length: int | None = field(
        default=None,
        metadata={
            "help": "Target sentences of the training data are truncated to this many tokens. Default: as "
            "--max_source_length."
        },
    )
    val_max_target_length: int | None = field(
        default=None,
        metadata={
            "help": "Targets of the validation and test data are truncated to this many tokens, and evaluation "
            "generates at most this many (unless --generation_max_length is given). Default: --max_target_length."
        },
    )
    source_prefix: str | None = field(
        default=None,
        metadata={"help": "Text put before every source sentence (e.g. a task prefix for T5-style data)."},
    )
    pad_to_max_length: bool = field(
        default=False,
        metadata={
            "help": "Pad every example to --max_source_length/--max_target_length instead of to the longest of its "
            "batch (slower on CPU; useful for TPUs)."
        },
    )
    ignore_pad_token_for_loss: bool = field(
        default=True, metadata={"help": "Leave padded label positions out of the loss."}
    )
    overwrite_cache: bool = field(default=False, metadata={"help": "Tokenize again instead of using cached results."})
    num_beams: int | None = field(
        default=None,
        metadata={
            "help": "Beams for evaluation and prediction (run_translation.py's name for --generation_num_beams). "
            "Default: 4."
        },
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training pairs."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only the first N validation pairs."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Use only the first N test pairs."})
    document_context: int | None = field(
        default=None,
        metadata={
            "help": "Document-level training: also train on 2 … N consecutive training pairs of one document joined "
            "into one example, so that the model learns to translate paragraphs. Local files: their line order is the "
            "document order and an empty pair (an empty line in both files) ends a document; --dataset_name: needs "
            "--document_column. Default: sentences only."
        },
    )
    document_context_ratio: float | None = field(
        default=None,
        metadata={
            "help": "Joined examples per training pair with --document_context, in (0, 1]: 0.5 adds one joined "
            f"example for every two pairs. Default: {DEFAULT_DOCUMENT_CONTEXT_RATIO:g}."
        },
    )
    document_column: str | None = field(
        default=None,
        metadata={
            "help": "With --document_context and --dataset_name: the column holding each row's document id "
            "(consecutive rows with the same id form a document)."
        },
    )
    synthetic_train_size: int = field(
        default=20000, metadata={"help": "Training pairs of the built-in synthetic pair (when no data is given)."}
    )
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for tokenization."})

    def __post_init__(self):
        positive = ["synthetic_train_size"]
        optional_positive = [
            "max_source_length",
            "max_target_length",
            "val_max_target_length",
            "num_beams",
            "max_train_samples",
            "max_eval_samples",
            "max_predict_samples",
            "preprocessing_num_workers",
        ]
        for name in positive + optional_positive:
            value = getattr(self, name)
            if (value is not None or name in positive) and not (isinstance(value, int) and value >= 1):
                raise HfEntmaxValueError(f"--{name} must be a positive whole number, got {value!r}")
        for name in LENGTH_FLAGS:
            check_length(name, getattr(self, name))
        self._check_document_context()

    def _check_document_context(self) -> None:
        """Refuse document options that would be ignored or cannot apply, and fill in the ratio."""
        if self.document_context is None:
            for name in ("document_context_ratio", "document_column"):
                if getattr(self, name) is not None:
                    raise HfEntmaxValueError(f"--{name} applies with --document_context N, which was not given")
            return
        if isinstance(self.document_context, bool) or not (
            isinstance(self.document_context, int) and self.document_context >= 2
        ):
            raise HfEntmaxValueError(
                f"--document_context must be a whole number ≥ 2 (the most pairs joined), got {self.document_context!r}"
            )
        ratio = DEFAULT_DOCUMENT_CONTEXT_RATIO if self.document_context_ratio is None else self.document_context_ratio
        if not (math.isfinite(ratio) and 0.0 < ratio <= 1.0):
            raise HfEntmaxValueError(
                f"--document_context_ratio must be in (0, 1] (joined examples per training pair), got {ratio!r}"
            )
        self.document_context_ratio = ratio
        if self.dataset_name is not None and self.document_column is None:
            raise HfEntmaxValueError(
                f"--document_context with --dataset_name {self.dataset_name!r} needs --document_column, the column of "
                "each row's document id: a dataset's row order alone does not say where documents end (local files "
                "in document order need none: an empty pair ends a document)"
            )
        if self.dataset_name is None and self.document_column is not None:
            raise HfEntmaxValueError(
                "--document_column applies to --dataset_name; in local files the line order is the document order "
                "and an empty pair (an empty line in both files) ends a document"
            )

    def resolve_lengths(self, max_positions: int | None) -> None:
        """Fill in the length limits not given: 128 tokens, or ``max_positions`` (the model's) if fewer."""
        default = DEFAULT_MAX_LENGTH if max_positions is None else min(DEFAULT_MAX_LENGTH, max_positions)
        self.max_source_length = self.max_source_length or default
        self.max_target_length = self.max_target_length or default
        self.val_max_target_length = self.val_max_target_length or self.max_target_length

    def split_limits(self, split: str) -> tuple[int | None, int]:
        """The number of examples kept of ``split`` (None: all) and the length its targets are truncated to:
        ``--max_train_samples`` and ``--max_target_length`` for train, ``--max_eval_samples`` or
        ``--max_predict_samples`` and ``--val_max_target_length`` for validation and test."""
        limits = {
            "train": (self.max_train_samples, self.max_target_length),
            "validation": (self.max_eval_samples, self.val_max_target_length),
            "test": (self.max_predict_samples, self.val_max_target_length),
        }
        return limits.get(split, (None, self.max_target_length))

    def target_length_flag(self, split: str) -> str:
        """The flag whose length ``split``'s targets are truncated to."""
        return "--max_target_length" if split == "train" else "--val_max_target_length"

    def local_files(self) -> dict[str, str]:
        """The local-file arguments that were given, by name."""
        names = [
            "train_file",
            "validation_file",
            "test_file",
            "train_source_file",
            "train_target_file",
            "validation_source_file",
            "validation_target_file",
            "test_source_file",
            "test_target_file",
        ]
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}

    def uses_synthetic_data(self) -> bool:
        return self.dataset_name is None and not self.local_files()


@dataclass
class TrainingArguments(Seq2SeqTrainingArguments):
    """transformers' `Seq2SeqTrainingArguments`, with run_translation.py's ``--overwrite_output_dir`` and its numbers
    checked at the boundary (Trainer would only fail on them deep inside torch, mid-run)."""

    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Write into --output_dir even if it holds files that are not from an earlier hf-entmax run "
            "(they are kept, but files of the same name are replaced)."
        },
    )

    def __post_init__(self):
        checks = [
            ("learning_rate", self.learning_rate, lambda value: value >= 0, "≥ 0"),
            ("weight_decay", self.weight_decay, lambda value: value >= 0, "≥ 0"),
            ("max_grad_norm", self.max_grad_norm, lambda value: value >= 0, "≥ 0 (0 disables clipping)"),
            ("warmup_steps", self.warmup_steps, lambda value: value >= 0, "≥ 0 (a fraction below 1 of the steps)"),
            ("num_train_epochs", self.num_train_epochs, lambda value: value > 0, "> 0"),
            ("label_smoothing_factor", self.label_smoothing_factor, lambda value: 0 <= value < 1, "in [0, 1)"),
            ("adam_beta1", self.adam_beta1, lambda value: 0 <= value < 1, "in [0, 1)"),
            ("adam_beta2", self.adam_beta2, lambda value: 0 <= value < 1, "in [0, 1)"),
            ("adam_epsilon", self.adam_epsilon, lambda value: value > 0, "> 0"),
            ("seed", self.seed, lambda value: 0 <= value < 2**32, "in [0, 2**32)"),
        ]
        for name, value, allowed, expected in checks:
            if not (math.isfinite(value) and allowed(value)):
                raise HfEntmaxValueError(f"--{name} must be a finite number {expected}, got {value!r}")
        for name in (
            "per_device_train_batch_size",
            "per_device_eval_batch_size",
            "gradient_accumulation_steps",
            "generation_num_beams",
            "generation_max_length",
        ):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise HfEntmaxValueError(f"--{name} must be a positive whole number, got {getattr(self, name)!r}")
        check_length("generation_max_length", self.generation_max_length)
        if self.max_steps == 0 or self.max_steps < -1:
            raise HfEntmaxValueError(
                f"--max_steps must be a positive number of steps (or -1: epochs), got {self.max_steps}"
            )
        for strategy, steps in (("save_strategy", "save_steps"), ("eval_strategy", "eval_steps")):
            value = getattr(self, steps)
            if getattr(self, strategy) == "steps" and value is not None and value <= 0:
                raise HfEntmaxValueError(f"--{steps} must be positive with --{strategy} steps, got {value}")
        super().__post_init__()
