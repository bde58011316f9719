"""The defaults a training run gets: one table, by where the model starts, of everything a user does not give.

- The optimiser **recipe** (`RECIPES`). Trainer's own defaults (learning rate 5e-5, linear decay, no warm-up, Adam
  β₂ = 0.999) suit fine-tuning a large pretrained model; a translation model trained from scratch with them hardly
  learns (loss 6.2 after 200 steps of a `small` model on 50k pairs, against 3.8 with the from-scratch recipe). So a
  run picks a recipe by where the model starts (``--recipe auto``): ``from-scratch`` is the Transformer recipe of the
  project's Multi30k baseline, ``fine-tuning`` a gentle rate for weights that already work; ``none`` keeps Trainer's
  defaults. The α logits learn at a multiple of the model's rate: one logit per head, with small gradients, hardly
  moves at the model's own rate within a run of a few thousand steps (docs/benchmarks.md compares multiples).
- The **model's start** (`START_DEFAULTS`): dropout, and the α and query-scaling settings the attention flags
  resolve to when not given (`hf_entmax.training.model_loading` applies them).

Every flag given wins. `apply_recipe` is the one place that fills the optimiser settings in, for `hf-entmax train`
and for `hf_entmax.training.run.train` called from Python alike; the flags' help and docs/training.md's tables are
made from these tables (`defaults_tables`).
"""

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from transformers import Seq2SeqTrainingArguments

from ..errors import HfEntmaxValueError


class RecipeChoice(Protocol):
    """What `apply_recipe` reads and sets of `hf_entmax.training.arguments.ModelArguments` (which imports this
    module's tables for its help: a protocol rather than an import back)."""

    recipe: str
    model_name_or_path: str | None
    alpha_learning_rate: float | None
    recipe_applied: bool


@dataclass(frozen=True)
class Recipe:
    """A named set of default optimiser settings; ``settings`` maps `Seq2SeqTrainingArguments` fields to values."""

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
        # α has a few hundred steps to move from its start (1.1 after a MarianMT checkpoint).
        alpha_learning_rate_ratio=100.0,
    ),
    "none": Recipe(name="none", when="Trainer's own defaults", settings={}, alpha_learning_rate_ratio=1.0),
}
RECIPE_CHOICES = ("auto", *RECIPES)
# `AdaptiveEntmaxTrainer` used from Python without an α learning rate: the from-scratch recipe's multiple.
TRAINER_ALPHA_LEARNING_RATE_RATIO = RECIPES["from-scratch"].alpha_learning_rate_ratio


@dataclass(frozen=True)
class StartDefaults:
    """What a run that starts from ``kind`` gets for the flags not given: ``recipe`` (``--recipe auto``) and
    ``model``, the config fields (dropout, `AlphaOptions`, `ScalingOptions`) it starts with."""

    kind: str
    description: str
    recipe: str
    model: dict


START_DEFAULTS = {
    "fresh": StartDefaults(
        kind="fresh",
        description="a fresh model (no --model_name_or_path)",
        recipe="from-scratch",
        # α: the config's default, the paper's random start, with softmax-matched queries (why: docs/model.md,
        # "Softmax-matched queries"; what it changes: docs/benchmarks.md, "Quality at an equal budget").
        model={"dropout": 0.1, "attention_dropout": 0.1, "attention_scaling": "softmax_matched"},
    ),
    "marian": StartDefaults(
        kind="marian",
        description="a MarianMT checkpoint",
        recipe="fine-tuning",
        # Its heads were trained as softmax: they start as learned α-entmax heads close to it. Its dropout is its own.
        model={"alpha_init": 1.1, "learn_alpha": True},
    ),
    "adaptive_entmax_marian": StartDefaults(
        kind="adaptive_entmax_marian",
        description="an AdaptiveEntmaxMarian checkpoint",
        recipe="fine-tuning",
        model={},  # the checkpoint's own settings; a learned α resumes from its values
    ),
}


def choose_recipe(requested: str, starts_from_checkpoint: bool) -> Recipe:
    """The recipe ``--recipe`` names; ``auto`` picks the starting point's (`START_DEFAULTS`)."""
    if requested == "auto":
        # Both kinds of checkpoint share their recipe; which kind this one is needs its config, not read here.
        kind = "adaptive_entmax_marian" if starts_from_checkpoint else "fresh"
        return RECIPES[START_DEFAULTS[kind].recipe]
    if requested not in RECIPES:
        raise HfEntmaxValueError(f"--recipe must be one of {', '.join(RECIPE_CHOICES)}, got {requested!r}")
    return RECIPES[requested]


