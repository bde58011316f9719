"""Speed of the α-entmax mapping, forward + backward, as ratios to softmax measured in the same run.

    python benchmarks/bench_mapping.py [--repeats 5] [--shapes 8,8,64,64 4,8,256,256 1,8,1024,1024]

Scores are float32 with a realistic spread (std 2); the learnable α is one per head in [1.1, 1.9].
Each entry is the median of ``--repeats`` timed runs after a warm-up; the table prints time per call
and the ratio to ``torch.softmax`` forward + backward on the same tensor. Needs the `entmax` package
(the paper authors' implementation) as the baseline.
"""

import argparse
import platform
import statistics
import time

import entmax as entmax_reference
import torch

from hf_entmax import entmax, entmax15, sparsemax


def time_forward_backward(mapping, scores: torch.Tensor, alpha: torch.Tensor | None, repeats: int) -> float:
    """Median seconds of ``mapping`` forward plus backward (to the scores and, if given, α)."""
    upstream = torch.randn_like(scores)

    def step():
        scores.grad = None
        if alpha is not None:
            alpha.grad = None
        probabilities = mapping(scores, alpha) if alpha is not None else mapping(scores)
        (probabilities * upstream).sum().backward()

    step()  # warm-up
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        timings.append(time.perf_counter() - start)
    return statistics.median(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shapes", nargs="+", default=["8,8,64,64", "4,8,256,256", "1,8,1024,1024"])
    arguments = parser.parse_args()

    machine = platform.processor() or platform.machine()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {machine}")
    print()
    print("| shape (B, H, Lq, Lk) | mapping | ms | × softmax |")
    print("| --- | --- | ---: | ---: |")
    torch.manual_seed(0)
    for shape_text in arguments.shapes:
        shape = tuple(int(size) for size in shape_text.split(","))
        scores = (2 * torch.randn(shape)).requires_grad_()
        heads = shape[1]
        learned_alpha = (1.1 + 0.8 * torch.rand(1, heads, 1, 1)).requires_grad_()
        candidates = {
            "torch.softmax": (lambda z: torch.softmax(z, dim=-1), None),
            "hf_entmax.entmax, learnable α per head": (entmax, learned_alpha),
            "entmax.entmax_bisect, learnable α per head": (entmax_reference.entmax_bisect, learned_alpha),
            "hf_entmax.entmax15": (entmax15, None),
            "entmax.entmax15": (entmax_reference.entmax15, None),
            "hf_entmax.sparsemax": (sparsemax, None),
            "entmax.sparsemax": (entmax_reference.sparsemax, None),
        }
        baseline = None
        for name, (mapping, alpha) in candidates.items():
            seconds = time_forward_backward(mapping, scores, alpha, arguments.repeats)
            baseline = baseline or seconds
            print(f"| {shape} | {name} | {1000 * seconds:.1f} | {seconds / baseline:.1f} |")


if __name__ == "__main__":
    main()
