"""Speed of α-entmax attention: the mapping, full attention and the model, as ratios measured in the same run.

    python benchmarks/bench_speed.py [--sections mapping attention model] [--repeats 7] [--threads N]
        [--markdown README.md docs/benchmarks.md]

Every time is the median of ``--repeats`` rounds after a warm-up; the variants compared run in turn within each
round, so every ratio divides two times taken side by side (absolute times on a shared machine are noise; ratios
much less so).

1. mapping: forward + backward (to the scores and, for a learnable α, to α) on float32 scores with a realistic
   spread (std 1–3 by head) and one α per head in [1.1, 1.9], against `torch.softmax` and the `entmax`
   package (`entmax_bisect`; `entmax15`/`sparsemax` for fixed α = 1.5 and 2).
2. attention: scores, padding mask, mapping, weighted values, forward + backward, against
   `torch.nn.functional.scaled_dot_product_attention` with the same mask.
3. model: the model `hf-entmax train` builds by default (`load_model(ModelArguments(), …)`: the `small` preset,
   d_model 256, 3+3 layers, 4 heads, learnable α from a random start, queries scaled by n^(1 − α), dropout and
   attention dropout 0.1) with its default vocabulary size, against `MarianMTModel` with SDPA attention and the same
   architecture, dropout, attention dropout and weights, on Multi30k-length batches (64 pairs, 10–25 tokens a side):
   training tokens/s (forward, backward, AdamW step, in training mode: dropout on) on the same four batches, beam-5
   generation sentences/s, and the peak memory of training above the model's own (RSS, each variant measured in a
   fresh process).

4. positions: the same default model with each `position_embedding_type` (sinusoidal, rope, alibi, nape), and with
   NAPE in cross-attention too (`cross_attention_positions`), the same weights: training step time and beam-5
   generation time as ratios to sinusoidal.

``--markdown README.md docs/benchmarks.md`` also puts the tables into those pages, each section between its markers
(``table:speed-mapping``, ``table:speed-attention``, ``table:speed-model``, ``table:speed-positions``): the README
shows the model's.
"""

import argparse
import multiprocessing
import os
import platform
import resource
import statistics
import time
from pathlib import Path

import entmax as entmax_reference
import torch
from runs import add_threads_option, use_threads
from tables import measured_command, write_tables
from tokenizers import Tokenizer, models
from torch.nn.functional import scaled_dot_product_attention
from transformers import HfArgumentParser, MarianConfig, MarianMTModel, PreTrainedTokenizerFast

from hf_entmax import AdaptiveEntmaxMarianMTModel, entmax, entmax15, sparsemax
from hf_entmax.kernels.cpu import kernel_available
from hf_entmax.modeling.configuration_adaptive_entmax_marian import ATTENTION_TYPES
from hf_entmax.modeling.modeling_adaptive_entmax_marian import entmax_attention_forward
from hf_entmax.training.arguments import DEFAULT_MAX_LENGTH, ModelArguments
from hf_entmax.training.model_loading import load_model


def median_seconds(steps: list, repeats: int) -> list[float]:
    """The median time of each step over ``repeats`` rounds, after one warm-up run of each.

    Each round runs every step once, in turn, so that a slow spell of the machine hits all of them alike and their
    ratios stay meaningful.
    """
    for step in steps:
        step()
    timings = [[] for _ in steps]
    for _ in range(repeats):
        for step, step_timings in zip(steps, timings, strict=True):
            start = time.perf_counter()
            step()
            step_timings.append(time.perf_counter() - start)
    return [statistics.median(step_timings) for step_timings in timings]


