"""What the length-extrapolation benchmarks (bench_length_synthetic.py, bench_length_decoder_only.py) share: the
command-line checks, the `from-scratch` recipe's optimiser and the training loop with its checkpoints (a stopped run
resumes), the number of test strings per length, one run trained and tested or read back from its ``result.json``, the
loop over all runs, and the table.

Each benchmark keeps what is its own: its tasks and batches, its model, its schedule, its decoding, what it reports
of the learned attention, and the table's footnote.
"""

import argparse
import json
import math
import os
import pickle
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import torch
from runs import benchmark_log, use_threads
from tables import measured_command, write_tables
from torch import nn

from hf_entmax.kernels.cpu import kernel_available
from hf_entmax.training.recipes import RECIPES
from hf_entmax.training.trainer import is_alpha_parameter


RECIPE = RECIPES["from-scratch"]
Log = Callable[[str], None]
CHECKPOINT_FILE = "checkpoint.pt"  # in a run folder while the run trains; gone once its result.json is written
# One run (task, positions, variant, seed) trained and tested, or read back: its result.json as a dict.
RunOne = Callable[[str, str, str, int, argparse.Namespace, Log], dict]


def check_positive(parser: argparse.ArgumentParser, arguments: argparse.Namespace, names: Sequence[str]) -> None:
    """Stop with the usage unless every option of ``names`` and every one of ``--test_multiples`` is at least 1."""
    for name in names:
        if getattr(arguments, name) < 1:
            parser.error(f"--{name} must be a positive integer, got {getattr(arguments, name)}")
    if min(arguments.test_multiples) < 1:
        parser.error(f"--test_multiples must be positive integers, got {arguments.test_multiples}")


def use_device(arguments: argparse.Namespace, fail: Callable[[str], NoReturn]) -> None:
    """Apply ``--threads`` and turn ``--device`` into a `torch.device`; ``fail(message)`` if it is not usable here."""
    use_threads(arguments)
    try:
        arguments.device = torch.device(arguments.device)
        torch.empty(0, device=arguments.device)
    except (RuntimeError, AssertionError) as error:
        fail(f"--device {arguments.device}: not usable here ({error})")


def add_save_models_option(parser: argparse.ArgumentParser) -> None:
    """``--save_models``: keep each trained model (`save_pretrained`) in its run folder's ``model/``."""
    parser.add_argument(
        "--save_models",
        action="store_true",
        help="save each model it trains in its run folder's model/, to inspect it later without training it again",
    )


def add_checkpoint_option(parser: argparse.ArgumentParser) -> None:
    """``--checkpoint_every N``: how often a run saves what it needs to resume after a stop."""

    def steps(text: str) -> int:
        if not text.isdigit():
            raise argparse.ArgumentTypeError(f"a number of steps, 0 or more, got {text!r}")
        return int(text)

    parser.add_argument(
        "--checkpoint_every",
        type=steps,
        default=500,
        help="steps between the checkpoints a stopped run resumes from when the same command runs again (0: none)",
    )


@dataclass(frozen=True)
class Checkpoint:
    """Where `train_steps` keeps, every ``every`` steps (never if 0), what a stopped run needs to go on: the model,
    optimiser, schedule, data stream and random state, and the loop's own figures. A run resumes only with the
    ``settings`` it was started with."""

    path: Path
    every: int
    settings: dict


def partial_checkpoint(checkpoint: Checkpoint) -> Path:
    """Where a checkpoint is written before it replaces the last one."""
    return checkpoint.path.with_name(checkpoint.path.name + ".partial")


def save_checkpoint(checkpoint: Checkpoint, state: dict) -> None:
    """Write ``state`` whole or not at all: a stop while writing leaves the previous checkpoint in place."""
    checkpoint.path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"settings": checkpoint.settings, **state}, partial_checkpoint(checkpoint))
    os.replace(partial_checkpoint(checkpoint), checkpoint.path)


