"""`hf-entmax train`: train or fine-tune an AdaptiveEntmaxMarian translation model.

Arguments are `ModelArguments`, `DataArguments` and transformers' `Seq2SeqTrainingArguments`, given as
flags or as one `.json`/`.yaml` file. With no data argument the built-in synthetic pair is used.
"""

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
import yaml
from transformers import HfArgumentParser, Seq2SeqTrainingArguments
from transformers.integrations import get_reporting_integration_callbacks

from ..errors import HfEntmaxValueError, one_line
from ..hub.model_card import write_training_card
from ..training.arguments import DataArguments, ModelArguments, TrainingArguments
from ..training.recipes import apply_recipe
from ..training.run import claimed_output_dir, train
from .parsing import OneLineErrors, unknown_flags_message


DEFAULT_OUTPUT_DIR = "outputs/train"
STAGE_FLAGS = ("do_train", "do_eval", "do_predict")


class OneLineArgumentParser(OneLineErrors, HfArgumentParser):
    """HfArgumentParser whose errors (a bad value, a missing one) are one line, not the usage of 300 flags."""


def build_parser(prog: str = "hf-entmax train", description: str | None = __doc__) -> HfArgumentParser:
    # No abbreviations: the command must know exactly which flags were given (a recipe fills in the others).
    return OneLineArgumentParser(
        (ModelArguments, DataArguments, TrainingArguments),
        prog=prog,
        description=description,
        allow_abbrev=False,
    )


def parse_arguments(
    argv: Sequence[str], prog: str = "hf-entmax train", description: str | None = __doc__
) -> tuple[ModelArguments, DataArguments, TrainingArguments]:
    """Parse flags, or a single .json/.yaml file, into the three argument dataclasses.

    Settings not given are filled in, in this order of precedence: what the user gave; the optimiser recipe
    (`hf_entmax.training.recipes`) for where the model starts; the command's own defaults (``--output_dir
    outputs/train``, CPU settings without an accelerator); the dataclasses' defaults.
    """
    parser = build_parser(prog, description)
    argv = list(argv)
    if len(argv) == 1 and argv[0].endswith((".json", ".yaml", ".yml")):
        values = _read_config_file(Path(argv[0]))
        given = set(values)
        values = {**_command_defaults(given), **values}
        try:
            parsed = parser.parse_dict(_typed_values(parser, values, argv[0]))
        except (ValueError, TypeError) as error:  # unknown keys, or a value a dataclass refuses
            raise HfEntmaxValueError(f"{argv[0]}: {one_line(error, 400)}") from None
    else:
        given = _given_flags(argv)
        for name, value in _command_defaults(given).items():
            argv += [f"--{name}", str(value)]
        try:
            parsed = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
        except ValueError as error:  # a value a dataclass refuses in __post_init__
            raise HfEntmaxValueError(one_line(error, 400)) from None
        *parsed, unknown = parsed
        if unknown:
            parser.error(unknown_flags_message(parser, unknown))
    model_args, data_args, training_args = parsed
    check_report_to(training_args.report_to)
    training_args = apply_recipe(model_args, training_args, given)
    _set_stages(training_args, given)
    return model_args, data_args, training_args


def _set_stages(training_args: Seq2SeqTrainingArguments, given: set[str]) -> None:
    """Turn the stage flags into what `hf_entmax.training.run.choose_stages` reads: True (run it, its data is
    required), False (skip it) or None (run it if the data has the split).

    As in run_translation.py, stages given as True are exactly what runs. Without any, the command does everything
    the data allows, less the stages given as False: ``--do_train False`` evaluates a checkpoint.
    """
    stages = {name: getattr(training_args, name) if name in given else None for name in STAGE_FLAGS}
    if any(stages.values()):
        stages = {name: bool(value) for name, value in stages.items()}
    elif all(value is False for value in stages.values()):
        raise HfEntmaxValueError("--do_train, --do_eval and --do_predict are all False: there is nothing to do")
    else:
        stages = {name: (None if value is None else False) for name, value in stages.items()}
        stages["do_train"] = stages["do_train"] if "do_train" in given else True
    for name, value in stages.items():
        setattr(training_args, name, value)


