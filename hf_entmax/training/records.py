"""What a training run records next to the model, made from the trainer's log: α (and ASEntmax's β, γ) over
training and the evaluations during training (the file names, and the versions recorded, are in
`hf_entmax.common.records`).

`training_summary.json` is what `hf-entmax export` and the model card read; `alpha_history.json` is what `hf-entmax
analyze` plots; `scale_history.json` (runs with query scaling only) holds β and γ per logged step. Trainer's own files
(``train_results.json``, ``eval_results.json``, ``test_results.json``, ``all_results.json``, ``trainer_state.json``)
and ``generated_predictions.txt`` are written as transformers' translation example writes them.
"""

import re
from enum import Enum


_PER_HEAD_LOG_KEY = re.compile(r"(alpha|scale_beta|scale_gamma)/(\w+)/layer_(\d+)/head_(\d+)")


def per_head_history(log_history: list[dict], name: str) -> list[dict]:
    """A per-head value (``"alpha"``, ``"scale_beta"`` or ``"scale_gamma"``) at every logged training step, from the
    trainer's log history.

    Returns:
        ``[{"step": s, "encoder_self": [[value per head] per layer], "decoder_self": …, "cross": …}, …]`` with the
        attention types that log the value (none: an empty list).
    """
    history = []
    for entry in log_history:
        per_type: dict[str, dict[int, dict[int, float]]] = {}
        for key, value in entry.items():
            if (match := _PER_HEAD_LOG_KEY.fullmatch(key)) and match.group(1) == name:
                kind, layer, head = match.group(2), int(match.group(3)), int(match.group(4))
                per_type.setdefault(kind, {}).setdefault(layer, {})[head] = value
        if per_type:
            record = {"step": entry["step"]}
            for kind, layers in per_type.items():
                record[kind] = [[layers[layer][head] for head in sorted(layers[layer])] for layer in sorted(layers)]
            history.append(record)
    return history


def alpha_history(log_history: list[dict]) -> list[dict]:
    """α per head at every logged training step (`per_head_history` of ``"alpha"``)."""
    return per_head_history(log_history, "alpha")


def scale_history(log_history: list[dict]) -> dict[str, list[dict]]:
    """ASEntmax's β and γ per head at every logged training step: ``{"beta": history, "gamma": history}`` (each as
    `per_head_history`), empty lists for a run without query scaling."""
    return {"beta": per_head_history(log_history, "scale_beta"), "gamma": per_head_history(log_history, "scale_gamma")}


def evaluations(log_history: list[dict]) -> list[dict]:
    """One row per evaluation during training (not the final ones): step, epoch, the last training loss before it,
    validation loss, BLEU and chrF, as the tables of Trainer's own model cards."""
    rows, training_loss = [], None
    for entry in log_history:
        if "train_runtime" in entry:  # the end of training: later evaluations are the run's final results
            break
        if "loss" in entry:
            training_loss = entry["loss"]
        if "eval_loss" in entry or "eval_bleu" in entry:
            rows.append(
                {
                    "step": entry.get("step"),
                    "epoch": entry.get("epoch"),
                    "training_loss": training_loss,
                    "validation_loss": entry.get("eval_loss"),
                    "bleu": entry.get("eval_bleu"),
                    "chrf": entry.get("eval_chrf"),
                }
            )
    return rows


def plain(value: object) -> object:
    """A JSON value as people write it: enums by their value (``"linear"``, not ``SchedulerType.LINEAR``)."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value
