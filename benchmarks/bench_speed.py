"""Speed of α-entmax attention: the mapping, full attention and the model, as ratios measured in the same run.

    python benchmarks/bench_speed.py [--sections mapping attention model] [--repeats 7]

Every time is the median of ``--repeats`` runs after a warm-up, and every ratio divides two times taken in this
run (absolute times on a shared machine are noise; ratios much less so).

1. mapping: forward + backward (to the scores and, for a learnable α, to α) on float32 scores with a realistic
   spread (std 1–3 by head) and one α per head in [1.1, 1.9], against `torch.softmax` and the `entmax`
   package (`entmax_bisect`; `entmax15`/`sparsemax` for fixed α = 1.5 and 2).
2. attention: scores, padding mask, mapping, weighted values, forward + backward, against
   `torch.nn.functional.scaled_dot_product_attention` with the same mask.
3. model: the `small` preset (d_model 256, 3+3 layers, 4 heads) on Multi30k-length batches (64 pairs, 10–25
   tokens a side): training tokens/s (forward, backward, AdamW step) and beam-5 generation sentences/s of
   AdaptiveEntmaxMarian (learnable α) against `MarianMTModel` with SDPA attention, identical config and weights;
   peak memory above the model's own (RSS, each variant measured in a fresh process).
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

from hf_entmax import AdaptiveEntmaxMarianConfig, AdaptiveEntmaxMarianMTModel, entmax, entmax15, sparsemax
from hf_entmax.kernels.cpu import kernel_available
from hf_entmax.modeling.modeling_adaptive_entmax_marian import entmax_attention_forward
from hf_entmax.training.presets import preset_config_kwargs


def median_seconds(step, repeats: int) -> float:
    step()  # warm-up
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        timings.append(time.perf_counter() - start)
    return statistics.median(timings)


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
        (function(*leaves) * upstream).sum().backward()

    return step


def bench_mapping(shapes, repeats: int) -> None:
    print("\n#### 1. The mapping, forward + backward\n")
    print("| shape (B, H, Lq, Lk) | mapping | ms | × torch.softmax | speed-up over `entmax` |")
    print("| --- | --- | ---: | ---: | ---: |")
    for shape in shapes:
        scores = attention_scores(shape)
        alpha = per_head_alpha(shape[1])
        softmax = median_seconds(forward_backward(lambda z: torch.softmax(z, -1), scores), repeats)
        rows = [
            ("learnable α per head", entmax, entmax_reference.entmax_bisect, (scores, alpha)),
            ("α = 1.5", entmax15, entmax_reference.entmax15, (scores,)),
            ("α = 2 (sparsemax)", sparsemax, entmax_reference.sparsemax, (scores,)),
        ]
        print(f"| {shape} | torch.softmax | {1000 * softmax:.2f} | 1.0 | |")
        for name, ours, reference, inputs in rows:
            ours_seconds = median_seconds(forward_backward(ours, *inputs), repeats)
            reference_seconds = median_seconds(forward_backward(reference, *inputs), repeats)
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
        ours = median_seconds(
            forward_backward(
                lambda q, k, v, module=module, mask=additive: entmax_attention_forward(module, q, k, v, mask)[0],
                query,
                key,
                value,
            ),
            repeats,
        )
        sdpa = median_seconds(
            forward_backward(
                lambda q, k, v, keep=keep: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep),
                query,
                key,
                value,
            ),
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


def measure_model(kind: str, repeats: int, queue) -> None:
    """In a fresh process: training tokens/s, generation sentences/s and peak memory above the model's own."""
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", torch.get_num_threads())))
    model, config = build_model(kind)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = [model_batch(config, seed) for seed in range(repeats + 1)]
    resident_before = current_rss_bytes()
    tokens = []

    def train_step(batch):
        model.train()
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    train_step(batches[-1])  # warm-up (and the optimizer's state)
    timings = []
    for batch in batches[:repeats]:
        start = time.perf_counter()
        train_step(batch)
        timings.append(time.perf_counter() - start)
        tokens.append(int(batch["attention_mask"].sum() + (batch["labels"] != -100).sum()))
    tokens_per_second = statistics.median(count / seconds for count, seconds in zip(tokens, timings, strict=True))
    peak_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - resident_before

    model.eval()
    sources = batches[0]["input_ids"][:16], batches[0]["attention_mask"][:16]

    def generate():
        with torch.no_grad():
            model.generate(
                input_ids=sources[0], attention_mask=sources[1], num_beams=5, max_new_tokens=20, min_new_tokens=20
            )

    sentences_per_second = 16 / median_seconds(generate, max(3, repeats // 2))
    queue.put((tokens_per_second, sentences_per_second, peak_bytes))


def bench_model(repeats: int) -> None:
    print("\n#### 3. The model (`small` preset), AdaptiveEntmaxMarian (learnable α) vs MarianMTModel (SDPA)\n")
    context = multiprocessing.get_context("spawn")
    results = {}
    for kind in ("marian", "entmax"):
        queue = context.Queue()
        process = context.Process(target=measure_model, args=(kind, repeats, queue))
        process.start()
        results[kind] = queue.get()
        process.join()
    (marian_train, marian_generate, marian_memory), (train, generate, memory) = results["marian"], results["entmax"]
    print("| measure | MarianMTModel (SDPA) | AdaptiveEntmaxMarian | ratio |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| training tokens/s | {marian_train:,.0f} | {train:,.0f} | {train / marian_train:.2f} |")
    generation_ratio = generate / marian_generate
    print(f"| beam-5 generation sentences/s | {marian_generate:.1f} | {generate:.1f} | {generation_ratio:.2f} |")
    print(
        f"| peak training memory (MiB) | {marian_memory / 2**20:,.0f} | {memory / 2**20:,.0f} "
        f"| {memory / marian_memory:.2f} |"
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