def _command_defaults(given: set[str]) -> dict:
    """The settings the command supplies for what was not given: the output folder and CPU settings (the recipe's
    are filled in after parsing, by `apply_recipe`)."""
    defaults = {"output_dir": DEFAULT_OUTPUT_DIR}
    if not torch.accelerator.is_available():
        # Without an accelerator, say so: only then do processes started by torchrun form a (gloo) DDP group
        # instead of each training alone, and the data loader stops pinning memory for a GPU that is not there.
        defaults.update(use_cpu=True, dataloader_pin_memory=False)
    return {name: value for name, value in defaults.items() if name not in given}


def _given_flags(argv: list[str]) -> set[str]:
    """Names of the flags in ``argv`` (``--no_x`` counts as ``x``)."""
    names = set()
    for argument in argv:
        if argument.startswith("--"):
            name = argument[2:].split("=", 1)[0]
            names.add(name)
            names.add(name.removeprefix("no_"))
    return names


def check_report_to(report_to: list[str]) -> None:
    """Refuse a ``--report_to`` integration that is unknown or not installed before the run starts (Trainer would
    only fail on it after the data and the tokenizer are ready).

    Raises:
        HfEntmaxValueError: naming the integration and what to do.
    """
    try:
        for callback in get_reporting_integration_callbacks(report_to):
            callback()  # the integrations check that their package is installed when made, and do nothing else
    except (ValueError, RuntimeError, ImportError) as error:
        raise HfEntmaxValueError(f"--report_to {' '.join(report_to)}: {one_line(error, 400)}") from None


def _typed_values(parser: HfArgumentParser, values: dict, file: str) -> dict:
    """The values of a config file converted as the same flags would be: YAML reads ``1e-3`` as text, and
    `HfArgumentParser.parse_dict` converts nothing."""
    actions = {action.dest: action for action in parser._actions}
    typed = {}
    for name, value in values.items():
        convert = getattr(actions.get(name), "type", None)
        if isinstance(value, str) and callable(convert) and convert is not str:
            try:
                value = convert(value)
            except (TypeError, ValueError, argparse.ArgumentTypeError):
                expected = {"float": "a number", "int": "a whole number", "string_to_bool": "true or false"}
                raise HfEntmaxValueError(
                    f"{file}: {name} must be {expected.get(convert.__name__, convert.__name__)}, got {value!r}"
                ) from None
        typed[name] = value
    return typed


def _read_config_file(path: Path) -> dict:
    if not path.is_file():
        raise HfEntmaxValueError(f"{path}: no such file (expected a .json or .yaml file of train arguments)")
    try:
        text = path.read_text(encoding="utf-8")
        values = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as error:
        raise HfEntmaxValueError(
            f"{path}: not a valid {path.suffix[1:].upper()} file ({one_line(error, 400)})"
        ) from None
    if not isinstance(values, dict):
        raise HfEntmaxValueError(
            f"{path}: expected a mapping of argument names to values, got {type(values).__name__}"
        )
    return values


def print_summary(summary: dict, output_dir: str) -> None:
    metrics = summary["metrics"]
    print(f"\nTrained {summary['source_lang']} -> {summary['target_lang']} for {summary['global_step']} steps.")
    for prefix, name in (("eval", "validation"), ("test", "test")):
        if f"{prefix}_bleu" in metrics:
            print(f"  {name:<10} BLEU {metrics[f'{prefix}_bleu']:.2f}  chrF {metrics[f'{prefix}_chrf']:.2f}")
    if any(key.endswith("_bleu") for key in metrics):
        print(f"  ({summary['sacrebleu_signatures']['bleu_signature']})")
    print("Learned α per head (layer rows):")
    for kind, layers in summary["alphas"].items():
        for layer, row in enumerate(layers):
            print(f"  {kind:<12} layer {layer}: " + " ".join(f"{alpha:.2f}" for alpha in row))
    print(f"Saved to {output_dir} (loads with trust_remote_code=True; pipeline('translation') works).")


def run_training(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments) -> dict:
    """`hf_entmax.training.run.train`, then the model card (README.md) of a run that trained, written once (by the
    main process of a distributed run), with the output folder held throughout. Returns the run's summary."""
    with claimed_output_dir(model_args, training_args):
        summary = train(model_args, data_args, training_args)
        if summary["did_train"] and training_args.process_index == 0:
            write_training_card(training_args.output_dir)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    model_args, data_args, training_args = parse_arguments(sys.argv[1:] if argv is None else argv)
    summary = run_training(model_args, data_args, training_args)
    print_summary(summary, training_args.output_dir)
    return 0
