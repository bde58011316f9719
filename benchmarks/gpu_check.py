"""The GPU check of the Triton kernel (issue 19): is it right, how fast, how much memory. Under 5 minutes on one GPU.

    python benchmarks/gpu_check.py [--lengths 256 512 1024 2048 4096] [--presets small base] [--repeats 5]
        [--sections correctness attention training positions] [--markdown docs/gpu-design.md]

1. correctness: the Triton kernel (`hf_entmax.kernels.triton_attention.entmax_attention`) and the PyTorch CUDA path
   (scores in float32, `hf_entmax.entmax`, values), outputs and the gradients to the query, key, value and α, against
   the float64 PyTorch implementation on the same inputs: cross-attention with key padding and α = 1, 1.001, 1.5, 2
   per head; causal self-attention; new queries on cached keys; one query (decoding); fully masked rows; float32,
   bfloat16, float16. Largest error relative to the largest entry, and whether it is within the interpreter tests'
   bounds (tests/test_triton_attention_interpreted.py).
2. attention: forward + backward of (4, 8, L, 64) bfloat16 attention with a learned α per head (in [1.1, 1.9]) by
   the Triton kernel, SDPA restricted to FlashAttention and the PyTorch path, as times, ratios and peak memory.
3. training: tokens/s of the `small` and `base` presets (`hf-entmax train`'s models, bench_speed's batches: 64 pairs of
   10–25 tokens, forward, backward and AdamW, bfloat16 autocast) on the Triton kernel, the PyTorch path and
   `MarianMTModel` with SDPA (same architecture and weights), attention dropout 0 for all three: the kernel has none
   (with it, the model's attention takes the PyTorch path).
4. positions: the first preset with sinusoidal, RoPE, ALiBi and NAPE positions (same weights, attention dropout 0):
   the logits by the Triton kernel against the PyTorch path (float32, evaluation), and training tokens/s on both as
   ratios to sinusoidal. ALiBi and NAPE reach the kernel as a per-head bias in its additive mask.

Where no CUDA device is present it says so and exits (status 0). ``TRITON_INTERPRET=1 python benchmarks/gpu_check.py
--dry-run`` runs every section at toy sizes on CPU tensors in Triton's interpreter (the route opened to CPU tensors,
the native kernel set aside), to check the script where there is no GPU; its numbers mean nothing.
``--markdown FILE...`` puts the tables between their markers (``table:gpu-check-correctness``, ``-attention``,
``-training``, ``-positions``).
"""

import argparse
import contextlib
import os
import platform
import sys
import time
from pathlib import Path

import torch
from bench_speed import (
    Report,
    cli_default_model,
    median_seconds,
    model_batch,
    position_twin,
    sdpa_twin,
    training_step,
)
from tables import measured_command, write_tables
from torch.nn.functional import scaled_dot_product_attention

from hf_entmax import entmax
from hf_entmax.kernels import dispatch
from hf_entmax.modeling import modeling_adaptive_entmax_marian as modeling
from hf_entmax.modeling.entmax import EntmaxFunction


# As tests/test_triton_attention_interpreted.py derives them: relative to the largest entry compared.
TOLERANCE = {torch.float32: 1e-5, torch.float16: 8 * 2.0**-11, torch.bfloat16: 8 * 2.0**-8}
GRADIENTS = ("query", "key", "value", "alpha")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def triton_switch(on: bool):
    """``HF_ENTMAX_TRITON`` set to 1 (``on``) or unset, as the model's attention reads it at every call."""
    saved = os.environ.pop(dispatch.TRITON_SWITCH, None)
    if on:
        os.environ[dispatch.TRITON_SWITCH] = "1"
    try:
        yield
    finally:
        os.environ.pop(dispatch.TRITON_SWITCH, None)
        if saved is not None:
            os.environ[dispatch.TRITON_SWITCH] = saved


