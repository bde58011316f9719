"""Speed of Sparsefinder's restricted attention on the CPU: gathered, masked, full entmax and SDPA, in the same run.

    python benchmarks/bench_sparsefinder_speed.py [--lengths 128 256 512 1024 2048] [--sparsities 0.5 0.8 0.95]
        [--repeats 5] [--threads N] [--markdown docs/benchmarks.md]

Self-attention of one sequence of L tokens, 8 heads of 64 dimensions, α per head from 1.1 to 1.9 and a score spread of
1–3 by head (as `bench_speed.py`), restricted to a graph that keeps a share 1 − s of the pairs, for two stand-ins of a
predicted graph: a window (the pairs at most w positions apart, w chosen for the sparsity) and a random graph (each
pair kept with probability 1 − s). A trained predictor's graphs lie between the two: clustered like a window,
scattered like random pairs. The measured sparsity is printed. For each, in the same rounds:

- full entmax: the fused native kernel over every pair (`cpu.entmax_attention`, no graph): the baseline;
- masked: the graph made an additive mask and the fused kernel run over every pair, as the model did before gathering
  (`PredictedSparsity.graph_mask`, then `cpu.entmax_attention`), the mask's making included;
- gathered: the graph made compressed rows (`graph_rows`, included) and attended over its pairs only
  (`torch.ops.hf_entmax.restricted_attention_forward`; forward + backward through `NativeRestrictedAttentionFunction`);
- SDPA: `torch.nn.functional.scaled_dot_product_attention` (softmax) over every pair, no graph.

Each is timed for the forward (under ``torch.no_grad``, as in generation) and forward + backward (to the query, key,
value and α). Every time is the median of ``--repeats`` rounds after a warm-up, every round running all the variants
of a length in turn (`bench_speed.median_seconds`), and each variant is reported as its speed-up over full entmax
(time of full entmax / its time) measured in those same rounds. The graph is given: predicting it (projecting the
queries and keys and comparing every pair, itself quadratic) is timed apart, in a second table, for each method.

``--markdown docs/benchmarks.md`` writes the table between the markers ``table:sparsefinder-speed``.
"""

import argparse
import gc
import os
import platform
import sys
import time
from pathlib import Path

import torch
from bench_speed import Report, median_seconds
from runs import add_threads_option, use_threads
from tables import measured_command, write_tables
from torch.nn.functional import scaled_dot_product_attention

from hf_entmax.kernels import cpu
from hf_entmax.modeling.sparsefinder_attention import (
    QUANTILE_STEPS,
    LayerProjections,
    OperatingPoint,
    PredictedSparsity,
    predicted_graph,
)


HEADS, HEAD_DIM = 8, 64
PROJECTION_DIM = 4  # hf-entmax sparsefinder's default --projection_dim