def load_checkpoint(checkpoint: Checkpoint, device: torch.device) -> dict | None:
    """The state `save_checkpoint` wrote, its tensors on ``device``; None if there is none. Stops the benchmark if it
    cannot be read or was saved with other settings."""
    if not checkpoint.path.exists():
        return None
    try:
        state = torch.load(checkpoint.path, map_location=device, weights_only=True)
    except (OSError, RuntimeError, pickle.UnpicklingError) as error:
        sys.exit(f"{checkpoint.path}: not a checkpoint this benchmark can read ({error}); delete it to start over")
    if without_test_settings(state["settings"]) != without_test_settings(checkpoint.settings):
        sys.exit(
            f"{checkpoint.path} was saved by a run with other settings ({state['settings']}); use another "
            "--output_dir, or delete it to start over"
        )
    return state


def random_state(device: torch.device) -> list[torch.Tensor]:
    """torch's random state on the CPU and, training on a GPU, on ``device`` (what dropout draws from)."""
    return [torch.get_rng_state()] + ([torch.cuda.get_rng_state(device)] if device.type == "cuda" else [])


def set_random_state(state: list[torch.Tensor], device: torch.device) -> None:
    """Restore what `random_state` returned."""
    torch.set_rng_state(state[0].cpu())
    if device.type == "cuda":
        torch.cuda.set_rng_state(state[1].cpu(), device)


def recipe_optimizer(model: nn.Module, learning_rate: float) -> torch.optim.AdamW:
    """AdamW with the `from-scratch` recipe's betas and weight decay at ``learning_rate``; α logits (where the model
    learns α) at the recipe's multiple of it, as `hf-entmax train` sets them."""
    settings = RECIPE.settings
    alpha_parameters = [parameter for name, parameter in model.named_parameters() if is_alpha_parameter(name)]
    other_parameters = [parameter for name, parameter in model.named_parameters() if not is_alpha_parameter(name)]
    groups = [{"params": other_parameters}]
    if alpha_parameters:
        groups.append({"params": alpha_parameters, "lr": learning_rate * RECIPE.alpha_learning_rate_ratio})
    return torch.optim.AdamW(
        groups,
        lr=learning_rate,
        betas=(settings["adam_beta1"], settings["adam_beta2"]),
        weight_decay=settings["weight_decay"],
    )


