"""Length extrapolation on synthetic seq2seq tasks: softmax vs 1.5-entmax vs adaptive α-entmax vs ASEntmax.

    python benchmarks/bench_length_synthetic.py [--tasks copy reverse sort] [--seeds 0 1 2] [--steps 3000]
        [--train_length 16] [--test_multiples 1 2 4 8 16 64] [--positions plain offset rope alibi nape]
        [--save_models] [--markdown docs/benchmarks.md]

Each task maps a string of random symbols to a string: `copy` (itself), `reverse` (reversed) and `sort` (its symbols
in ascending order). A small `AdaptiveEntmaxMarianMTModel` (d_model 64, 2+2 layers, 4 heads, FFN 256, no dropout by
default) is trained from scratch on strings of 1 to ``--train_length`` symbols, then tested with greedy decoding on
strings of exactly ``multiple × --train_length`` symbols: a test string counts only if the whole output (and its
`</s>`) is right (exact match); the share of answer symbols right, position by position, shows how far into a long
string a model stays right, and the share right before each string's first wrong symbol (``right prefix`` in the log
and result.json) where it loses its way. The variants differ only in the attention:

- `softmax`: α = 1, fixed;
- `entmax15`: α = 1.5, fixed;
- `adaptive`: α learned per head from the paper's random start (the model's defaults);
- `asentmax`: `adaptive` plus ASEntmax (`attention_scaling="asentmax"`): each query is multiplied by
  δ + β_h · log(n + 1)^γ_h, n the number of keys it may attend to.

Equal budget: every variant of a task and seed sees the same training strings in the same order (the data stream is
seeded by the seed alone), draws its initial weights from the same seed, and trains the same number of steps with the
`from-scratch` recipe of `hf-entmax train` (AdamW 1e-3, β = (0.9, 0.98), 10% linear warm-up then inverse square root,
gradient clipping at 1, no weight decay, α logits at 10× the learning rate). The test strings are the same for every
variant and seed.

Positions. Marian adds fixed sinusoidal position vectors (nothing learned). Trained on strings of ≤ 16 symbols, a
model has only ever read positions 0–16 on either side; at 2× and beyond it reads position vectors it never saw, in
every variant alike, so a failure there mixes two causes: positions out of training range, and attention spread over
more keys than in training (the dispersion that α-entmax and ASEntmax address). ``--positions`` chooses:

- `plain`: Marian as it is (positions start at 0 in training and test);
- `offset`: every training batch's positions are shifted by one random offset (the same for source and target,
  uniform in [0, table size − batch length]), so every position a test uses was seen in training and only the
  number of keys is new (the randomised-positions idea of Ruoss et al., 2023). Tests start at position 0.

- `rope`, `alibi`, `nape`: the model's relative positions (`position_embedding_type`, docs/model.md "Positions"):
  self-attention sees distances only, so no test position is new; cross-attention has no position term.
- `alibi-split`, `nape-split`: the same with ``encoder_alibi_directions="split"``, the encoder's biased heads seeing
  one side each, so that the encoder tells a string from its reverse (with `alibi`/`nape` it cannot).
- `…-cross` (`rope-cross`, `nape-split-cross`, …): the same positions in cross-attention too
  (``cross_attention_positions``): cross-attention sees target position minus source position, so "read the source
  symbol at my own position" is one distance at every length; RoPE rotates by it, ALiBi and NAPE subtract a penalty
  growing with it, which no length can dilute; `rope-cross-nape`: RoPE in self-attention, NAPE's penalty in
  cross-attention.

`plain` and `offset` run by default, and the table has a row for each positions option run. The position table holds
``max(test_multiples) × train_length + 2`` positions (the longest test string, its `</s>` and the decoder's start).

Long tests are costly (a 1,024-symbol string takes 1,025 decoding steps over 1,025 keys), so a length gets
``min(--test_strings, max(--min_test_strings, --test_tokens // length))`` strings: with the defaults 200 at 1×–4×,
128 at 8×, 64 at 16× and 32 at 64× (the table says how many). The accuracy's resolution is 1/count.

Runs already finished in --output_dir are read, not repeated (their settings must match and they must have been tested
at every --test_multiples; another --output_dir otherwise); a run stopped while training (Ctrl-C, the machine's end)
resumes from its last checkpoint when the same command runs again (``--checkpoint_every``, as in
bench_length_decoder_only.py). ``--save_models`` also keeps each model it trains in its run folder's ``model/``
(`AutoModelForSeq2SeqLM` loads it), to look at its outputs and attention later without training it again. ``--markdown
docs/benchmarks.md`` writes the table between the markers ``table:length-synthetic``, or, for runs of relative
positions, ``table:length-synthetic-relative`` (self-attention only) or ``table:length-synthetic-cross`` (`…-cross`, in
cross-attention too): the three kinds of rows answer different questions and are run separately (a run of two kinds
with ``--markdown`` is refused).
"""

