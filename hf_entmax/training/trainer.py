"""Seq2SeqTrainer for AdaptiveEntmaxMarian: α logits in their own optimiser group, α in every training log, and a
resumed run that reports the whole run."""

import logging
import math
import os
from pathlib import Path

import torch
from torch import nn
from transformers import PrinterCallback, ProgressCallback, Seq2SeqTrainer, TrainerCallback, TrainerState
from transformers.trainer_utils import TrainOutput, get_last_checkpoint

from ..common.config import is_scaling_parameter
from ..errors import HfEntmaxError, HfEntmaxValueError
from .recipes import TRAINER_ALPHA_LEARNING_RATE_RATIO


logger = logging.getLogger(__name__)


def is_alpha_parameter(name: str) -> bool:
    return name.endswith("alpha_logits")


def _per_head_logs(name: str, values: torch.Tensor) -> dict[str, float]:
    """``(layers, heads)`` values as ``<name>/layer_<l>/head_<h>`` entries and their ``<name>/mean``."""
    logs = {f"{name}/mean": round(values.mean().item(), 5)}
    for layer, row in enumerate(values.tolist()):
        for head, value in enumerate(row):
            logs[f"{name}/layer_{layer}/head_{head}"] = round(value, 5)
    return logs


def attention_logs(model: nn.Module) -> dict[str, float]:
    """α of every head, and ASEntmax's β and γ where queries are scaled, as flat log entries:
    ``alpha/<type>/layer_<l>/head_<h>`` and ``alpha/<type>/mean`` (likewise ``scale_beta/…``, ``scale_gamma/…``)."""
    logs = {}
    if hasattr(model, "get_alphas"):
        for kind, alphas in model.get_alphas().items():
            logs.update(_per_head_logs(f"alpha/{kind}", alphas))
    if hasattr(model, "get_attention_scales"):
        for kind, scales in model.get_attention_scales().items():
            # SSMax learns β (its s) alone, its γ is 1; per-token scaling has no per-head value and is absent.
            for name in ("beta",) if scales["method"] == "ssmax" else ("beta", "gamma"):
                logs.update(_per_head_logs(f"scale_{name}/{kind}", scales[name]))
    return logs


PER_HEAD_LOG_PREFIXES = ("alpha/", "scale_beta/", "scale_gamma/")


def without_per_head_values(logs: dict | None) -> dict:
    """``logs`` with α, β and γ reduced to their mean per attention type, for the console."""
    return {
        key: value
        for key, value in (logs or {}).items()
        if not key.startswith(PER_HEAD_LOG_PREFIXES) or key.endswith("/mean")
    }


class ConciseProgressCallback(ProgressCallback):
    """The console progress bar and log lines, without per-head α, β, γ (which still reach log_history and
    reporters)."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        super().on_log(args, state, control, logs=without_per_head_values(logs), **kwargs)


class ConcisePrinterCallback(PrinterCallback):
    """The console log lines of a run without progress bar (``--disable_tqdm``), without per-head α, β, γ."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        super().on_log(args, state, control, logs=without_per_head_values(logs), **kwargs)


class LogAtCheckpoints(TrainerCallback):
    """Log the training loss at every step that saves a checkpoint, so that a run resumed from any checkpoint finds
    the loss of every step before it in the checkpoint's log history (see `summed_loss_until`)."""

    def on_step_end(self, args, state, control, **kwargs):
        if control.should_save:
            control.should_log = True

    on_epoch_end = on_step_end


def summed_loss_until(log_history: list[dict], steps: int) -> float | None:
    """The training losses of steps 1 to ``steps`` summed, from the logged losses (each the mean over the steps
    since the log before); None if the logs do not end exactly at ``steps``."""
    total, logged_until = 0.0, 0
    for entry in log_history:
        if "loss" in entry and logged_until < entry["step"] <= steps:
            total += entry["loss"] * (entry["step"] - logged_until)
            logged_until = entry["step"]
    return total if logged_until == steps else None


class AdaptiveEntmaxTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` with two additions for learnable α, and resumed runs that report the whole run.

    - The α logits get their own optimiser group: no weight decay (it would pull every α towards 1.5)
      and their own learning rate (same schedule shape): ``alpha_learning_rate``, by default
      `recipes.TRAINER_ALPHA_LEARNING_RATE_RATIO` × the model's; 0 freezes α.
    - Every training log carries α per head (``alpha/<type>/layer_<l>/head_<h>``), so the trainer's
      ``log_history`` and any reporter (TensorBoard, W&B, …) record the α trajectories.
    - A run resumed from a checkpoint reports ``train_loss`` over all its steps, as if it had not been interrupted
      (Trainer's covers the steps after the checkpoint), and a run resumed from its last step (``max_steps``) trains
      no further step (Trainer's would train one).

    Raises:
        HfEntmaxValueError: If ``alpha_learning_rate`` is not a finite number ≥ 0.
    """

    def __init__(self, *args, alpha_learning_rate: float | None = None, **kwargs):
        if alpha_learning_rate is not None and not (
            isinstance(alpha_learning_rate, (int, float))
            and not isinstance(alpha_learning_rate, bool)
            and math.isfinite(alpha_learning_rate)
            and alpha_learning_rate >= 0
        ):
            raise HfEntmaxValueError(
                f"alpha_learning_rate must be a finite number ≥ 0 (0 freezes α), got {alpha_learning_rate!r}"
            )
        super().__init__(*args, **kwargs)
        self.alpha_learning_rate = alpha_learning_rate
        for verbose, concise in (
            (ProgressCallback, ConciseProgressCallback),
            (PrinterCallback, ConcisePrinterCallback),
        ):
            if self.pop_callback(verbose) is not None:
                self.add_callback(concise)
        self.add_callback(LogAtCheckpoints)

    def train(self, resume_from_checkpoint: str | bool | None = None, *args, **kwargs) -> TrainOutput:
        if resume_from_checkpoint is True:
            resume_from_checkpoint = get_last_checkpoint(self.args.output_dir)  # None: Trainer says there is none
        start = None
        if resume_from_checkpoint and os.path.isfile(Path(resume_from_checkpoint) / "trainer_state.json"):
            start = TrainerState.load_from_json(str(Path(resume_from_checkpoint) / "trainer_state.json"))
        if start is not None and 0 < self.args.max_steps <= start.global_step:
            return self._finished_run(Path(resume_from_checkpoint), start)
        output = super().train(resume_from_checkpoint, *args, **kwargs)
        if start is None or start.global_step == 0:
            return output
        return self._whole_run_output(output, start)

    def _finished_run(self, checkpoint: Path, state: TrainerState) -> TrainOutput:
        """Resuming from the last step: the checkpoint's model and state, without training (Trainer would train one
        step past ``max_steps`` before checking it)."""
        logger.warning(
            f"{checkpoint} is the end of the run (step {state.global_step} of --max_steps {self.args.max_steps}): "
            "nothing is left to train; its model and records are the run's"
        )
        finished = type(self.model).from_pretrained(checkpoint)
        self.model.load_state_dict(finished.state_dict())
        self.state = state
        metrics = {"train_runtime": 0.0, "total_flos": state.total_flos}
        before = summed_loss_until(state.log_history, state.global_step)
        if before is not None:
            metrics["train_loss"] = before / state.global_step
        else:
            logger.warning(f"the loss of the steps before {checkpoint} was not logged completely: no train_loss")
        self.log(metrics)
        return TrainOutput(state.global_step, metrics.get("train_loss", math.nan), metrics)

    def _whole_run_output(self, output: TrainOutput, start: TrainerState) -> TrainOutput:
        """Trainer's output of a resumed run, with ``train_loss`` over the whole run (Trainer's is the mean over the
        steps of this call only)."""
        steps = self.state.global_step
        before = summed_loss_until(start.log_history, start.global_step)
        metrics = dict(output.metrics)
        if before is None:
            # Not a checkpoint of this trainer (which logs at every checkpoint): say what the loss covers.
            logger.warning(
                f"the loss of the steps before step {start.global_step} was not logged completely: train_loss is "
                f"reported as resumed_train_loss, the mean over steps {start.global_step + 1}–{steps} only"
            )
            metrics["resumed_train_loss"] = metrics.pop("train_loss")
            training_loss = math.nan
        else:
            training_loss = (before + output.training_loss * (steps - start.global_step)) / steps
            metrics["train_loss"] = training_loss
        for entry in reversed(self.state.log_history):  # the summary entry Trainer logged at the end
            if "train_runtime" in entry:
                entry.pop("train_loss", None)
                entry.update({key: metrics[key] for key in ("train_loss", "resumed_train_loss") if key in metrics})
                break
        return TrainOutput(output.global_step, training_loss, metrics)

    @property
    def effective_alpha_learning_rate(self) -> float:
        if self.alpha_learning_rate is not None:  # 0 is a rate (α frozen), not "use the default"
            return self.alpha_learning_rate
        return TRAINER_ALPHA_LEARNING_RATE_RATIO * self.args.learning_rate

    def get_decay_parameter_names(self, model: nn.Module) -> list[str]:
        # Decay would pull ASEntmax's β and γ (or the maps that compute them per token, or SSMax's s) towards a
        # factor that no longer grows with the length: like α, they keep the values the loss gives them.
        names = super().get_decay_parameter_names(model)
        return [name for name in names if not is_scaling_parameter(name)]

    def create_optimizer(self, model: nn.Module | None = None) -> torch.optim.Optimizer:
        if self.optimizer is not None:
            return self.optimizer
        optimizer = super().create_optimizer(model)
        alpha_parameters = [
            parameter
            for name, parameter in (model or self.model).named_parameters()
            if is_alpha_parameter(name) and parameter.requires_grad
        ]
        if alpha_parameters:
            alpha_ids = {id(parameter) for parameter in alpha_parameters}
            for group in optimizer.param_groups:
                group["params"] = [parameter for parameter in group["params"] if id(parameter) not in alpha_ids]
            optimizer.add_param_group(
                {
                    "params": alpha_parameters,
                    "weight_decay": 0.0,
                    "lr": self.effective_alpha_learning_rate,
                }
            )
        return optimizer

    def training_step(self, model: nn.Module, inputs: dict, num_items_in_batch=None) -> torch.Tensor:
        loss = super().training_step(model, inputs, num_items_in_batch)
        # Trainer leaves non-finite losses out of its logs, so a diverged run would go on and save a broken model.
        if not torch.isfinite(loss).all():
            raise HfEntmaxError(
                f"training diverged at step {self.state.global_step + 1}: the loss is {loss.item()}; lower "
                "--learning_rate (or --alpha_learning_rate), or raise --warmup_steps"
            )
        return loss

    def log(self, logs: dict[str, float], *args, **kwargs) -> None:
        if "loss" in logs:
            per_head = attention_logs(self.model)
            if not all(math.isfinite(value) for value in per_head.values()):
                broken = sorted({key.split("/")[0] for key, value in per_head.items() if not math.isfinite(value)})
                raise HfEntmaxError(
                    f"training diverged by step {self.state.global_step}: some {', '.join(broken)} values are not "
                    "finite; lower --alpha_learning_rate (α) or --learning_rate (scales)"
                )
            logs = {**logs, **per_head}
        super().log(logs, *args, **kwargs)