def train_steps(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    next_batch: Callable[[], dict[str, torch.Tensor]],
    arguments: argparse.Namespace,
    label: str,
    log: Log,
    validate: Callable[[], tuple[float, float]] | None = None,
    validate_every: int = 0,
    checkpoint: Checkpoint | None = None,
    data: torch.Generator | None = None,
) -> dict:
    """``--steps`` steps on the batches of ``next_batch()`` (the model's keyword arguments, ``labels`` included),
    each clipped to the recipe's gradient norm and followed by a step of ``schedule``. Stops the benchmark if the loss
    is not finite. Returns ``{"final training loss": mean loss of the last 10% of steps, "steps per second": …}``.

    With ``validate``, every ``validate_every`` steps and after the last one the model is scored by ``validate()``
    (``(exact match, symbol accuracy)``, compared in that order) and the best-scoring weights, the earliest of equals,
    are the ones the model ends with, as a checkpoint chosen on validation data; the result then also holds
    ``"selected step"``, the scores by step (``"validation"``) and the seconds they took, which the steps per second
    leave out.

    With a ``checkpoint`` (and ``data``, the generator ``next_batch`` draws from), training starts from the one saved
    there, if any, and saves one every ``checkpoint.every`` steps; a resumed run ends with the weights and figures of
    one that never stopped. Ctrl-C raises KeyboardInterrupt with the step the same command would resume from."""
    steps = arguments.steps
    device = torch.device(arguments.device)
    # What the loop carries from step to step, all of it in a checkpoint.
    loop = {
        "step": 0,
        "last losses": [],
        "best score": None,
        "best step": 0,
        "best weights": None,
        "validation": [],
        "seconds": 0.0,
        "validation seconds": 0.0,
    }
    saved = load_checkpoint(checkpoint, device) if checkpoint is not None else None
    if saved is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        schedule.load_state_dict(saved["schedule"])
        data.set_state(saved["data"].cpu())
        set_random_state(saved["random"], device)
        loop = saved["loop"]
        log(f"  resuming from the checkpoint of step {loop['step']} ({checkpoint.path})")
    saved_step = loop["step"] if saved is not None else None
    model.train()
    started = time.perf_counter() - loop["seconds"]
    try:
        for step in range(loop["step"] + 1, steps + 1):
            loss = model(**next_batch()).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), RECIPE.settings["max_grad_norm"])
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            if not math.isfinite(loss.item()):
                sys.exit(f"{label}: the loss is {loss.item()} at step {step}")
            if step > steps * 0.9:
                loop["last losses"].append(loss.item())
            if step % arguments.log_every == 0 or step == steps:
                rate = step / (time.perf_counter() - started - loop["validation seconds"])
                log(f"  step {step}/{steps}: loss {loss.item():.4f} ({rate:.1f} steps/s)")
            if validate is not None and (step % validate_every == 0 or step == steps):
                began = time.perf_counter()
                score = validate()
                model.train()
                loop["validation seconds"] += time.perf_counter() - began
                loop["validation"].append([step, *score])
                log(f"  step {step}: validation exact match {score[0]:.3f}, symbol accuracy {score[1]:.3f}")
                if loop["best score"] is None or list(score) > loop["best score"]:
                    loop["best score"], loop["best step"] = list(score), step
                    weights = model.state_dict().items()
                    loop["best weights"] = {name: tensor.detach().clone() for name, tensor in weights}
            loop["step"] = step
            if checkpoint is not None and checkpoint.every and (step % checkpoint.every == 0 or step == steps):
                loop["seconds"] = time.perf_counter() - started
                save_checkpoint(
                    checkpoint,
                    {
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "schedule": schedule.state_dict(),
                        "data": data.get_state(),
                        "random": random_state(device),
                        "loop": loop,
                    },
                )
                saved_step = step
    except KeyboardInterrupt:
        resumes = "the start" if saved_step is None else f"step {saved_step}"
        stopped = f"{label}: stopped in step {loop['step'] + 1}; the same command resumes it from {resumes}"
        raise KeyboardInterrupt(stopped) from None
    seconds = time.perf_counter() - started - loop["validation seconds"]
    figures = {
        "final training loss": statistics.mean(loop["last losses"]),
        "steps per second": round(steps / seconds, 2),
    }
    if loop["best weights"] is not None:
        model.load_state_dict(loop["best weights"])
        log(f"  selected the weights of step {loop['best step']} (validation exact match {loop['best score'][0]:.3f})")
        figures |= {
            "selected step": loop["best step"],
            "validation": loop["validation"],
            "validation seconds": round(loop["validation seconds"], 1),
        }
    return figures