def peak_memory(step, device: torch.device) -> float | None:
    """The peak of CUDA memory allocated while ``step`` runs once, above what was allocated before (MiB); None on
    the CPU."""
    if device.type != "cuda":
        step()
        return None
    synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    step()
    synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 2**20


def causal_mask(query_len: int, key_len: int, device: torch.device) -> torch.Tensor:
    """(Lq, Lk) additive: query i sees key j ≤ i + Lk − Lq, as the kernel's ``causal=True``."""
    later = torch.arange(key_len, device=device)[None, :] > torch.arange(query_len, device=device)[:, None] + (
        key_len - query_len
    )
    return torch.zeros(query_len, key_len, device=device).masked_fill(later, float("-inf"))


def pytorch_attention(query, key, value, alpha, mask=None, causal=False, compute=torch.float32):
    """The PyTorch path, composed as the model's attention composes it: scores in ``compute`` (float32 for half
    precision inputs), the additive mask, `hf_entmax.entmax` (on CUDA: the PyTorch implementation), values."""
    scores = torch.matmul(query.to(compute), key.to(compute).transpose(-1, -2))  # (B, H, Lq, Lk)
    if mask is not None:
        scores = scores + mask.to(compute)
    if causal:
        scores = scores + causal_mask(scores.shape[-2], scores.shape[-1], scores.device).to(compute)
    probs = entmax(scores, alpha.view(1, -1, 1, 1), dim=-1, check_alpha=False).to(value.dtype)
    return torch.matmul(probs, value)


def reference_attention(query, key, value, alpha, mask=None, causal=False):
    """float64, by the PyTorch implementation's autograd Function (the float64 reference of the tests)."""
    query, key, value, alpha = (tensor.double() for tensor in (query, key, value, alpha))
    scores = query @ key.transpose(-1, -2)
    if mask is not None:
        scores = scores + mask.double().masked_fill(mask <= torch.finfo(mask.dtype).min, float("-inf"))
    if causal:
        scores = scores + causal_mask(scores.shape[-2], scores.shape[-1], scores.device).double()
    return EntmaxFunction.apply(scores, alpha.view(1, -1, 1, 1), 3) @ value


def padding_mask(batch: int, key_len: int, lengths: list[int], device: torch.device) -> torch.Tensor:
    """(B, 1, 1, Lk): 0 on each sequence's first ``lengths[b]`` keys, float32's lowest value after (Marian's)."""
    padded = torch.arange(key_len, device=device)[None, :] >= torch.tensor(lengths, device=device)[:, None]
    mask = torch.zeros(batch, 1, 1, key_len, device=device)
    return mask.masked_fill(padded[:, None, None, :], torch.finfo(torch.float32).min)


def correctness_cases(device: torch.device, toy: bool) -> list[tuple[str, dict]]:
    """``(title, inputs)`` with ``inputs`` for `pytorch_attention`/`entmax_attention`: query, key, value, alpha (one
    per head), mask, causal."""
    lengths = (20, 37) if toy else (77, 100)
    head_dim = 16 if toy else 64
    generator = torch.Generator(device=device).manual_seed(0)

    def inputs(batch, heads, query_len, key_len, alpha, mask=None, causal=False):
        query = torch.randn(batch, heads, query_len, head_dim, device=device, generator=generator) * 1.5
        query = query * head_dim**-0.25  # scaled scores with a spread of ~1.5: dense to sparse rows
        key, value = (torch.randn(batch, heads, key_len, head_dim, device=device, generator=generator) for _ in "kv")
        key = key * head_dim**-0.25
        alpha = torch.tensor(alpha, device=device)
        return dict(query=query, key=key, value=value, alpha=alpha, mask=mask, causal=causal)

    query_len, key_len = lengths
    empty_rows = torch.zeros(2, 1, query_len, key_len, device=device)
    empty_rows[0, :, 3] = float("-inf")
    empty_rows[1] = torch.finfo(torch.float32).min
    return [
        (
            "cross-attention, key padding, α = 1, 1.001, 1.5, 2",
            inputs(2, 4, query_len, key_len, [1.0, 1.001, 1.5, 2.0], padding_mask(2, key_len, [key_len, 23], device)),
        ),
        ("causal self-attention", inputs(2, 2, key_len, key_len, [1.2, 1.7], causal=True)),
        ("5 new queries on cached keys, causal", inputs(2, 2, 5, key_len, [1.2, 1.7], causal=True)),
        (
            "one query (decoding), key padding",
            inputs(2, 2, 1, key_len, [1.1, 1.6], padding_mask(2, key_len, [9, 30], device)),
        ),
        ("fully masked rows", inputs(2, 2, query_len, key_len, [1.3, 1.8], empty_rows)),
    ]