import argparse
import math
from collections.abc import Callable
from pathlib import Path

import length_runs
import torch
from runs import add_threads_option, stop_in_one_line
from torch import nn
from transformers import GenerationConfig, get_inverse_sqrt_schedule

from hf_entmax import AdaptiveEntmaxMarianConfig, AdaptiveEntmaxMarianMTModel


PAD, EOS, FIRST_SYMBOL = 0, 1, 2
TABLE = "length-synthetic"
RELATIVE_TABLE = "length-synthetic-relative"
CROSS_TABLE = "length-synthetic-cross"

TASKS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "copy": lambda symbols: symbols,
    "reverse": lambda symbols: symbols.flip(-1),
    "sort": lambda symbols: symbols.sort(-1).values,
}

VARIANTS: dict[str, dict] = {
    "softmax": {"alpha_init": 1.0, "learn_alpha": False},
    "entmax15": {"alpha_init": 1.5, "learn_alpha": False},
    "adaptive": {"alpha_init": "random", "learn_alpha": True},
    "asentmax": {"alpha_init": "random", "learn_alpha": True, "attention_scaling": "asentmax"},
}

# Marian's sinusoidal table, from 0 or shifted in training (`ShiftedPositions`), or a relative position type of the
# config (`PositionOptions`), which has no table to outgrow.
SINUSOIDAL_POSITIONS = ("plain", "offset")
# Relative positions: "-split" gives the encoder's ALiBi heads one side each, "-cross" the same positions to
# cross-attention, "-cross-nape" NAPE's penalty there.
RELATIVE_POSITIONS = ("rope", "alibi", "nape", "alibi-split", "nape-split")
POSITIONS = (
    *SINUSOIDAL_POSITIONS,
    *RELATIVE_POSITIONS,
    *(f"{name}-cross" for name in RELATIVE_POSITIONS),
    "rope-cross-nape",
)


