"""Seq2SeqTrainer for AdaptiveEntmaxMarian: α logits in their own optimiser group, α in every training log."""

import math

import torch
from torch import nn
from transformers import PrinterCallback, ProgressCallback, Seq2SeqTrainer

from ..errors import HfEntmaxError


def is_alpha_parameter(name: str) -> bool:
    return name.endswith("alpha_logits")


def alpha_logs(model: nn.Module) -> dict[str, float]:
    """α of every head as flat log entries: ``alpha/<type>/layer_<l>/head_<h>`` and ``alpha/<type>/mean``."""
    get_alphas = getattr(model, "get_alphas", None)
    if get_alphas is None:
        return {}
    logs = {}
    for kind, alphas in get_alphas().items():
        logs[f"alpha/{kind}/mean"] = round(alphas.mean().item(), 5)
        for layer, row in enumerate(alphas.tolist()):
            for head, alpha in enumerate(row):
                logs[f"alpha/{kind}/layer_{layer}/head_{head}"] = round(alpha, 5)
    return logs


def without_per_head_alphas(logs: dict | None) -> dict:
    """``logs`` with α reduced to its mean per attention type, for the console."""
    return {key: value for key, value in (logs or {}).items() if not key.startswith("alpha/") or key.endswith("/mean")}


class ConciseProgressCallback(ProgressCallback):
    """The console progress bar and log lines, without per-head α (which still reaches log_history and reporters)."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        super().on_log(args, state, control, logs=without_per_head_alphas(logs), **kwargs)


class ConcisePrinterCallback(PrinterCallback):
    """The console log lines of a run without progress bar (``--disable_tqdm``), without per-head α."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        super().on_log(args, state, control, logs=without_per_head_alphas(logs), **kwargs)


# One logit per head with small gradients: at the model's learning rate α hardly moves in a short run (0.05 in
# 1,200 steps on Multi30k, where 10× lets the heads settle by step ~900 and gains 0.6 BLEU; see the README).
DEFAULT_ALPHA_LEARNING_RATE_FACTOR = 10.0


class AdaptiveEntmaxTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` with two additions for learnable α.

    - The α logits get their own optimiser group: no weight decay (it would pull every α towards 1.5)
      and their own learning rate (same schedule shape): ``alpha_learning_rate``, by default
      ``DEFAULT_ALPHA_LEARNING_RATE_FACTOR`` × the model's.
    - Every training log carries α per head (``alpha/<type>/layer_<l>/head_<h>``), so the trainer's
      ``log_history`` and any reporter (TensorBoard, W&B, …) record the α trajectories.
    """

    def __init__(self, *args, alpha_learning_rate: float | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.alpha_learning_rate = alpha_learning_rate
        for verbose, concise in (
            (ProgressCallback, ConciseProgressCallback),
            (PrinterCallback, ConcisePrinterCallback),
        ):
            if self.pop_callback(verbose) is not None:
                self.add_callback(concise)

    @property
    def effective_alpha_learning_rate(self) -> float:
        if self.alpha_learning_rate is not None:  # 0 is a rate (α frozen), not "use the default"
            return self.alpha_learning_rate
        return DEFAULT_ALPHA_LEARNING_RATE_FACTOR * self.args.learning_rate

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
            alphas = alpha_logs(self.model)
            if not all(math.isfinite(value) for value in alphas.values()):
                raise HfEntmaxError(
                    f"training diverged by step {self.state.global_step}: some α are not finite; lower "
                    "--alpha_learning_rate"
                )
            logs = {**logs, **alphas}
        super().log(logs, *args, **kwargs)
