"""Speed of Sparsefinder's restricted attention on the CPU: gathered, masked, full entmax and SDPA, in the same run;
and decoding with cross-attention restricted to each query's nearest keys, against full attention.

    python benchmarks/bench_sparsefinder_speed.py [--sections attention decoding] [--lengths 128 256 512 1024 2048]
        [--sparsities 0.5 0.8 0.95] [--source_lengths 120 240 480] [--nearest_keys 24] [--new_tokens 32]
        [--model_size small] [--repeats 5] [--threads N] [--markdown docs/benchmarks.md]

attention:

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

decoding: beam search (4 beams) of a batch of 32 sources of up to ``--source_lengths`` tokens (each 85–100% of it,
the rest padding), decoding exactly ``--new_tokens`` tokens (no early end, so that both decode the same steps), with
full attention and with cross-attention restricted to each query's ``--nearest_keys`` nearest source keys
(``cross=nearest:keys=K``: distances formed from the projected query and the source keys' side, made once per
input, and the keys picked and gathered by the native kernel). The model is the one `hf-entmax train` builds with the
flags of `bench_length_translation.py`'s `sparsemax-cross` variant and `rope-cross-nape` positions (the
``--model_size`` preset, by default the command's `small`; α = 2 in cross-attention, no query scaling, RoPE, NAPE's
penalty in cross-attention: where the nearest method reaches the sparsity Sparsefinder is for, docs/benchmarks.md),
untrained, with random projections to `PROJECTION_DIM` dimensions and a position term: the graph keeps K keys per
query whatever was learned, so the time does not depend on it (the trained model's translations and their BLEU are
`bench_length_translation.py`'s).

``--markdown docs/benchmarks.md`` writes each section's tables between its markers, ``table:sparsefinder-speed`` and
``table:sparsefinder-decoding``.
"""

import argparse
import gc
import os
import platform
import sys
import time
from pathlib import Path

import torch
from bench_length_translation import POSITIONS, VARIANTS, decode_exactly
from bench_speed import Report, cli_default_model, median_seconds
from runs import add_threads_option, use_threads
from tables import measured_command, write_tables
from torch.nn.functional import scaled_dot_product_attention

from hf_entmax.kernels import cpu
from hf_entmax.modeling.sparsefinder_attention import (
    QUANTILE_STEPS,
    LayerProjections,
    OperatingPoint,
    PredictedSparsity,
    SparsefinderPredictor,
    predicted_graph,
)
from hf_entmax.training.arguments import DEFAULT_MODEL_SIZE
from hf_entmax.training.presets import MODEL_PRESETS


HEADS, HEAD_DIM = 8, 64
PROJECTION_DIM = 4  # hf-entmax sparsefinder's default --projection_dim
# The decoding section's model and batch (see the docstring).
DECODING_FLAGS = [*VARIANTS["sparsemax-cross"], *POSITIONS["rope-cross-nape"]]
DECODING_BATCH, DECODING_BEAMS = 32, 4


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


def random_projections(heads: int, head_dim: int, generator: torch.Generator) -> LayerProjections:
    """Projections to `PROJECTION_DIM` dimensions with 4 centroids and the distance method's position term, as
    `hf-entmax sparsefinder` trains them by default (random ones: the cost does not depend on what they learned)."""
    return LayerProjections(
        torch.randn(heads, head_dim, PROJECTION_DIM, generator=generator),
        torch.randn(heads, head_dim, PROJECTION_DIM, generator=generator),
        torch.linspace(-3, 3, QUANTILE_STEPS + 1).expand(heads, PROJECTION_DIM, -1).contiguous(),
        {4: torch.randn(heads, 4, PROJECTION_DIM, generator=generator)},
        torch.rand(heads, generator=generator),
    )


def prediction_steps(query: torch.Tensor, key: torch.Tensor) -> list:
    """Steps that predict a graph as the model does (`predicted_graph`), one per `PREDICTED_POINTS`."""
    projections = random_projections(HEADS, HEAD_DIM, torch.Generator().manual_seed(2))
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


def bench_attention(arguments: argparse.Namespace, report) -> None:
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


