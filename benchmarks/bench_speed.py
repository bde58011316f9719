"""Speed of α-entmax attention: the mapping, full attention and the model, as ratios measured in the same run.

    python benchmarks/bench_speed.py [--sections mapping attention model] [--repeats 7]

Every time is the median of ``--repeats`` rounds after a warm-up; the variants compared run in turn within each
round, so every ratio divides two times taken side by side (absolute times on a shared machine are noise; ratios
much less so).

1. mapping: forward + backward (to the scores and, for a learnable α, to α) on float32 scores with a realistic
   spread (std 1–3 by head) and one α per head in [1.1, 1.9], against `torch.softmax` and the `entmax`
   package (`entmax_bisect`; `entmax15`/`sparsemax` for fixed α = 1.5 and 2).
2. attention: scores, padding mask, mapping, weighted values, forward + backward, against
   `torch.nn.functional.scaled_dot_product_attention` with the same mask.
3. model: the `small` preset (d_model 256, 3+3 layers, 4 heads) on Multi30k-length batches (64 pairs, 10–25
   tokens a side): training tokens/s (forward, backward, AdamW step) and beam-5 generation sentences/s of
   AdaptiveEntmaxMarian (learnable α) against `MarianMTModel` with SDPA attention, identical config and weights;
   training steps run on the same four batches. Peak memory of training above the model's own (RSS, each variant
   measured in a fresh process).
"""

import argparse
import multiprocessing
import os
import platform
import resource
import statistics
import time

import entmax as entmax_reference
import torch
from torch.nn.functional import scaled_dot_product_attention

from hf_entmax import AdaptiveEntmaxMarianConfig, AdaptiveEntmaxMarianMTModel, entmax, entmax15, sparsemax
from hf_entmax.kernels.cpu import kernel_available
from hf_entmax.modeling.modeling_adaptive_entmax_marian import entmax_attention_forward
from hf_entmax.training.presets import preset_config_kwargs


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


def bench_mapping(shapes, repeats: int) -> None:
    print("\n#### 1. The mapping, forward + backward\n")
    print("| shape (B, H, Lq, Lk) | mapping | ms | × torch.softmax | speed-up over `entmax` |")
    print("| --- | --- | ---: | ---: | ---: |")
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
        print(f"| {shape} | torch.softmax | {1000 * softmax:.2f} | 1.0 | |")
        for (name, *_), ours_seconds, reference_seconds in zip(rows, seconds[::2], seconds[1::2], strict=True):
            print(
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


def bench_attention(shapes, repeats: int) -> None:
    print("\n#### 2. Full attention (scores, padding mask, mapping, values), forward + backward\n")
    print("| shape (B, H, L, L), head dim 64 | ms entmax | ms SDPA | × SDPA |")
    print("| --- | ---: | ---: | ---: |")
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
        print(f"| {(batch, heads, length, length)} | {1000 * ours:.2f} | {1000 * sdpa:.2f} | {ours / sdpa:.2f} |")


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


def build_model(kind: str):
    from transformers import MarianConfig, MarianMTModel

    config = AdaptiveEntmaxMarianConfig(
        **preset_config_kwargs("small"),
        vocab_size=8000,
        decoder_vocab_size=8000,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
        alpha_init="random",
        learn_alpha=True,
    )
    torch.manual_seed(0)
    model = AdaptiveEntmaxMarianMTModel(config)
    if kind == "marian":
        marian_config = MarianConfig(**{k: v for k, v in config.to_dict().items() if not k.startswith("alpha")})
        marian = MarianMTModel._from_config(marian_config, attn_implementation="sdpa")
        marian.load_state_dict(model.state_dict(), strict=False)
        model = marian
    return model, config


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


def generation_step(model, batch):
    """A step that translates the batch's first 16 sentences: beam 5, exactly 20 new tokens."""

    def step():
        model.eval()
        with torch.no_grad():
            model.generate(
                input_ids=batch["input_ids"][:16],
                attention_mask=batch["attention_mask"][:16],
                num_beams=5,
                max_new_tokens=20,
                min_new_tokens=20,
            )

    return step


def measure_peak_memory(kind: str, queue) -> None:
    """In a fresh process: the peak resident memory of training, above the model's own."""
    model, config = build_model(kind)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = [model_batch(config, seed) for seed in range(4)]
    resident_before = current_rss_bytes()
    training_step(model, optimizer, batches)()
    queue.put(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - resident_before)


def bench_model(repeats: int) -> None:
    print("\n#### 3. The model (`small` preset), AdaptiveEntmaxMarian (learnable α) vs MarianMTModel (SDPA)\n")
    context = multiprocessing.get_context("spawn")
    memory = {}
    for kind in ("marian", "entmax"):
        queue = context.Queue()
        process = context.Process(target=measure_peak_memory, args=(kind, queue))
        process.start()
        memory[kind] = queue.get()
        process.join()

    models = {kind: build_model(kind) for kind in ("marian", "entmax")}
    config = models["entmax"][1]
    batches = [model_batch(config, seed) for seed in range(4)]
    tokens = sum(int(batch["attention_mask"].sum() + (batch["labels"] != -100).sum()) for batch in batches)
    training = median_seconds(
        [
            training_step(model, torch.optim.AdamW(model.parameters(), lr=1e-4), batches)
            for model, _ in models.values()
        ],
        repeats,
    )
    generation = median_seconds([generation_step(model, batches[0]) for model, _ in models.values()], repeats)
    (marian_train, train), (marian_generate, generate) = (tokens / s for s in training), (16 / s for s in generation)
    print("| measure | MarianMTModel (SDPA) | AdaptiveEntmaxMarian | ratio |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| training tokens/s | {marian_train:,.0f} | {train:,.0f} | {train / marian_train:.2f} |")
    generation_ratio = generate / marian_generate
    print(f"| beam-5 generation sentences/s | {marian_generate:.1f} | {generate:.1f} | {generation_ratio:.2f} |")
    print(
        f"| peak training memory (MiB) | {memory['marian'] / 2**20:,.0f} | {memory['entmax'] / 2**20:,.0f} "
        f"| {memory['entmax'] / memory['marian']:.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", nargs="+", default=["mapping", "attention", "model"])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--shapes", nargs="+", default=["8,8,64,64", "4,8,256,256", "1,8,1024,1024"])
    arguments = parser.parse_args()
    shapes = [tuple(int(size) for size in text.split(",")) for text in arguments.shapes]

    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), native kernel: {'yes' if kernel_available() else 'NO (PyTorch path)'}"
    )
    if "mapping" in arguments.sections:
        bench_mapping(shapes, arguments.repeats)
    if "attention" in arguments.sections:
        bench_attention(shapes[:2], arguments.repeats)
    if "model" in arguments.sections:
        bench_model(arguments.repeats)


if __name__ == "__main__":
    main()
