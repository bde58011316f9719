"""Compiled vs eager on the CPU: the model `hf-entmax train` builds, training and generating, as ratios measured in the
same run.

    python benchmarks/bench_compile.py [--sections training generation] [--model_size small] [--repeats 5]
        [--threads N] [--markdown docs/benchmarks.md]

Three variants of the same model and weights, each step timed as the median of ``--repeats`` rounds after a warm-up,
the variants in turn within each round (`bench_speed.median_seconds`):

- eager, native kernel: the default (attention fused in the native CPU kernel), the baseline of every ratio;
- eager, PyTorch path: the kernel set aside, as where hf_entmax is not installed (a model loaded from the Hub alone):
  attention composed of PyTorch operations, the Newton iteration stopping when every row has converged;
- compiled: ``torch.compile(fullgraph=True, dynamic=False)`` with inductor, which traces the PyTorch path with a fixed
  number of Newton steps; training compiles the model, generation its forward with a static cache (every decoding
  step compiled, beam search included). The first call compiles: its time is reported apart, not in the ratios.

1. training: forward, backward and AdamW step, in training mode (dropout on), on four batches of ``--batch_size``
   Multi30k-length pairs (`bench_speed.model_batch`), padded to one length so that one compiled graph serves them all
   (compiled training pads or buckets; the eager variants get the same padded batches); tokens/s counts real tokens.
2. generation: ``--sentences`` sentences, exactly ``--new_tokens`` new tokens each, greedy and beam 4; tokens/s counts
   the new tokens of the returned sequences.

``--markdown docs/benchmarks.md`` also puts the table between the page's ``table:compile`` markers.
"""

import argparse
import copy
import os
import platform
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from bench_speed import (
    Report,
    cli_default_model,
    describe_configuration,
    generation_step,
    median_seconds,
    model_batch,
    training_step,
)
from runs import add_threads_option, use_threads
from tables import measured_command, write_tables

from hf_entmax.kernels.cpu import kernel_available
from hf_entmax.modeling import entmax as entmax_module
from hf_entmax.modeling import modeling_adaptive_entmax_marian as modeling


VARIANTS = ("eager, native kernel", "eager, PyTorch path", "compiled (inductor)")


@contextmanager
def pytorch_path():
    """The model's attention and entmax on PyTorch operations, the native kernel set aside, as in the flat files that
    travel to the Hub when hf_entmax is not installed (they look the kernel up by these names at each call)."""
    saved = modeling.native_entmax_attention, entmax_module.native_entmax
    modeling.native_entmax_attention = entmax_module.native_entmax = None
    try:
        yield
    finally:
        modeling.native_entmax_attention, entmax_module.native_entmax = saved


def on_pytorch_path(step):
    def wrapped():
        with pytorch_path():
            step()

    return wrapped


def padded_to_one_length(batches: list[dict[str, torch.Tensor]], pad_token_id: int) -> list[dict[str, torch.Tensor]]:
    """The batches with every source padded to the longest source and every target to the longest target."""
    padding = {"input_ids": pad_token_id, "attention_mask": 0, "labels": -100}
    longest = {name: max(batch[name].shape[1] for batch in batches) for name in padding}
    return [
        {
            name: torch.nn.functional.pad(tensor, (0, longest[name] - tensor.shape[1]), value=padding[name])
            for name, tensor in batch.items()
        }
        for batch in batches
    ]


def timed_first_call(step) -> float:
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def bench_training(model_size: str | None, batch_size: int, repeats: int) -> tuple[list[float], float, str]:
    """Training tokens/s of each variant, the compiled variant's first call (s) and what the batches hold."""
    model, _ = cli_default_model(model_size)
    models = [model, copy.deepcopy(model), copy.deepcopy(model)]
    batches = [model_batch(model.config, seed, batch_size) for seed in range(4)]
    batches = padded_to_one_length(batches, model.config.pad_token_id)
    tokens = sum(int(batch["attention_mask"].sum() + (batch["labels"] != -100).sum()) for batch in batches)
    forwards = [models[0], models[1], torch.compile(models[2], fullgraph=True, dynamic=False)]
    native, pytorch, compiled = (
        training_step(forward, torch.optim.AdamW(trained.parameters(), lr=1e-4), batches)
        for forward, trained in zip(forwards, models, strict=True)
    )
    print("compiling the training step", flush=True)
    compile_seconds = timed_first_call(compiled)
    seconds = median_seconds([native, on_pytorch_path(pytorch), compiled], repeats)
    source_len, target_len = batches[0]["input_ids"].shape[1], batches[0]["labels"].shape[1]
    shape = f"4 batches of {batch_size} pairs padded to {source_len} + {target_len} tokens ({tokens:,} real tokens)"
    return [tokens / second for second in seconds], compile_seconds, shape