def relative_errors(attention, inputs: dict, dtype: torch.dtype) -> list[float]:
    """The largest error of the output and of each gradient, relative to the largest entry of the float64 reference
    (at least 1), for ``attention`` on ``inputs`` cast to ``dtype`` (the reference takes the same rounded values)."""
    leaves = [inputs[name].detach().to(dtype if name != "alpha" else torch.float32) for name in GRADIENTS]
    leaves = [leaf.requires_grad_() for leaf in leaves]
    output = attention(*leaves, inputs["mask"], inputs["causal"])
    upstream = torch.randn(output.shape, device=output.device, generator=torch.Generator(output.device).manual_seed(1))
    grads = torch.autograd.grad(output, leaves, upstream.to(output.dtype))
    reference_leaves = [leaf.detach().double().requires_grad_() for leaf in leaves]
    expected = reference_attention(*reference_leaves, inputs["mask"], inputs["causal"])
    expected_grads = torch.autograd.grad(expected, reference_leaves, upstream.to(output.dtype).double())
    errors = []
    for actual, reference in zip((output, *grads), (expected, *expected_grads), strict=True):
        error = (actual.double() - reference).abs().max().item()  # NaN stays NaN, and fails the check
        errors.append(error / max(reference.abs().max().item(), 1.0))
    return errors


