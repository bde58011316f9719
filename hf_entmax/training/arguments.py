"""Command-line arguments of `hf-entmax train`, as HfArgumentParser dataclasses.

Together with transformers' `Seq2SeqTrainingArguments` (output_dir, max_steps, eval/save strategy,
predict_with_generate, generation_num_beams, resume_from_checkpoint, report_to, …) they form the
whole command line; a single `.json` or `.yaml` file with the same keys works too.
"""

from dataclasses import dataclass, field

from ..errors import HfEntmaxValueError
from .presets import MODEL_PRESETS


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


@dataclass
class ModelArguments:
    """Which model to train, and how its attention chooses α."""

    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "An AdaptiveEntmaxMarian folder or Hub id to fine-tune, or a MarianMT one to start from its "
            "weights (its softmax heads become α-entmax heads). Omit to train a fresh model of --model_size."
        },
    )
    model_size: str = field(
        default="small",
        metadata={"help": f"Size of a fresh model: one of {', '.join(MODEL_PRESETS)} (base = Transformer-Base)."},
    )
    alpha_init: str = field(
        default="random",
        metadata={"help": "Initial α of every head: a number in [1, 2] (1 = softmax) or 'random' (the paper's)."},
    )
    learn_alpha: bool = field(default=True, metadata={"help": "Learn α per head (--learn_alpha False fixes it)."})
    alpha_min: float = field(default=1.01, metadata={"help": "Lower bound of a learned α (the paper's 1.01)."})
    alpha_max: float = field(default=2.0, metadata={"help": "Upper bound of a learned α."})
    alpha_learning_rate: float | None = field(
        default=None,
        metadata={
            "help": "Learning rate of the α logits (own optimizer group, no weight decay); "
            "default: 10 × --learning_rate, so that α adapts within a short run."
        },
    )
    encoder_self_alpha_init: str | None = field(
        default=None, metadata={"help": "Override of --alpha_init for encoder self-attention."}
    )
    decoder_self_alpha_init: str | None = field(
        default=None, metadata={"help": "Override of --alpha_init for decoder self-attention."}
    )
    cross_alpha_init: str | None = field(
        default=None, metadata={"help": "Override of --alpha_init for cross-attention."}
    )
    encoder_self_learn_alpha: bool | None = field(
        default=None, metadata={"help": "Override of --learn_alpha for encoder self-attention."}
    )
    decoder_self_learn_alpha: bool | None = field(
        default=None, metadata={"help": "Override of --learn_alpha for decoder self-attention."}
    )
    cross_learn_alpha: bool | None = field(
        default=None, metadata={"help": "Override of --learn_alpha for cross-attention."}
    )
    dropout: float = field(default=0.1, metadata={"help": "Dropout of a fresh model (residual and attention)."})
    tokenizer_name: str | None = field(
        default=None,
        metadata={
            "help": "Tokenizer folder or Hub id. Default: the model's own; for a fresh model, a joint SentencePiece-"
            "style unigram tokenizer trained on the training data."
        },
    )
    vocab_size: int = field(default=8000, metadata={"help": "Vocabulary size of a tokenizer trained on the data."})

    def __post_init__(self):
        if self.model_size not in MODEL_PRESETS:
            raise HfEntmaxValueError(
                f"--model_size must be one of {', '.join(MODEL_PRESETS)}, got {self.model_size!r}"
            )
        self.alpha_init = parse_alpha_init(self.alpha_init, "--alpha_init")
        for kind in ("encoder_self", "decoder_self", "cross"):
            name = f"{kind}_alpha_init"
            setattr(self, name, parse_alpha_init(getattr(self, name), f"--{name}"))

    def alpha_config(self) -> dict:
        """The α fields of `AdaptiveEntmaxMarianConfig` these arguments ask for."""
        return {
            "alpha_init": self.alpha_init,
            "learn_alpha": self.learn_alpha,
            "alpha_min": self.alpha_min,
            "alpha_max": self.alpha_max,
            "encoder_self_alpha_init": self.encoder_self_alpha_init,
            "decoder_self_alpha_init": self.decoder_self_alpha_init,
            "cross_alpha_init": self.cross_alpha_init,
            "encoder_self_learn_alpha": self.encoder_self_learn_alpha,
            "decoder_self_learn_alpha": self.decoder_self_learn_alpha,
            "cross_learn_alpha": self.cross_learn_alpha,
        }


@dataclass
class DataArguments:
    """Where the parallel text comes from. With no data argument at all, the built-in synthetic pair is used."""

    source_lang: str | None = field(default=None, metadata={"help": "Source language code, e.g. de."})
    target_lang: str | None = field(default=None, metadata={"help": "Target language code, e.g. en."})
    dataset_name: str | None = field(default=None, metadata={"help": "A translation dataset on the Hub (online)."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Its configuration, e.g. de-en."})
    train_file: str | None = field(
        default=None, metadata={"help": "Training pairs: .tsv (source<TAB>target) or .jsonl."}
    )
    validation_file: str | None = field(default=None, metadata={"help": "Validation pairs: .tsv or .jsonl."})
    test_file: str | None = field(default=None, metadata={"help": "Test pairs: .tsv or .jsonl."})
    train_source_file: str | None = field(default=None, metadata={"help": "Training source sentences, one per line."})
    train_target_file: str | None = field(default=None, metadata={"help": "Training target sentences, line-aligned."})
    validation_source_file: str | None = field(default=None, metadata={"help": "Validation source sentences."})
    validation_target_file: str | None = field(default=None, metadata={"help": "Validation target sentences."})
    test_source_file: str | None = field(default=None, metadata={"help": "Test source sentences."})
    test_target_file: str | None = field(default=None, metadata={"help": "Test target sentences."})
    max_source_length: int = field(
        default=128, metadata={"help": "Source sentences are truncated to this many tokens."}
    )
    max_target_length: int = field(
        default=128, metadata={"help": "Target sentences are truncated to this many tokens."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training pairs."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only the first N validation pairs."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Use only the first N test pairs."})
    synthetic_train_size: int = field(
        default=20000, metadata={"help": "Training pairs of the built-in synthetic pair (when no data is given)."}
    )
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for tokenization."})

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