def decoding_model(model_size: str) -> tuple[torch.nn.Module, SparsefinderPredictor]:
    """The decoding section's model (`DECODING_FLAGS`, in evaluation mode) and a random cross-attention predictor."""
    model, _ = cli_default_model(model_size, DECODING_FLAGS)
    config = model.config
    generator = torch.Generator().manual_seed(3)
    heads = config.decoder_attention_heads
    layers = [random_projections(heads, config.d_model // heads, generator) for _ in range(config.decoder_layers)]
    return model.eval(), SparsefinderPredictor({"cross": layers})


def decoding_inputs(source_length: int, vocab_size: int, pad_token_id: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """`DECODING_BATCH` random sources of 85–100% of ``source_length`` tokens, padded to it, the last one ``</s>``."""
    generator = torch.Generator().manual_seed(seed)
    shortest = int(0.85 * source_length)
    lengths = torch.randint(shortest, source_length + 1, (DECODING_BATCH,), generator=generator)
    input_ids = torch.randint(3, vocab_size, (DECODING_BATCH, source_length), generator=generator)
    positions = torch.arange(source_length)
    input_ids[positions == lengths[:, None] - 1] = 1  # </s>
    input_ids = input_ids.masked_fill(positions >= lengths[:, None], pad_token_id)
    return {"input_ids": input_ids, "attention_mask": (input_ids != pad_token_id).long()}


def bench_decoding(arguments: argparse.Namespace, report) -> None:
    model, predictor = decoding_model(arguments.model_size)
    restricted = f"cross=nearest:keys={arguments.nearest_keys}"
    report(
        f"#### Decoding {arguments.new_tokens} tokens, beam {DECODING_BEAMS}, {DECODING_BATCH} sources: "
        f"cross-attention restricted to each query's {arguments.nearest_keys} nearest keys (`{restricted}`) "
        "against full attention\n"
    )
    report("| source tokens (max) | share of source keys kept | s full attention | s restricted | restricted / full |")
    report("| ---: | ---: | ---: | ---: | ---: |")

    def decode(inputs: dict[str, torch.Tensor], settings: str | None):
        def step():
            model.set_predicted_sparsity(settings, predictor=predictor if settings else None)
            decode_exactly(model, inputs, arguments.new_tokens, num_beams=DECODING_BEAMS)

        return step

    for source_length in arguments.source_lengths:
        inputs = decoding_inputs(source_length, model.config.vocab_size, model.config.pad_token_id)
        kept = min(arguments.nearest_keys, source_length) * DECODING_BATCH / inputs["attention_mask"].sum().item()
        full, sparse = median_seconds([decode(inputs, None), decode(inputs, restricted)], arguments.repeats)
        report(f"| {source_length} | {kept:.0%} | {full:.2f} | {sparse:.2f} | {sparse / full:.2f} |")
    model.set_predicted_sparsity(None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sections = ["attention", "decoding"]
    parser.add_argument("--sections", nargs="+", choices=sections, default=sections)
    parser.add_argument("--lengths", nargs="+", type=int, default=[128, 256, 512, 1024, 2048])
    parser.add_argument("--sparsities", nargs="+", type=float, default=[0.5, 0.8, 0.95])
    parser.add_argument("--source_lengths", nargs="+", type=int, default=[120, 240, 480], help="decoding's sources")
    parser.add_argument("--nearest_keys", type=int, default=24, help="decoding's nearest source keys per query")
    parser.add_argument("--new_tokens", type=int, default=32, help="tokens each decoding makes")
    parser.add_argument("--model_size", choices=list(MODEL_PRESETS), default=DEFAULT_MODEL_SIZE, help="decoding's")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--markdown",
        nargs="+",
        type=Path,
        help="Also put the tables into these Markdown files (between each section's markers).",
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
    if "attention" in arguments.sections:
        report.section("sparsefinder-speed")
        bench_attention(arguments, report)
    if "decoding" in arguments.sections:
        report.section("sparsefinder-decoding")
        bench_decoding(arguments, report)
    if arguments.markdown:
        command = measured_command("bench_sparsefinder_speed.py")
        measured = f"Measured on {time.strftime('%Y-%m-%d')} ({report.header}) with `{command}`."
        tables = {name: "\n".join([*lines, "", measured]) for name, lines in report.sections.items()}
        write_tables(arguments.markdown, tables)


if __name__ == "__main__":
    main()
