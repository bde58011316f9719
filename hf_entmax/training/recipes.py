"""Training recipes: the optimiser settings `hf-entmax train` uses for the flags a user does not give.

Trainer's own defaults (learning rate 5e-5, linear decay, no warm-up, Adam β₂ = 0.999) suit fine-tuning a large
pretrained model; a translation model trained from scratch with them hardly learns (loss 6.2 after 200 steps of a
`small` model on 50k pairs, against 3.8 with the from-scratch recipe below). So the command picks a recipe by where the
model starts, and every flag the user gives wins over it:

- ``from-scratch`` (a fresh model of ``--model_size``): the Transformer recipe of the project's Multi30k baseline —
  AdamW 1e-3 with β = (0.9, 0.98), linear warm-up over the first 10% of the steps, then inverse square root decay,
  gradient clipping at 1, no weight decay; α logits at 10× the learning rate, so that α settles within a short run.
- ``fine-tuning`` (``--model_name_or_path``): a gentle rate for weights that already work, decaying linearly after a
  short warm-up; the α logits keep a rate high enough to move in a few hundred steps (100× the model's).
- ``none``: Trainer's defaults, as `Seq2SeqTrainingArguments` has them.
"""

from dataclasses import dataclass

from ..errors import HfEntmaxValueError


@dataclass(frozen=True)
class Recipe:
    """A named set of default flag values; ``settings`` maps flag names (without ``--``) to values."""

    name: str
    when: str
    settings: dict
    alpha_learning_rate_ratio: float = 1.0  # α's learning rate ÷ the model's, unless --alpha_learning_rate is given

    def describe(self) -> str:
        """The recipe in one line, for the start of a run."""
        return f"{self.name} ({self.when})"


RECIPES = {
    "from-scratch": Recipe(
        name="from-scratch",
        when="a fresh model",
        settings={
            "learning_rate": 1e-3,
            "lr_scheduler_type": "inverse_sqrt",
            "warmup_steps": 0.1,
            "adam_beta1": 0.9,
            "adam_beta2": 0.98,
            "weight_decay": 0.0,
            "max_grad_norm": 1.0,
        },
        alpha_learning_rate_ratio=10.0,
    ),
    "fine-tuning": Recipe(
        name="fine-tuning",
        when="a model started from a checkpoint",
        settings={
            "learning_rate": 1e-4,
            "lr_scheduler_type": "linear",
            "warmup_steps": 0.05,
            "adam_beta1": 0.9,
            "adam_beta2": 0.98,
            "weight_decay": 0.0,
            "max_grad_norm": 1.0,
        },
        alpha_learning_rate_ratio=100.0,
    ),
    "none": Recipe(name="none", when="Trainer's own defaults", settings={}, alpha_learning_rate_ratio=1.0),
}
RECIPE_CHOICES = ("auto", *RECIPES)


def choose_recipe(requested: str, starts_from_checkpoint: bool) -> Recipe:
    """The recipe ``--recipe`` names; ``auto`` picks ``fine-tuning`` for a checkpoint, ``from-scratch`` otherwise."""
    if requested == "auto":
        return RECIPES["fine-tuning" if starts_from_checkpoint else "from-scratch"]
    if requested not in RECIPES:
        raise HfEntmaxValueError(f"--recipe must be one of {', '.join(RECIPE_CHOICES)}, got {requested!r}")
    return RECIPES[requested]


def recipe_flags(recipe: Recipe, given: set[str]) -> dict:
    """The recipe's `Seq2SeqTrainingArguments` settings for the flags not in ``given``."""
    return {name: value for name, value in recipe.settings.items() if name not in given}