def bench_generation(
    model_size: str | None, num_beams: int, sentences: int, new_tokens: int, repeats: int
) -> tuple[list[float], float]:
    """Generation tokens/s of each variant and the compiled variant's first call (s)."""
    model, _ = cli_default_model(model_size)
    batch = model_batch(model.config, seed=0, batch_size=sentences)
    torch.compiler.reset()  # the graphs compiled before this call serve other shapes and are not needed again
    compiled_model = copy.deepcopy(model)
    compiled_model.forward = torch.compile(compiled_model.forward, fullgraph=True, dynamic=False)
    options = dict(num_beams=num_beams, sentences=sentences, new_tokens=new_tokens)
    compiled = generation_step(compiled_model, batch, **options, cache_implementation="static")
    print(f"compiling the decoding step, {num_beams} beam(s)", flush=True)
    compile_seconds = timed_first_call(compiled)
    steps = [generation_step(model, batch, **options), on_pytorch_path(generation_step(model, batch, **options))]
    seconds = median_seconds([*steps, compiled], repeats)
    return [sentences * new_tokens / second for second in seconds], compile_seconds


def table_row(measure: str, rates: list[float], compile_seconds: float) -> str:
    baseline = rates[0]
    cells = [f"{baseline:,.0f}"] + [f"{rate:,.0f} ({rate / baseline:.2f}×)" for rate in rates[1:]]
    return f"| {measure} | {' | '.join(cells)} | {compile_seconds:.0f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sections = ["training", "generation"]
    parser.add_argument("--sections", nargs="+", choices=sections, default=sections)
    parser.add_argument("--model_size", help="As `hf-entmax train --model_size` (default: its default, small).")
    parser.add_argument("--batch_size", type=int, default=64, help="Pairs per training batch.")
    parser.add_argument("--sentences", type=int, default=16, help="Sentences translated per generation call.")
    parser.add_argument("--new_tokens", type=int, default=20, help="New tokens per sentence.")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--markdown", nargs="+", type=Path, help="Also put the table into these Markdown files (table:compile)."
    )
    add_threads_option(parser)
    arguments = parser.parse_args()
    use_threads(arguments)

    report = Report(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), native kernel: {'yes' if kernel_available() else 'NO (PyTorch path)'}"
    )
    report.section("compile")
    rows, measured = [], [describe_configuration(arguments.model_size)]
    if "training" in arguments.sections:
        rates, compile_seconds, shape = bench_training(arguments.model_size, arguments.batch_size, arguments.repeats)
        rows.append(table_row("training tokens/s (forward, backward, AdamW; dropout on)", rates, compile_seconds))
        measured.append(f"training on {shape}")
    if "generation" in arguments.sections:
        for num_beams in (1, 4):
            rates, compile_seconds = bench_generation(
                arguments.model_size, num_beams, arguments.sentences, arguments.new_tokens, arguments.repeats
            )
            kind = "greedy" if num_beams == 1 else f"beam-{num_beams}"
            rows.append(table_row(f"{kind} generation tokens/s", rates, compile_seconds))
        measured.append(f"generation of {arguments.sentences} sentences, {arguments.new_tokens} new tokens each")
    report("\n#### Compiled (inductor) vs eager, on the CPU\n")
    report(f"Measured: {'; '.join(measured)}. Ratios against the eager native kernel of the same run.\n")
    report(f"| measure | {' | '.join(VARIANTS)} | compiling, s (first call) |")
    report("| --- | ---: | ---: | ---: | ---: |")
    for row in rows:
        report(row)
    if arguments.markdown:
        command = measured_command("bench_compile.py")
        note = f"Measured on {time.strftime('%Y-%m-%d')} ({report.header}) with `{command}`."
        write_tables(arguments.markdown, {"compile": "\n".join([*report.sections["compile"], "", note])})


if __name__ == "__main__":
    main()