def test_count(length: int, arguments: argparse.Namespace) -> int:
    """How many test strings a length gets: fewer for the long ones, never fewer than --min_test_strings."""
    return min(arguments.test_strings, max(arguments.min_test_strings, arguments.test_tokens // length))


# What a run is tested on, as opposed to what it learned: a kept model can be tested again on other lengths or strings.
TEST_SETTINGS = ("test_multiples", "test_strings", "min_test_strings", "test_tokens", "test_seed")


def without_test_settings(settings: dict) -> dict:
    """A run's settings but for those of its test (``TEST_SETTINGS``), which do not change what it learned."""
    return {name: value for name, value in settings.items() if name not in TEST_SETTINGS}


def measure_lengths(
    model: nn.Module,
    multiples: Sequence[int],
    accuracy: Callable[[nn.Module, int], tuple[float, float, float]],
    train_length: int,
    unit: str,
    arguments: argparse.Namespace,
    log: Log,
) -> dict[str, dict[str, float]]:
    """``accuracy(model, length)`` at each of ``multiples`` × ``train_length``, logged: exact match, share of ``unit``
    right and right prefix, each by multiple (as a string, the result's keys)."""
    measured = {"exact match": {}, "symbol accuracy": {}, "right prefix": {}}
    for multiple in multiples:
        length = multiple * train_length
        began = time.perf_counter()
        exact, right, prefix = accuracy(model, length)
        for name, value in zip(measured, (exact, right, prefix), strict=True):
            measured[name][str(multiple)] = value
        log(
            f"  {multiple}× (length {length}, {test_count(length, arguments)} strings): exact match {exact:.3f}, "
            f"{unit} {right:.3f}, right prefix {prefix:.3f} ({time.perf_counter() - began:.1f} s)"
        )
    return measured


def run_or_read(
    folder: Path,
    settings: dict,
    label: str,
    arguments: argparse.Namespace,
    log: Log,
    *,
    build: Callable[[], nn.Module],
    train: Callable[[nn.Module, Checkpoint], dict],
    accuracy: Callable[[nn.Module, int], tuple[float, float, float]],
    learned: Callable[[nn.Module], dict],
    train_length: int,
    unit: str,
    load: Callable[[Path], nn.Module] | None = None,
) -> dict:
    """One run: ``build()`` a model, ``train(model, checkpoint)`` it (its dict of training figures goes into the
    result; the `Checkpoint` in the run folder, ``--checkpoint_every``, is where a stopped run resumes from), and
    measure ``accuracy(model, length)`` (exact match, share of ``unit`` right, share right before each string's first
    wrong one) at each ``--test_multiples`` × ``train_length``; its result is written to ``folder/result.json``, and
    with ``--save_models`` the model to ``folder/model``. A run that finished before is read from there instead, if
    it was trained with the same ``settings`` (those of its test, ``TEST_SETTINGS``, aside); with other settings the
    benchmark stops. Test lengths it was not measured at are measured on its kept model, ``load(folder / "model")``,
    and added to its result; with other test strings (count or seed) every length asked for is measured again and
    replaces the result's. Without a kept model (or a ``load``) the benchmark stops."""
    result_file = folder / "result.json"
    if result_file.exists():
        result = json.loads(result_file.read_text())
        if without_test_settings(result["settings"]) != without_test_settings(settings):
            sys.exit(
                f"{result_file} was measured with other settings ({result['settings']}); use another --output_dir"
            )
        log(f"{label}: finished before, read from {result_file}")
        strings = {name: settings[name] for name in TEST_SETTINGS if name != "test_multiples"}
        same_strings = all(result["settings"].get(name) == value for name, value in strings.items())
        untested = [
            multiple
            for multiple in arguments.test_multiples
            if not same_strings or str(multiple) not in result["exact match"]
        ]
        kept = folder / "model"
        if untested:
            lengths = ", ".join(f"{multiple}×" for multiple in untested)
            if same_strings:
                missing = f"{result_file} was not tested at {lengths}"
            else:
                tested_on = {name: result["settings"].get(name) for name in strings}
                missing = f"{result_file} was tested on other strings ({tested_on}, not {strings})"
            if load is None:
                sys.exit(f"{missing}, and this benchmark tests runs as it trains them only; use another --output_dir")
            if not kept.is_dir():
                sys.exit(f"{missing}, and its model was not kept (--save_models); use another --output_dir")
            log(f"  testing its kept model at {lengths}" + ("" if same_strings else f" on other strings ({strings})"))
            began = time.perf_counter()
            model = load(kept).to(arguments.device)
            measured = measure_lengths(model, untested, accuracy, train_length, unit, arguments, log)
            seconds = time.perf_counter() - began
            if same_strings:
                for name, values in measured.items():
                    result[name].update(values)
                result["settings"]["test_multiples"] = sorted({*result["settings"]["test_multiples"], *untested})
                result["test seconds"] = round(result["test seconds"] + seconds, 1)
            else:  # measurements on other strings do not mix: the result holds the new test only
                result.update(measured)
                result["settings"].update({**strings, "test_multiples": sorted(untested)})
                result["test seconds"] = round(seconds, 1)
            result_file.write_text(json.dumps(result, indent=1))
        elif arguments.save_models and not kept.is_dir():
            log("  no model saved: it was trained without --save_models (another --output_dir trains it again)")
        return result
    log(f"{label}: training {arguments.steps} steps")
    model = build().to(arguments.device)
    started = time.perf_counter()
    checkpoint = Checkpoint(folder / CHECKPOINT_FILE, arguments.checkpoint_every, settings)
    trained = train(model, checkpoint)
    tested = time.perf_counter()
    measured = measure_lengths(model, arguments.test_multiples, accuracy, train_length, unit, arguments, log)
    result = {
        "settings": settings,
        **trained,
        **measured,
        "learned": learned(model),
        "training seconds": round(tested - started, 1),
        "test seconds": round(time.perf_counter() - tested, 1),
    }
    speed = f" ({trained['steps per second']} steps/s)" if "steps per second" in trained else ""
    log(f"  cost: {result['training seconds']:.0f} s training{speed}, {result['test seconds']:.0f} s testing")
    folder.mkdir(parents=True, exist_ok=True)
    if arguments.save_models:  # before result.json, which marks the run finished
        model.save_pretrained(folder / "model")
    result_file.write_text(json.dumps(result, indent=1))
    for path in (checkpoint.path, partial_checkpoint(checkpoint)):
        path.unlink(missing_ok=True)
    return result


def percentages(runs: list[dict], multiple: str) -> str:
    """A table cell: exact match and, where the runs measured it, the share of answer symbols right (position by
    position) in parentheses, in %, mean over the runs."""
    cell = f"{100 * statistics.mean(run['exact match'][multiple] for run in runs):.1f}"
    if all("symbol accuracy" in run for run in runs):  # synthetic runs from before 2026-12-01 have exact match only
        cell += f" ({100 * statistics.mean(run['symbol accuracy'][multiple] for run in runs):.1f})"
    return cell


def table_rows(results: dict, arguments: argparse.Namespace, train_length: int) -> list[str]:
    """The table without its footnote: a row per (task, positions, variant) with the final loss and a cell
    (`percentages`) per test length ``multiple × train_length``, means over the seeds; a row of test-string counts
    under the header."""
    multiples = arguments.test_multiples
    lengths = [multiple * train_length for multiple in multiples]
    header = " | ".join(f"{multiple}× ({length})" for multiple, length in zip(multiples, lengths, strict=True))
    counts = " | ".join(str(test_count(length, arguments)) for length in lengths)
    lines = [
        f"| task | positions | attention | final loss | {header} |",
        f"| --- | --- | --- | ---: | {' | '.join('---:' for _ in multiples)} |",
        f"| *test strings* | | | | {counts} |",
    ]
    for (task, positions, variant), runs in results.items():
        loss = statistics.mean(run["final training loss"] for run in runs)
        cells = " | ".join(percentages(runs, str(multiple)) for multiple in multiples)
        lines.append(f"| {task} | {positions} | {variant} | {loss:.3f} | {cells} |")
    return lines


def run_all(
    arguments: argparse.Namespace,
    script: str,
    argv: Sequence[str] | None,
    run_one: RunOne,
    table: Callable[[dict, argparse.Namespace], str],
    table_name: str,
) -> None:
    """Every run of ``--tasks`` × ``--positions`` × ``--variants`` × ``--seeds`` (``run_one``), logged to
    ``--output_dir/log.txt``; then their results, by ``"task positions variant"``, in ``--output_dir/results.json``
    and their ``table`` in the log and, between the markers ``table_name``, in the ``--markdown`` files."""
    out = Path(arguments.output_dir)
    command = measured_command(script, argv)
    machine = (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads, {arguments.device}), "
        f"native kernel: {'yes' if kernel_available() else 'no'}"
    )
    started = time.perf_counter()
    with benchmark_log(out, command, vars(arguments), machine) as log:
        results = {}
        for task in arguments.tasks:
            for positions in arguments.positions:
                for variant in arguments.variants:
                    for seed in arguments.seeds:
                        result = run_one(task, positions, variant, seed, arguments, log)
                        results.setdefault((task, positions, variant), []).append(result)
        markdown = table(results, arguments)
        log(markdown)
        log(f"{len(results)} rows in {time.perf_counter() - started:.0f} s")
    (out / "results.json").write_text(json.dumps({" ".join(key): runs for key, runs in results.items()}, indent=1))
    if arguments.markdown:
        measured = f"Measured on {time.strftime('%Y-%m-%d')} ({machine}) with `{command}`."
        write_tables(arguments.markdown, {table_name: f"{markdown}\n\n{measured}"})