def make_batch(task: str, lengths: list[int], symbols: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Random strings of the given lengths and the task's answers, padded: ``input_ids`` and ``attention_mask``
    ``(batch, longest + 1)`` (with `</s>`), ``labels`` ``(batch, longest + 1)`` (-100 past the `</s>`)."""
    width = max(lengths) + 1
    input_ids = torch.full((len(lengths), width), PAD)
    labels = torch.full((len(lengths), width), -100)
    for row, length in enumerate(lengths):
        string = torch.randint(FIRST_SYMBOL, FIRST_SYMBOL + symbols, (length,), generator=generator)
        input_ids[row, :length], input_ids[row, length] = string, EOS
        labels[row, :length], labels[row, length] = TASKS[task](string), EOS
    return {"input_ids": input_ids, "attention_mask": (input_ids != PAD).long(), "labels": labels}


class ShiftedPositions(nn.Module):
    """A stack's sinusoidal position table read ``shift`` positions further on (position p embeds as p + shift),
    with the call signature of `MarianSinusoidalPositionalEmbedding` that Marian's encoder and decoder use."""

    def __init__(self, table: nn.Module):
        super().__init__()
        self.table = table
        self.shift = 0

    def forward(
        self, input_ids_shape: torch.Size, cache_length: int = 0, position_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        if position_ids is None:
            position_ids = torch.arange(
                cache_length, cache_length + input_ids_shape[1], device=self.table.weight.device
            )
        return self.table(input_ids_shape, position_ids=position_ids + self.shift)  # (length, d_model)


def build_model(
    variant: str, arguments: argparse.Namespace, seed: int, positions: str = "plain"
) -> AdaptiveEntmaxMarianMTModel:
    """The variant's model with ``positions`` (`POSITIONS`), its weights drawn from ``seed``."""
    torch.manual_seed(seed)
    sinusoidal = positions in SINUSOIDAL_POSITIONS
    config = AdaptiveEntmaxMarianConfig(
        vocab_size=FIRST_SYMBOL + arguments.symbols,
        d_model=arguments.d_model,
        encoder_layers=arguments.layers,
        decoder_layers=arguments.layers,
        encoder_attention_heads=arguments.heads,
        decoder_attention_heads=arguments.heads,
        encoder_ffn_dim=4 * arguments.d_model,
        decoder_ffn_dim=4 * arguments.d_model,
        max_position_embeddings=max_test_length(arguments) + 2,
        dropout=arguments.dropout,
        attention_dropout=arguments.dropout,
        pad_token_id=PAD,
        eos_token_id=EOS,
        decoder_start_token_id=PAD,
        forced_eos_token_id=None,
        scale_embedding=True,
        **position_settings(positions),
        **VARIANTS[variant],
    )
    model = AdaptiveEntmaxMarianMTModel(config)
    if sinusoidal:
        for stack in (model.model.encoder, model.model.decoder):
            stack.embed_positions = ShiftedPositions(stack.embed_positions)
    return model


def position_settings(positions: str) -> dict[str, str]:
    """The config's position options for a `POSITIONS` name: a sinusoidal one, or ``KIND[-split][-cross[-CROSS]]``
    (``-cross`` alone: cross-attention with the positions of self-attention)."""
    if positions in SINUSOIDAL_POSITIONS:
        return {"position_embedding_type": "sinusoidal"}
    own, crossed, cross = positions.partition("-cross")
    kind = own.removesuffix("-split")
    return {
        "position_embedding_type": kind,
        "encoder_alibi_directions": "split" if own.endswith("-split") else "both",
        "cross_attention_positions": cross.removeprefix("-") or (kind if crossed else "none"),
    }


def max_test_length(arguments: argparse.Namespace) -> int:
    return max(arguments.test_multiples) * arguments.train_length


def train(
    model: AdaptiveEntmaxMarianMTModel,
    task: str,
    positions: str,
    arguments: argparse.Namespace,
    seed: int,
    label: str,
    log: length_runs.Log,
    checkpoint: length_runs.Checkpoint,
) -> dict:
    """Train with the `from-scratch` recipe (inverse square-root schedule) for ``--steps`` steps, going on from
    ``checkpoint`` if a stopped run left one; return ``{"final training loss": the mean loss of the last 10% of
    steps}``."""
    optimizer = length_runs.recipe_optimizer(model, length_runs.RECIPE.settings["learning_rate"])
    schedule = get_inverse_sqrt_schedule(
        optimizer, num_warmup_steps=math.ceil(length_runs.RECIPE.settings["warmup_steps"] * arguments.steps)
    )
    data = torch.Generator().manual_seed(seed)
    table_size = model.config.max_position_embeddings
    shifted = [stack.embed_positions for stack in (model.model.encoder, model.model.decoder)]
    shifted = [module for module in shifted if isinstance(module, ShiftedPositions)]

    def next_batch() -> dict[str, torch.Tensor]:
        lengths = torch.randint(1, arguments.train_length + 1, (arguments.batch_size,), generator=data).tolist()
        batch = {
            name: tensor.to(model.device)
            for name, tensor in make_batch(task, lengths, arguments.symbols, data).items()
        }
        # Drawn in both modes, so that the strings are the same whichever positions are used.
        offset = int(torch.randint(0, table_size - batch["input_ids"].shape[1] + 1, (1,), generator=data))
        for module in shifted:
            module.shift = offset if positions == "offset" else 0
        return batch

    trained = length_runs.train_steps(
        model, optimizer, schedule, next_batch, arguments, label, log, checkpoint=checkpoint, data=data
    )
    for module in shifted:
        module.shift = 0
    # This benchmark's results have never recorded the speed (the decoder-only one's do).
    return {"final training loss": trained["final training loss"]}


@torch.inference_mode()
def test_accuracy(
    model: AdaptiveEntmaxMarianMTModel, task: str, length: int, arguments: argparse.Namespace
) -> tuple[float, float, float]:
    """``(exact match, symbol accuracy, right prefix)`` of greedy decoding on test strings of ``length`` symbols: the
    share of strings whose output is exactly the answer and its `</s>`, the share of the answers' ``length + 1``
    positions (`</s>` included) that the output gets right, position by position, and the share right before each
    string's first wrong position (where outputs lose their way).

    The test strings depend only on ``length`` and ``--test_seed``: every variant and seed gets the same ones.
    """
    model.eval()
    data = torch.Generator().manual_seed(arguments.test_seed * 100_003 + length)
    count = length_runs.test_count(length, arguments)
    batch_size = max(1, arguments.eval_tokens // length)
    generation = GenerationConfig(
        max_new_tokens=length + 1,
        num_beams=1,
        do_sample=False,
        decoder_start_token_id=PAD,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    correct, right_symbols, prefix_symbols = 0, 0, 0
    for start in range(0, count, batch_size):
        batch = make_batch(task, [length] * min(batch_size, count - start), arguments.symbols, data)
        batch = {name: tensor.to(model.device) for name, tensor in batch.items()}
        output = model.generate(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], generation_config=generation
        )[:, 1:]  # (batch, ≤ length + 1), without the decoder start
        answer = torch.full_like(batch["labels"], PAD)
        answer[:, : output.shape[1]] = output
        right = answer == batch["labels"]  # (batch, length + 1)
        correct += right.all(dim=1).sum().item()
        right_symbols += right.sum().item()
        prefix_symbols += right.long().cumprod(dim=1).sum().item()
    return correct / count, right_symbols / (count * (length + 1)), prefix_symbols / (count * (length + 1))


def learned_attention(model: AdaptiveEntmaxMarianMTModel) -> dict:
    """Mean α, β and γ per attention type (β and γ only where queries are scaled)."""
    summary = {f"mean α {kind}": round(alphas.mean().item(), 3) for kind, alphas in model.get_alphas().items()}
    for kind, scales in model.get_attention_scales().items():
        summary[f"mean β {kind}"] = round(scales["beta"].mean().item(), 3)
        summary[f"mean γ {kind}"] = round(scales["gamma"].mean().item(), 3)
    return summary


SETTINGS = (
    "train_length",
    "test_multiples",
    "symbols",
    "steps",
    "batch_size",
    "d_model",
    "layers",
    "heads",
    "dropout",
    "test_strings",
    "min_test_strings",
    "test_tokens",
    "test_seed",
)


def run_one(task: str, positions: str, variant: str, seed: int, arguments: argparse.Namespace, log) -> dict:
    """Train and test one model, or read its result if this run already finished with the same settings."""
    label = f"{task} / {positions} / {variant} / seed {seed}"
    return length_runs.run_or_read(
        Path(arguments.output_dir) / task / positions / variant / f"seed{seed}",
        {name: getattr(arguments, name) for name in SETTINGS},
        label,
        arguments,
        log,
        build=lambda: build_model(variant, arguments, seed, positions),
        train=lambda model, checkpoint: train(model, task, positions, arguments, seed, label, log, checkpoint),
        accuracy=lambda model, length: test_accuracy(model, task, length, arguments),
        learned=learned_attention,
        train_length=arguments.train_length,
        unit="symbols",
    )


def table(results: dict, arguments: argparse.Namespace) -> str:
    """Exact match (and symbol accuracy) in % per (task, positions, variant) and test length, mean over seeds."""
    with_symbols = all("symbol accuracy" in run for runs in results.values() for run in runs)
    symbols_note = ", and in parentheses the share of answer symbols right (%, position by position)"
    symbols_note = symbols_note if with_symbols else ""
    lines = length_runs.table_rows(results, arguments, arguments.train_length)
    lines += [
        "",
        f"Exact-match accuracy (%) of greedy decoding{symbols_note}, mean over seeds "
        f"{' '.join(map(str, arguments.seeds))}; "
        f"trained on 1–{arguments.train_length} symbols ({arguments.symbols} distinct), {arguments.steps} steps "
        f"× batch {arguments.batch_size}; d_model {arguments.d_model}, {arguments.layers}+{arguments.layers} layers, "
        f"{arguments.heads} heads, dropout {arguments.dropout}. Positions: `plain` = Marian's sinusoidal positions "
        "from 0, so tests beyond 1× read positions never seen in training; `offset` = training batches shifted by a "
        "random position offset, so every test position was seen in training and only the length is new; `rope`, "
        "`alibi`, `nape`: the config's relative positions (`position_embedding_type`), which no length outgrows; "
        "`-split`: the encoder's biased heads see one side each (`encoder_alibi_directions`); `-cross`: the same "
        "positions in cross-attention, between target and source position (`cross_attention_positions`).",
    ]
    return "\n".join(lines)


def position_table(positions: str) -> str:
    """The table a positions option's rows go to: each kind answers its own question."""
    if positions in SINUSOIDAL_POSITIONS:
        return TABLE
    return CROSS_TABLE if position_settings(positions)["cross_attention_positions"] != "none" else RELATIVE_TABLE


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="benchmarks/outputs/length-synthetic")
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--positions", nargs="+", choices=POSITIONS, default=list(SINUSOIDAL_POSITIONS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--train_length", type=int, default=16, help="longest training string (symbols)")
    parser.add_argument("--test_multiples", nargs="+", type=int, default=[1, 2, 4, 8, 16, 64])
    parser.add_argument("--symbols", type=int, default=16, help="distinct symbols in the strings")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--d_model", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2, help="encoder layers (and as many decoder layers)")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--dropout", type=float, default=0.0, help="dropout and attention dropout")
    parser.add_argument("--test_strings", type=int, default=200, help="test strings per length, at most")
    parser.add_argument("--min_test_strings", type=int, default=32, help="test strings per length, at least")
    parser.add_argument("--test_tokens", type=int, default=16384, help="test symbols per length, about")
    parser.add_argument("--test_seed", type=int, default=1234)
    parser.add_argument("--eval_tokens", type=int, default=32768, help="source symbols per generate call")
    parser.add_argument("--log_every", type=int, default=500)
    add_threads_option(parser)
    length_runs.add_save_models_option(parser)
    length_runs.add_checkpoint_option(parser)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (training and test)")
    parser.add_argument("--markdown", nargs="+", default=None, help="put the table into these Markdown files")
    arguments = parser.parse_args(argv)
    positive = ("train_length", "symbols", "steps", "batch_size", "test_strings", "min_test_strings", "log_every")
    length_runs.check_positive(parser, arguments, positive)
    length_runs.use_device(arguments, parser.error)
    tables = {position_table(name) for name in arguments.positions}
    if arguments.markdown and len(tables) > 1:
        parser.error(
            f"--markdown: the rows of sinusoidal positions ({', '.join(SINUSOIDAL_POSITIONS)}), of relative ones in "
            "self-attention only and of relative ones in cross-attention too (…-cross) go to separate tables; run "
            "them separately"
        )
    length_runs.run_all(arguments, "bench_length_synthetic.py", argv, run_one, table, tables.pop())


if __name__ == "__main__":
    stop_in_one_line(main)