def check_correctness(report: Report, device: torch.device, toy: bool) -> bool:
    from hf_entmax.kernels.triton_attention import entmax_attention

    report("\n#### Correctness against the float64 PyTorch implementation\n")
    report("Largest error relative to the largest entry (≥ 1) of the reference, output and gradients.\n")
    report("| case | implementation | dtype | output | d query | d key | d value | d α | within bound |")
    report("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    implementations = {"Triton kernel": entmax_attention, "PyTorch path": pytorch_attention}
    all_right = True
    for title, inputs in correctness_cases(device, toy):
        runs = [("Triton kernel", torch.float32), ("PyTorch path", torch.float32)]
        if title.startswith("cross-attention"):
            runs += [("Triton kernel", torch.bfloat16), ("Triton kernel", torch.float16)]
        for name, dtype in runs:
            errors = relative_errors(implementations[name], inputs, dtype)
            right = all(error <= TOLERANCE[dtype] for error in errors)  # False for NaN
            all_right &= right
            cells = " | ".join(f"{error:.1e}" for error in errors)
            dtype_name = str(dtype).removeprefix("torch.")
            report(f"| {title} | {name} | {dtype_name} | {cells} | {'yes' if right else 'NO'} |")
    return all_right


def attention_step(attention, inputs: dict):
    """A step that runs ``attention`` forward and backward on fresh leaves of ``inputs``."""
    upstream = torch.randn_like(inputs["query"])

    def step():
        leaves = [inputs[name].detach().requires_grad_() for name in GRADIENTS]
        attention(*leaves).backward(upstream)

    return step


def bench_attention(report: Report, device: torch.device, lengths: list[int], repeats: int, toy: bool) -> None:
    from hf_entmax.kernels.triton_attention import entmax_attention

    batch, heads, head_dim = (1, 2, 16) if toy else (4, 8, 64)
    dtype = torch.float32 if toy else torch.bfloat16  # FlashAttention takes half precision
    report(f"\n#### Attention forward + backward, ({batch}, {heads}, L, {head_dim}) {str(dtype)[6:]}, learned α\n")
    report("| L | causal | ms SDPA (Flash) | ms Triton | ms PyTorch | Triton / SDPA | PyTorch / Triton "
           "| peak MiB SDPA / Triton / PyTorch |")  # fmt: skip
    report("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    backends = [torch.nn.attention.SDPBackend.FLASH_ATTENTION] if device.type == "cuda" else None
    for length in lengths:
        generator = torch.Generator(device=device).manual_seed(length)
        query, key, value = (
            torch.randn(batch, heads, length, head_dim, device=device, generator=generator, dtype=dtype)
            for _ in range(3)
        )
        inputs = dict(
            query=query * head_dim**-0.5, key=key, value=value, alpha=torch.linspace(1.1, 1.9, heads, device=device)
        )
        for causal in (False, True):

            def sdpa(query, key, value, alpha, causal=causal):  # softmax: α unused; the query is scaled already
                with torch.nn.attention.sdpa_kernel(backends) if backends else contextlib.nullcontext():
                    return scaled_dot_product_attention(query, key, value, is_causal=causal, scale=1.0)

            variants = [
                sdpa,
                lambda q, k, v, a, causal=causal: entmax_attention(q, k, v, a, causal=causal),
                lambda q, k, v, a, causal=causal: pytorch_attention(q, k, v, a, causal=causal),
            ]
            steps = [attention_step(variant, inputs) for variant in variants]
            synced = [lambda step=step: (step(), synchronize(device)) for step in steps]
            seconds = median_seconds(synced, repeats)
            memory = [peak_memory(step, device) for step in steps]
            flash, triton_seconds, pytorch_seconds = (1000 * second for second in seconds)
            memory_text = " / ".join("n/a" if peak is None else f"{peak:,.0f}" for peak in memory)
            report(
                f"| {length} | {'yes' if causal else 'no'} | {flash:.2f} | {triton_seconds:.2f} | "
                f"{pytorch_seconds:.2f} | {triton_seconds / flash:.2f} | {pytorch_seconds / triton_seconds:.1f} "
                f"| {memory_text} |"
            )
            del steps, synced


def count_triton_calls():
    """A counter of the model's calls into the Triton kernel (through `dispatch.native_entmax_attention`, which looks
    `entmax_attention` up in its module at each call), and the function that stops counting."""
    from hf_entmax.kernels import triton_attention

    calls = []
    original = triton_attention.entmax_attention
    triton_attention.entmax_attention = lambda *args, **kwargs: calls.append(1) or original(*args, **kwargs)

    def stop():
        triton_attention.entmax_attention = original

    return calls, stop


def training_variant(model, batches: list[dict], device: torch.device, triton_on: bool, autocast: bool):
    """A training step of ``model`` on ``batches`` (its own AdamW), with the Triton kernel turned on or off, in
    bfloat16 autocast (``autocast``), that waits for the device."""
    step = training_step(model, torch.optim.AdamW(model.parameters(), lr=1e-4), batches)

    def run():
        with triton_switch(triton_on), torch.autocast(device.type, torch.bfloat16, enabled=autocast):
            step()
        synchronize(device)

    return run


def bench_training(report: Report, device: torch.device, presets: list[str], repeats: int, toy: bool) -> None:
    report("\n#### Training tokens/s (forward, backward, AdamW), attention dropout 0\n")
    autocast = "bfloat16 autocast" if device.type == "cuda" else "float32"
    batch_count, batch_size = (1, 4) if toy else (4, 64)
    report(f"bench_speed's batches ({batch_count} × {batch_size} pairs of 10–25 tokens a side), {autocast}.\n")
    report("| preset | MarianMTModel (SDPA) | α-entmax, Triton | α-entmax, PyTorch | Triton / SDPA | Triton / PyTorch "
           "| peak MiB SDPA / Triton / PyTorch |")  # fmt: skip
    report("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for preset in presets:
        model, _ = cli_default_model(preset)
        for module in model.modules():  # the kernel has no attention dropout
            if isinstance(module, modeling.AdaptiveEntmaxMarianAttention):
                module.dropout = 0.0
        model.config.attention_dropout = 0.0
        marian = sdpa_twin(model)
        model, marian = model.to(device), marian.to(device)
        batches = [
            {name: tensor.to(device) for name, tensor in model_batch(model.config, seed, batch_size).items()}
            for seed in range(batch_count)
        ]
        tokens = sum(int(batch["attention_mask"].sum() + (batch["labels"] != -100).sum()) for batch in batches)

        steps = [
            training_variant(trained, batches, device, triton_on, autocast=not toy)
            for trained, triton_on in ((marian, False), (model, True), (model, False))
        ]
        calls, stop_counting = count_triton_calls()
        steps[1]()
        stop_counting()
        if not calls:
            raise RuntimeError(f"{preset}: the model's attention never reached the Triton kernel; see describe()")
        seconds = median_seconds(steps, repeats)
        memory = [peak_memory(step, device) for step in steps]
        sdpa_rate, triton_rate, pytorch_rate = (tokens / second for second in seconds)
        memory_text = " / ".join("n/a" if peak is None else f"{peak:,.0f}" for peak in memory)
        rates = f"{sdpa_rate:,.0f} | {triton_rate:,.0f} | {pytorch_rate:,.0f}"
        ratios = f"{triton_rate / sdpa_rate:.2f} | {triton_rate / pytorch_rate:.2f}"
        report(f"| {preset} | {rates} | {ratios} | {memory_text} |")
        del model, marian, steps
        if device.type == "cuda":
            torch.cuda.empty_cache()


def bench_positions(report: Report, device: torch.device, preset: str, repeats: int, toy: bool) -> bool:
    """Each position type on the ``preset`` model (same weights, attention dropout 0): the logits by the Triton kernel
    against the PyTorch path (float32, evaluation; largest error relative to the largest logit), and training tokens/s
    on both in bfloat16 autocast, as ratios to sinusoidal positions. ALiBi and NAPE reach the kernel as an additive
    per-head bias in the mask."""
    report(f"\n#### Position types, `{preset}` preset, training (forward, backward, AdamW), attention dropout 0\n")
    batch_count, batch_size = (1, 4) if toy else (4, 64)
    report(f"bench_speed's batches ({batch_count} × {batch_size} pairs of 10–25 tokens a side).\n")
    report("| positions | logits error, Triton vs PyTorch (float32) | Triton tokens/s | × sinusoidal "
           "| PyTorch tokens/s | × sinusoidal |")  # fmt: skip
    report("| --- | ---: | ---: | ---: | ---: | ---: |")
    model, _ = cli_default_model(preset)
    model.config.attention_dropout = 0.0
    batches = [
        {name: tensor.to(device) for name, tensor in model_batch(model.config, seed, batch_size).items()}
        for seed in range(batch_count)
    ]
    tokens = sum(int(batch["attention_mask"].sum() + (batch["labels"] != -100).sum()) for batch in batches)
    # Each attention layer adds its own float32 error (the correctness section's bound) to the residual stream.
    config = model.config
    bound = TOLERANCE[torch.float32] * (config.encoder_layers + 2 * config.decoder_layers)
    kinds = ("sinusoidal", "rope", "alibi", "nape")
    errors, steps = [], []
    for kind in kinds:
        twin = (model if kind == "sinusoidal" else position_twin(model, kind)).to(device)
        for module in twin.modules():  # the kernel has no attention dropout
            if isinstance(module, modeling.AdaptiveEntmaxMarianAttention):
                module.dropout = 0.0
        logits = []
        for triton_on in (True, False):
            calls, stop_counting = count_triton_calls()
            with triton_switch(triton_on), torch.no_grad():
                twin.eval()  # no dropout: both paths see the same network
                logits.append(twin(**batches[0]).logits.double())
            stop_counting()
            if triton_on and not calls:
                raise RuntimeError(f"{kind}: the model's attention never reached the Triton kernel; see describe()")
        errors.append(((logits[0] - logits[1]).abs().max() / logits[1].abs().max()).item())
        steps += [training_variant(twin, batches, device, triton_on, autocast=not toy) for triton_on in (True, False)]
    # One interleaved measurement of all eight steps, so that a slow spell of the machine hits every ratio alike.
    rates = [tokens / second for second in median_seconds(steps, repeats)]
    for index, (kind, error) in enumerate(zip(kinds, errors, strict=True)):
        triton_rate, pytorch_rate = rates[2 * index], rates[2 * index + 1]
        report(
            f"| {kind} | {error:.1e}{'' if error <= bound else ' NO'} | {triton_rate:,.0f} "
            f"| {triton_rate / rates[0]:.3f} | {pytorch_rate:,.0f} | {pytorch_rate / rates[1]:.3f} |"
        )
    return all(error <= bound for error in errors)  # False for NaN


SECTIONS = ("correctness", "attention", "training", "positions")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", nargs="+", type=int, default=[256, 512, 1024, 2048, 4096])
    parser.add_argument("--presets", nargs="+", default=["small", "base"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--markdown", nargs="+", type=Path, help="Also put the tables into these Markdown files.")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="Every section at toy sizes on CPU tensors in Triton's interpreter (needs TRITON_INTERPRET=1).",
    )
    arguments = parser.parse_args()
    if arguments.dry_run:
        if os.environ.get("TRITON_INTERPRET") != "1":
            print("gpu_check: --dry-run needs TRITON_INTERPRET=1 (Triton's interpreter runs the kernel on the CPU)")
            return 2
        if arguments.markdown:
            print("gpu_check: --dry-run's numbers mean nothing; it writes no tables")
            return 2
        device = torch.device("cpu")
        # The interpreter's tensors take the Triton route (instead of the native kernel's), and where it declines
        # the composed PyTorch path, as on a GPU.
        dispatch.TRITON_DEVICE_TYPES = ("cpu",)
        lengths, presets, repeats = [32, 64], ["tiny"], 1
    elif not torch.cuda.is_available():
        print(
            "gpu_check: no CUDA device here, nothing to measure. The Triton kernel's correctness tests run on the CPU "
            "in Triton's interpreter (tests/test_triton_attention.py); `TRITON_INTERPRET=1 python "
            "benchmarks/gpu_check.py --dry-run` checks this script."
        )
        return 0
    else:
        device = torch.device("cuda")
        lengths, presets, repeats = arguments.lengths, arguments.presets, arguments.repeats
    import triton

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({platform.machine()}), interpreted"
    report = Report(f"{name}, torch {torch.__version__}, triton {triton.__version__}")
    with triton_switch(True):  # the route with HF_ENTMAX_TRITON=1, as describe() gives it
        report(next(line for line in dispatch.describe().splitlines() if "on CUDA tensors" in line))
    start = time.perf_counter()
    right = True
    for section in arguments.sections:
        report.section(f"gpu-check-{section}")
        if section == "correctness":
            right &= check_correctness(report, device, toy=arguments.dry_run)
        elif section == "attention":
            bench_attention(report, device, lengths, repeats, toy=arguments.dry_run)
        elif section == "training":
            bench_training(report, device, presets, repeats, toy=arguments.dry_run)
        else:
            right &= bench_positions(report, device, presets[0], repeats, toy=arguments.dry_run)
        print(f"({time.perf_counter() - start:.0f} s)", flush=True)
    if arguments.markdown:
        command = measured_command("gpu_check.py")
        measured = f"Measured on {time.strftime('%Y-%m-%d')} ({report.header}) with `{command}`."
        tables = {name: "\n".join([*lines, "", measured]) for name, lines in report.sections.items()}
        write_tables(arguments.markdown, tables)
    if not right:
        print("gpu_check: some errors are above their bounds (the lines marked NO)")
    return 0 if right else 1


if __name__ == "__main__":
    sys.exit(main())