def settings_given(training_args: Seq2SeqTrainingArguments) -> set[str]:
    """The optimiser settings of ``training_args`` that differ from `Seq2SeqTrainingArguments`' defaults: from
    Python, what was given (a value equal to Trainer's default counts as not given; ``recipe="none"`` keeps them)."""
    names = {name for recipe in RECIPES.values() for name in recipe.settings}
    fields = Seq2SeqTrainingArguments.__dataclass_fields__
    return {name for name in names if _plain(getattr(training_args, name)) != _plain(fields[name].default)}


def _plain(value: object) -> object:
    return getattr(value, "value", value)  # an enum default (e.g. SchedulerType.LINEAR) as its value


def apply_recipe(
    model_args: RecipeChoice, training_args: Seq2SeqTrainingArguments, given: Collection[str] | None = None
) -> Seq2SeqTrainingArguments:
    """Fill in the optimiser settings not ``given`` from the recipe of ``model_args.recipe`` (``auto``: the
    starting point's), and the α learning rate at the recipe's ratio unless given; mark ``model_args`` so that the
    recipe is applied once.

    Args:
        model_args: Its ``recipe`` becomes the recipe's name, ``alpha_learning_rate`` the recipe's unless set.
        training_args: The run's arguments.
        given: The settings the user gave (the command line knows its flags); None: those that differ from
            Trainer's defaults (`settings_given`).

    Returns:
        ``training_args`` with the recipe's values (a copy, when it has any to fill in).
    """
    recipe = choose_recipe(model_args.recipe, model_args.model_name_or_path is not None)
    given = settings_given(training_args) if given is None else set(given)
    values = {name: value for name, value in recipe.settings.items() if name not in given}
    if values:
        training_args = dataclasses.replace(training_args, **values)
    model_args.recipe = recipe.name
    if model_args.alpha_learning_rate is None:
        model_args.alpha_learning_rate = recipe.alpha_learning_rate_ratio * training_args.learning_rate
    model_args.recipe_applied = True
    return training_args


def describe_recipe_settings(recipe: Recipe) -> str:
    """The recipe's settings in a few words, for the ``--recipe`` help."""
    settings = recipe.settings
    if not settings:
        return "Trainer's defaults"
    return (
        f"learning rate {settings['learning_rate']:g}, {settings['lr_scheduler_type'].replace('_', ' ')} decay after "
        f"a warm-up over {settings['warmup_steps']:.0%} of the steps, Adam betas ({settings['adam_beta1']:g}, "
        f"{settings['adam_beta2']:g}), α at {recipe.alpha_learning_rate_ratio:g} × the learning rate"
    )


def defaults_tables() -> str:
    """docs/training.md's tables of the defaults, made from `RECIPES` and `START_DEFAULTS`."""
    trainer = Seq2SeqTrainingArguments.__dataclass_fields__

    def value(recipe: Recipe, name: str) -> object:
        return recipe.settings.get(name, _plain(trainer[name].default))

    lines = [
        "| recipe | `--recipe auto` picks it for | learning rate | schedule | warm-up | Adam β | weight decay "
        "| clipping | α learning rate |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for recipe in RECIPES.values():
        starts = [point.description for point in START_DEFAULTS.values() if point.recipe == recipe.name]
        warmup = value(recipe, "warmup_steps")
        lines.append(
            f"| `{recipe.name}` | {' or '.join(starts) or 'only when asked for'} | {value(recipe, 'learning_rate'):g} "
            f"| {str(value(recipe, 'lr_scheduler_type')).replace('_', ' ')} "
            f"| {f'{warmup:.0%} of the steps' if 0 < warmup < 1 else int(warmup)} "
            f"| ({value(recipe, 'adam_beta1'):g}, {value(recipe, 'adam_beta2'):g}) "
            f"| {value(recipe, 'weight_decay'):g} | {value(recipe, 'max_grad_norm'):g} "
            f"| {recipe.alpha_learning_rate_ratio:g} × learning rate |"
        )
    lines += ["", "| starting point | recipe | model settings not given |", "| --- | --- | --- |"]
    for point in START_DEFAULTS.values():
        model = ", ".join(f"`{name}` {value}" for name, value in point.model.items()) or "the checkpoint's own"
        lines.append(f"| {point.description} | `{point.recipe}` | {model} |")
    return "\n".join(lines)


__all__ = [
    "RECIPES",
    "RECIPE_CHOICES",
    "START_DEFAULTS",
    "TRAINER_ALPHA_LEARNING_RATE_RATIO",
    "Recipe",
    "StartDefaults",
    "apply_recipe",
    "choose_recipe",
    "defaults_tables",
]