def attention_scores(shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    spread = torch.linspace(1.0, 3.0, shape[1]).view(1, -1, 1, 1)  # std 1–3 by head
    return torch.randn(shape, generator=generator) * spread


def per_head_alpha(heads: int) -> torch.Tensor:
    return torch.linspace(1.1, 1.9, heads).view(1, heads, 1, 1)


def forward_backward(function, *inputs: torch.Tensor):
    """A step that runs ``function`` on fresh leaves of ``inputs`` and back-propagates a fixed upstream gradient."""
    upstream = torch.randn_like(function(*inputs))

    def step():
        leaves = [tensor.detach().requires_grad_() for tensor in inputs]
        function(*leaves).backward(upstream)

    return step


def bench_mapping(shapes, repeats: int, report) -> None:
    report("\n#### The mapping, forward + backward\n")
    report("| shape (B, H, Lq, Lk) | mapping | ms | × torch.softmax | speed-up over `entmax` |")
    report("| --- | --- | ---: | ---: | ---: |")
    for shape in shapes:
        scores = attention_scores(shape)
        alpha = per_head_alpha(shape[1])
        rows = [
            ("learnable α per head", entmax, entmax_reference.entmax_bisect, (scores, alpha)),
            ("α = 1.5", entmax15, entmax_reference.entmax15, (scores,)),
            ("α = 2 (sparsemax)", sparsemax, entmax_reference.sparsemax, (scores,)),
        ]
        steps = [forward_backward(lambda z: torch.softmax(z, -1), scores)]
        for _, ours, reference, inputs in rows:
            steps += [forward_backward(ours, *inputs), forward_backward(reference, *inputs)]
        softmax, *seconds = median_seconds(steps, repeats)
        report(f"| {shape} | torch.softmax | {1000 * softmax:.2f} | 1.0 | |")
        for (name, *_), ours_seconds, reference_seconds in zip(rows, seconds[::2], seconds[1::2], strict=True):
            report(
                f"| {shape} | hf_entmax, {name} | {1000 * ours_seconds:.2f} | {ours_seconds / softmax:.2f} "
                f"| {reference_seconds / ours_seconds:.1f}× |"
            )


class _HeadAlphas(torch.nn.Module):
    """Stands in for an attention module: α per head and the training flag (dropout off)."""

    def __init__(self, alpha: torch.Tensor):
        super().__init__()
        self.alpha_logits = torch.nn.Parameter(torch.logit(alpha.flatten() - 1))
        self.train(False)

    def alpha(self) -> torch.Tensor:
        return 1 + torch.sigmoid(self.alpha_logits)

    def query_scale(self, mask, key_len, dtype, query_hidden_states=None) -> None:
        return None  # no ASEntmax scaling


def bench_attention(shapes, repeats: int, report) -> None:
    report("\n#### Full attention (scores, padding mask, mapping, values), forward + backward\n")
    report("| shape (B, H, L, L), head dim 64 | ms entmax | ms SDPA | × SDPA |")
    report("| --- | ---: | ---: | ---: |")
    for batch, heads, length, _ in shapes:
        generator = torch.Generator().manual_seed(1)
        query, key, value = (torch.randn(batch, heads, length, 64, generator=generator) for _ in range(3))
        keep = torch.ones(batch, 1, 1, length, dtype=torch.bool)
        keep[0, ..., length * 3 // 4 :] = False  # one padded sequence
        additive = torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)
        module = _HeadAlphas(per_head_alpha(heads))
        ours, sdpa = median_seconds(
            [
                forward_backward(
                    lambda q, k, v, module=module, mask=additive: entmax_attention_forward(module, q, k, v, mask)[0],
                    query,
                    key,
                    value,
                ),
                forward_backward(
                    lambda q, k, v, keep=keep: scaled_dot_product_attention(q, k, v, attn_mask=keep),
                    query,
                    key,
                    value,
                ),
            ],
            repeats,
        )
        report(f"| {(batch, heads, length, length)} | {1000 * ours:.2f} | {1000 * sdpa:.2f} | {ours / sdpa:.2f} |")


def model_batch(config, seed: int, batch_size: int = 64) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(10, 26, (2, batch_size), generator=generator)
    batch = {}
    for name, side_lengths in (("input_ids", lengths[0]), ("labels", lengths[1])):
        ids = torch.randint(3, config.vocab_size, (batch_size, int(side_lengths.max())), generator=generator)
        positions = torch.arange(ids.shape[1])
        batch[name] = ids.masked_fill(positions >= side_lengths[:, None], config.pad_token_id)
    batch["attention_mask"] = (batch["input_ids"] != config.pad_token_id).long()
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == config.pad_token_id, -100)
    return batch


def cli_default_model(
    model_size: str | None = None, flags: list[str] | None = None
) -> tuple[AdaptiveEntmaxMarianMTModel, ModelArguments]:
    """The model `hf-entmax train` builds by default (or with ``--model_size model_size`` and the command's model
    ``flags``, e.g. ``["--attention_scaling", "none"]``), from its `ModelArguments`, and those arguments.

    The command trains its tokenizer on the data; a stand-in with the default vocabulary size and the same special
    tokens (``<pad>`` 0, which also starts decoding, ``</s>`` 1, ``<unk>`` 2) gives the model the same shape.
    """
    size = [] if model_size is None else ["--model_size", model_size]
    (arguments,) = HfArgumentParser(ModelArguments).parse_args_into_dataclasses(args=[*size, *(flags or [])])
    pieces = {"<pad>": 0, "</s>": 1, "<unk>": 2} | {f"piece{index}": index for index in range(3, arguments.vocab_size)}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(pieces, unk_token="<unk>")),
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
    )
    torch.manual_seed(0)
    return load_model(arguments, tokenizer, DEFAULT_MAX_LENGTH), arguments