def inputs(length: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """``(query, key, value, alpha)``: ``(1, H, L, 64)`` each, the query already scaled (times 1–3 by head, the score
    spread of bench_speed), and α ``(1, H, 1, 1)`` from 1.1 to 1.9."""
    generator = torch.Generator().manual_seed(seed)
    query, key, value = (torch.randn(1, HEADS, length, HEAD_DIM, generator=generator) for _ in range(3))
    spread = torch.linspace(1.0, 3.0, HEADS).view(1, HEADS, 1, 1)
    alpha = torch.linspace(1.1, 1.9, HEADS).view(1, HEADS, 1, 1)
    return query * spread * HEAD_DIM**-0.5, key, value, alpha


def window_graph(length: int, sparsity: float) -> torch.Tensor:
    """``(1, H, L, L)`` bool: the pairs at most w apart, with the w whose graph is nearest to ``sparsity``."""
    positions = torch.arange(length)
    distance = (positions[:, None] - positions[None, :]).abs()  # (L, L)
    widths = torch.arange(length)
    kept = (2 * widths + 1) * length - widths * (widths + 1)  # pairs at most w apart
    width = int((kept / length**2 - (1 - sparsity)).abs().argmin())
    return (distance <= width).expand(1, HEADS, length, length).contiguous()


def random_graph(length: int, sparsity: float, seed: int = 1) -> torch.Tensor:
    """``(1, H, L, L)`` bool: each pair kept with probability 1 − ``sparsity``."""
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(1, HEADS, length, length, generator=generator) >= sparsity


def forward_step(function, *tensors: torch.Tensor):
    def step():
        with torch.no_grad():
            function(*tensors)

    return step


def forward_backward_step(function, *tensors: torch.Tensor):
    """A step that runs ``function`` on fresh leaves of ``tensors`` and back-propagates a fixed upstream gradient."""
    upstream = torch.randn(1, HEADS, tensors[0].shape[-2], HEAD_DIM)

    def step():
        leaves = [tensor.detach().requires_grad_() for tensor in tensors]
        function(*leaves).backward(upstream)

    return step


def full_entmax(query, key, value, alpha):
    return cpu.entmax_attention(query, key, value, alpha, None)[0]


def masked(graph):
    def attention(query, key, value, alpha):
        mask = PredictedSparsity.graph_mask(graph, None, query.dtype)
        return cpu.entmax_attention(query, key, value, alpha, mask)[0]

    return attention


def gathered(graph):
    def attention(query, key, value, alpha):
        offsets, columns = cpu.graph_rows(graph)
        if torch.is_grad_enabled():
            return cpu.NativeRestrictedAttentionFunction.apply(query, key, value, alpha, offsets, columns)
        return torch.ops.hf_entmax.restricted_attention_forward(query, key, value, alpha, offsets, columns)[0]

    return attention


def sdpa(query, key, value, alpha):
    return scaled_dot_product_attention(query, key, value, scale=1.0)  # the query is scaled already


# The operating points whose prediction is timed: each method once, at a middle knob.
PREDICTED_POINTS = (
    OperatingPoint("window", 8),
    OperatingPoint("distance", 1.0),
    OperatingPoint("quantization", 8),
    OperatingPoint("clustering", 4),
)


def prediction_steps(query: torch.Tensor, key: torch.Tensor) -> list:
    """Steps that predict a graph as the model does (`predicted_graph`), one per `PREDICTED_POINTS`, with projections
    to `PROJECTION_DIM` dimensions and the distance method's position term, as `hf-entmax sparsefinder` trains them by
    default (random ones: the cost does not depend on what they learned)."""
    generator = torch.Generator().manual_seed(2)
    projections = LayerProjections(
        torch.randn(HEADS, HEAD_DIM, PROJECTION_DIM, generator=generator),
        torch.randn(HEADS, HEAD_DIM, PROJECTION_DIM, generator=generator),
        torch.linspace(-3, 3, QUANTILE_STEPS + 1).expand(HEADS, PROJECTION_DIM, -1).contiguous(),
        {4: torch.randn(HEADS, 4, PROJECTION_DIM, generator=generator)},
        torch.rand(HEADS, generator=generator),
    )
    return [
        lambda point=point: predicted_graph(point, projections, query, key, self_attention=True)
        for point in PREDICTED_POINTS
    ]


def bench_length(length: int, sparsities: list[float], repeats: int, report, predictions: list[str]) -> None:
    tensors = inputs(length)
    graphs = [
        (kind, sparsity, make(length, sparsity))
        for kind, make in (("window", window_graph), ("random", random_graph))
        for sparsity in sparsities
    ]
    for mode, make_step in (("forward", forward_step), ("forward + backward", forward_backward_step)):
        steps = [make_step(full_entmax, *tensors), make_step(sdpa, *tensors)]
        for _, _, graph in graphs:
            steps += [make_step(masked(graph), *tensors), make_step(gathered(graph), *tensors)]
            if mode == "forward":
                steps.append(lambda graph=graph: cpu.graph_rows(graph))
        if mode == "forward":
            steps += prediction_steps(*tensors[:2])
        seconds = median_seconds(steps, repeats)
        full, softmax = seconds[:2]
        if mode == "forward":
            predicting = seconds[-len(PREDICTED_POINTS) :]
            predictions.append(
                f"| {length} | {1000 * full:.2f} | " + " | ".join(f"{time / full:.2f}" for time in predicting) + " |"
            )
        per_graph = 3 if mode == "forward" else 2
        for index, (kind, _, graph) in enumerate(graphs):
            masked_seconds, gathered_seconds, *rows_seconds = seconds[
                2 + per_graph * index : 2 + per_graph * (index + 1)
            ]
            rows = f"{1000 * rows_seconds[0]:.2f}" if rows_seconds else ""
            measured = 1 - graph.float().mean().item()
            report(
                f"| {length} | {mode} | {kind} | {measured:.2f} | {1000 * full:.2f} | {full / softmax:.2f} "
                f"| {full / masked_seconds:.2f} | {full / gathered_seconds:.2f} | {1000 * gathered_seconds:.2f} "
                f"| {rows} |"
            )
        del steps
        gc.collect()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", nargs="+", type=int, default=[128, 256, 512, 1024, 2048])
    parser.add_argument("--sparsities", nargs="+", type=float, default=[0.5, 0.8, 0.95])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--markdown",
        nargs="+",
        type=Path,
        help="Also put the table into these Markdown files (between their table:sparsefinder-speed markers).",
    )
    add_threads_option(parser)
    arguments = parser.parse_args()
    use_threads(arguments)
    if not cpu.kernel_available():
        sys.exit("bench_sparsefinder_speed.py measures the native kernel, which could not be built here")

    report = Report(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads)"
    )
    report.section("sparsefinder-speed")
    report(
        f"#### Restricted attention, 1 sequence × {HEADS} heads × head dim {HEAD_DIM}, α per head 1.1–1.9: "
        "speed-up over full entmax (its time / the variant's; > 1 is faster)\n"
    )
    report(
        "| L | pass | graph | sparsity | ms full entmax | SDPA | masked | gathered | ms gathered "
        "| ms of it: graph → rows |"
    )
    report("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    predictions = []
    for length in arguments.lengths:
        bench_length(length, arguments.sparsities, arguments.repeats, report, predictions)
    report(
        f"\n#### Predicting the graph (not included above): `predicted_graph` over the same {HEADS} heads, forward\n"
    )
    report(
        f"The time of predicting the graph, in units of full entmax attention's forward (> 1: predicting costs more "
        f"than attending over all pairs), projections to r = {PROJECTION_DIM}.\n"
    )
    report("| L | ms full entmax | " + " | ".join(f"`{point.spec()}`" for point in PREDICTED_POINTS) + " |")
    report("| ---: | ---: |" + " ---: |" * len(PREDICTED_POINTS))
    for line in predictions:
        report(line)
    if arguments.markdown:
        command = measured_command("bench_sparsefinder_speed.py")
        measured = f"Measured on {time.strftime('%Y-%m-%d')} ({report.header}) with `{command}`."
        write_tables(arguments.markdown, {"sparsefinder-speed": "\n".join([*report.current, "", measured])})


if __name__ == "__main__":
    main()