def sdpa_twin(model: AdaptiveEntmaxMarianMTModel) -> MarianMTModel:
    """`MarianMTModel` with SDPA attention and ``model``'s architecture, dropouts and weights (not the α logits)."""
    marian_fields = {
        key: value for key, value in model.config.to_dict().items() if key in MarianConfig.__dataclass_fields__
    }
    marian = MarianMTModel._from_config(MarianConfig(**marian_fields), attn_implementation="sdpa")
    marian.load_state_dict(model.state_dict(), strict=False)  # all but the α logits
    for name in ("dropout", "attention_dropout", "activation_dropout"):
        assert getattr(marian.config, name) == getattr(model.config, name), name
    return marian


def build_models() -> dict[str, torch.nn.Module]:
    """``"entmax"``: the default `hf-entmax train` model; ``"marian"``: its `sdpa_twin`."""
    model, _ = cli_default_model()
    return {"marian": sdpa_twin(model), "entmax": model}


def describe_configuration(model_size: str | None = None) -> str:
    """What the model section measures: the preset, the dropouts and how α is chosen, read from the built model."""
    model, arguments = cli_default_model(model_size)
    config = model.config

    def alpha_of(kind: str) -> str:
        settings = config.alpha_settings(kind)
        start = "a random start" if settings.init == "random" else f"{float(settings.init):g}"
        return f"learned per head from {start}" if settings.learn else f"fixed at {float(settings.init):g}"

    def per_type(describe) -> str:
        """One description where every attention type has the same, else each type's in order."""
        values = [describe(kind) for kind in ATTENTION_TYPES]
        return values[0] if len(set(values)) == 1 else ", ".join(values) + " (encoder self, decoder self, cross)"

    alpha, scaling = per_type(alpha_of), per_type(config.scaling_method)
    return (
        f"`hf-entmax train` defaults: preset `{arguments.model_size}` (d_model {config.d_model}, "
        f"{config.encoder_layers}+{config.decoder_layers} layers, {config.encoder_attention_heads} heads), vocabulary "
        f"{config.vocab_size}, dropout {config.dropout}, attention dropout {config.attention_dropout}, α {alpha}, "
        f"query scaling {scaling}"
    )


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def training_step(model, optimizer, batches):
    """A step that trains ``model`` on each of ``batches`` (forward, backward, AdamW step)."""

    def step():
        model.train()
        for batch in batches:
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    return step


def generation_step(model, batch, num_beams: int = 5, sentences: int = 16, new_tokens: int = 20, **options):
    """A step that translates the batch's first ``sentences`` sentences: ``num_beams`` beams, exactly ``new_tokens``
    new tokens, and ``options`` for `generate` (e.g. ``cache_implementation``)."""

    def step():
        model.eval()
        with torch.no_grad():
            model.generate(
                input_ids=batch["input_ids"][:sentences],
                attention_mask=batch["attention_mask"][:sentences],
                num_beams=num_beams,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                **options,
            )

    return step


def measure_peak_memory(kind: str, queue) -> None:
    """In a fresh process: the peak resident memory of training, above the model's own.

    Both models are built in each process and one is dropped, so that both measurements start from the same
    allocations (memory freed by the dropped model is reused by training either way), and the kernel's library is
    loaded before: it is code, not training memory.
    """
    model = build_models()[kind]
    kernel_available()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = [model_batch(model.config, seed) for seed in range(4)]
    resident_before = current_rss_bytes()
    training_step(model, optimizer, batches)()
    queue.put(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - resident_before)


def bench_model(repeats: int, report) -> None:
    report("\n#### The model `hf-entmax train` builds by default vs MarianMTModel (SDPA), training mode\n")
    report(f"Measured: {describe_configuration()}; MarianMTModel with the same architecture, dropouts and weights.\n")
    context = multiprocessing.get_context("spawn")
    memory = {}
    for kind in ("marian", "entmax"):
        queue = context.Queue()
        process = context.Process(target=measure_peak_memory, args=(kind, queue))
        process.start()
        memory[kind] = queue.get()
        process.join()

    models = build_models()
    batches = [model_batch(models["entmax"].config, seed) for seed in range(4)]
    tokens = sum(int(batch["attention_mask"].sum() + (batch["labels"] != -100).sum()) for batch in batches)
    training = median_seconds(
        [training_step(model, torch.optim.AdamW(model.parameters(), lr=1e-4), batches) for model in models.values()],
        repeats,
    )
    generation = median_seconds([generation_step(model, batches[0]) for model in models.values()], repeats)
    (marian_train, train), (marian_generate, generate) = (tokens / s for s in training), (16 / s for s in generation)
    report("| measure | MarianMTModel (SDPA) | AdaptiveEntmaxMarian | ratio |")
    report("| --- | ---: | ---: | ---: |")
    report(f"| training tokens/s (dropout on) | {marian_train:,.0f} | {train:,.0f} | {train / marian_train:.2f} |")
    generation_ratio = generate / marian_generate
    report(f"| beam-5 generation sentences/s | {marian_generate:.1f} | {generate:.1f} | {generation_ratio:.2f} |")
    report(
        f"| peak training memory (MiB) | {memory['marian'] / 2**20:,.0f} | {memory['entmax'] / 2**20:,.0f} "
        f"| {memory['entmax'] / memory['marian']:.2f} |"
    )


# The rows of the positions table: their `PositionOptions`, every other setting the default model's.
POSITION_VARIANTS = {
    "sinusoidal": {},
    **{kind: {"position_embedding_type": kind} for kind in ("rope", "alibi", "nape")},
    "nape, cross-attention nape": {"position_embedding_type": "nape", "cross_attention_positions": "nape"},
    "rope, cross-attention nape": {"position_embedding_type": "rope", "cross_attention_positions": "nape"},
}


def position_twin(model: AdaptiveEntmaxMarianMTModel, positions: dict[str, str]) -> AdaptiveEntmaxMarianMTModel:
    """``model`` with other positions (`PositionOptions`): the same config otherwise, the same weights."""
    settings = {
        key: value for key, value in model.config.to_dict().items() if key not in ("auto_map", "architectures")
    }
    twin = AdaptiveEntmaxMarianMTModel(type(model.config)(**{**settings, **positions}))
    twin.load_state_dict(model.state_dict(), strict=False)  # a sinusoidal table is not a weight
    return twin


def bench_positions(repeats: int, report) -> None:
    report("\n#### Positions: the default model with each position type, training mode\n")
    report(f"Measured: {describe_configuration()}; only the positions differ, weights the same.\n")
    model, _ = cli_default_model()
    models = {
        name: position_twin(model, positions) if positions else model for name, positions in POSITION_VARIANTS.items()
    }
    batches = [model_batch(model.config, seed) for seed in range(4)]
    training = median_seconds(
        [training_step(twin, torch.optim.AdamW(twin.parameters(), lr=1e-4), batches) for twin in models.values()],
        repeats,
    )
    generation = median_seconds([generation_step(twin, batches[0]) for twin in models.values()], repeats)
    report("| positions | training step, × sinusoidal | beam-5 generation, × sinusoidal |")
    report("| --- | ---: | ---: |")
    for name, train_seconds, generate_seconds in zip(models, training, generation, strict=True):
        report(f"| {name} | {train_seconds / training[0]:.3f} | {generate_seconds / generation[0]:.3f} |")


class Report:
    """The benchmark's output: printed as it comes, and kept per section for ``--markdown``."""

    def __init__(self, header: str):
        self.header = header
        self.sections: dict[str, list[str]] = {}
        self.current: list[str] = []
        print(header, flush=True)

    def section(self, name: str) -> None:
        self.current = self.sections.setdefault(name, [])

    def __call__(self, text: str) -> None:
        print(text, flush=True)
        self.current.append(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sections = ["mapping", "attention", "model", "positions"]
    parser.add_argument("--sections", nargs="+", choices=sections, default=sections)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--shapes", nargs="+", default=["8,8,64,64", "4,8,256,256", "1,8,1024,1024"])
    parser.add_argument(
        "--markdown",
        nargs="+",
        type=Path,
        help="Also put the tables into these Markdown files (between their table:speed-SECTION markers).",
    )
    add_threads_option(parser)
    arguments = parser.parse_args()
    shapes = [tuple(int(size) for size in text.split(",")) for text in arguments.shapes]
    use_threads(arguments)

    report = Report(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), native kernel: {'yes' if kernel_available() else 'NO (PyTorch path)'}"
    )
    for name in arguments.sections:
        report.section(name)
        if name == "mapping":
            bench_mapping(shapes, arguments.repeats, report)
        elif name == "attention":
            bench_attention(shapes[:2], arguments.repeats, report)
        elif name == "model":
            bench_model(arguments.repeats, report)
        else:
            bench_positions(arguments.repeats, report)
    if arguments.markdown:
        command = measured_command("bench_speed.py")
        measured = f"Measured on {time.strftime('%Y-%m-%d')} ({report.header}) with `{command}`."
        tables = {f"speed-{name}": "\n".join([*lines, "", measured]) for name, lines in report.sections.items()}
        write_tables(arguments.markdown, tables)


if __name__ == "__main__":
    main()
