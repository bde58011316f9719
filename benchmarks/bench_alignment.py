"""Word alignments from cross-attention, measured: against gold on the synthetic pair, against eflomal on Multi30k.

    python benchmarks/bench_alignment.py synthetic --model adaptive=DIR --model softmax=DIR [--num_pairs 500]
    python benchmarks/bench_alignment.py multi30k --data_dir ../shared/data/multi30k \\
        --model adaptive=DIR --model softmax=DIR [--num_pairs 1000] [--markdown docs/alignment.md]

`synthetic`: the models are `hf-entmax demo` folders (the built-in English→Synthetic pair), aligned on the demo's held-
out test pairs, whose gold alignments the generator knows by construction (`generate_aligned_pairs`). `multi30k`: the
models translate de→en; the reference is `eflomal` (pip install eflomal), trained on the training split plus the
aligned test pairs, both directions symmetrised with grow-diag-final-and; AER "against eflomal" treats its links as
sure links.

For each model the table gives what `hf-entmax align` does by default (heads chosen without gold, each target word
linked to its most attended source word) and its speed (pairs/s, the model loaded), the same heads linked by their
exact support (`--threshold 0`), then the best any single head reaches with the best rule in hindsight (an oracle that
needs the gold), and how the gold-free head score agrees with the gold: the rank, among all (step, layer, head), of
the first head it picks.
"""

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

import torch
from runs import MULTI30K_SPLITS, add_threads_option, benchmark_log, use_threads
from tables import measured_command, write_tables

from hf_entmax.alignment.align import align_pairs
from hf_entmax.alignment.links import links_from_weights
from hf_entmax.alignment.pharaoh import alignment_scores, format_links, parse_links
from hf_entmax.alignment.words import QUERY_STEPS, word_cross_attention
from hf_entmax.analysis.inputs import load_analysable_model
from hf_entmax.training import synthetic


# Link rules tried for the oracle row: the support (0), the most attended word (None), and thresholds for softmax.
RULES = (0.0, None, 0.05, 0.1, 0.2, 0.3, 0.5)
# The synthetic split sizes of `hf-entmax demo` (its test pairs are the first ones the generator draws).
DEMO_VALIDATION_AND_TEST = 500


def rule_name(threshold: float | None) -> str:
    return "argmax" if threshold is None else ("support" if threshold == 0 else f"> {threshold:g}")


def synthetic_data(num_pairs: int, folder: Path) -> tuple[list[str], list[str], list[set]]:
    """The demo's first test pairs and their gold alignments, also written to ``folder`` as test.en, test.syn and
    test.gold (the files docs/alignment.md's example command reads)."""
    pairs = synthetic.generate_aligned_pairs(min(num_pairs, DEMO_VALIDATION_AND_TEST))
    files = {"test.en": [pair.source for pair in pairs], "test.syn": [pair.target for pair in pairs]}
    files["test.gold"] = [format_links(pair.alignment) for pair in pairs]
    for name, lines in files.items():
        (folder / name).write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return files["test.en"], files["test.syn"], [set(pair.alignment) for pair in pairs]


def grow_diag_final_and(forward: set, backward: set) -> set:
    """Koehn et al.'s symmetrisation of two directional alignments (links as (source, target))."""
    alignment = forward & backward
    union = forward | backward
    neighbours = [(-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1)]

    def aligned_source(i: int) -> bool:
        return any(link[0] == i for link in alignment)

    def aligned_target(j: int) -> bool:
        return any(link[1] == j for link in alignment)

    added = True
    while added:
        added = False
        for i, j in sorted(alignment):
            for di, dj in neighbours:
                link = (i + di, j + dj)
                new_word = not aligned_source(link[0]) or not aligned_target(link[1])
                if link in union and link not in alignment and new_word:
                    alignment.add(link)
                    added = True
    for directional in (forward, backward):
        for link in sorted(directional):
            if link not in alignment and not aligned_source(link[0]) and not aligned_target(link[1]):
                alignment.add(link)
    return alignment


def eflomal_data(data_dir: Path, num_pairs: int, folder: Path, log) -> tuple[list[str], list[str], list[set]]:
    """Multi30k's first test pairs and eflomal's alignments of them, kept in ``folder`` (test.de, test.en and
    test.eflomal) and read from there when the same pairs were aligned before."""

    def lines(split: str, language: str) -> list[str]:
        return (data_dir / f"{MULTI30K_SPLITS[split]}.{language}").read_text(encoding="utf-8").splitlines()

    sources, targets = lines("test", "de")[:num_pairs], lines("test", "en")[:num_pairs]
    reference = folder / "test.eflomal"
    kept = [folder / "test.de", folder / "test.en", reference]
    if all(path.exists() for path in kept) and [
        path.read_text(encoding="utf-8").splitlines() for path in kept[:2]
    ] == [sources, targets]:
        log(f"eflomal: the alignments of these {num_pairs} pairs in {reference}")
        return sources, targets, [parse_links(line, str(reference))[0] for line in reference.read_text().splitlines()]

    import eflomal

    corpus_sources = lines("train", "de") + sources
    corpus_targets = lines("train", "en") + targets
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as temporary:
        forward_file, backward_file = Path(temporary) / "forward", Path(temporary) / "backward"
        eflomal.Aligner().align(
            corpus_sources, corpus_targets, links_filename_fwd=str(forward_file), links_filename_rev=str(backward_file)
        )
        forward = forward_file.read_text().splitlines()[-num_pairs:]
        backward = backward_file.read_text().splitlines()[-num_pairs:]
    log(f"eflomal: {len(corpus_sources)} pairs aligned in {time.perf_counter() - started:.0f} s")
    gold = [
        grow_diag_final_and(parse_links(f, "eflomal")[0], parse_links(b, "eflomal")[0])
        for f, b in zip(forward, backward, strict=True)
    ]
    reference_lines = [format_links(sorted(links)) for links in gold]
    for path, text_lines in zip(kept, (sources, targets, reference_lines), strict=True):
        path.write_text("".join(f"{line}\n" for line in text_lines), encoding="utf-8")
    return sources, targets, gold


def evaluate_model(name: str, folder: str, sources, targets, gold, log) -> tuple[str, list[str]]:
    """The model's row of the summary table, and its per-head table (every step, layer and head)."""
    model, tokenizer = load_analysable_model(folder)
    started = time.perf_counter()
    default = align_pairs(model, tokenizer, sources, targets)
    seconds = time.perf_counter() - started
    default_scores = alignment_scores(default.links, gold)
    choice = default.choice
    step = QUERY_STEPS.index(choice.query_step)

    attentions = list(word_cross_attention(model, tokenizer, sources, targets))

    def aer(weights_of, rule) -> float:
        links = [links_from_weights(weights_of(attention), rule) for attention in attentions]
        return alignment_scores(links, gold).aer

    # The chosen heads with each link rule: the exact support, and the rule that is best in hindsight.
    layers = torch.tensor([layer for layer, _ in choice.heads])
    heads = torch.tensor([head for _, head in choice.heads])
    by_rule = {rule: aer(lambda attention: attention.weights[step, layers, heads].mean(0), rule) for rule in RULES}
    best_rule_for_chosen = min(by_rule, key=by_rule.get)

    head_scores = choice.scores  # (steps, layers, heads), on the first SELECTION_PAIRS pairs
    per_head = {}  # (step, layer, head) -> {rule: AER}
    for key in itertools.product(*map(range, head_scores.shape)):
        per_head[key] = {rule: aer(lambda attention, key=key: attention.weights[key], rule) for rule in RULES}
    best_of = {key: min(results.items(), key=lambda item: item[1]) for key, results in per_head.items()}
    ranked = sorted(per_head, key=lambda key: best_of[key][1])
    (best_step, best_layer, best_head) = ranked[0]
    rank = ranked.index((step, *choice.heads[0])) + 1
    chosen = "+".join(f"{layer}:{head}" for layer, head in choice.heads)
    row = (
        f"| {name} | {chosen} {choice.query_step} | {100 * default_scores.aer:.1f} "
        f"| {100 * default_scores.precision:.1f} | {100 * default_scores.recall:.1f} | {100 * by_rule[0.0]:.1f} "
        f"| {100 * by_rule[best_rule_for_chosen]:.1f} ({rule_name(best_rule_for_chosen)}) "
        f"| {best_layer}:{best_head} {QUERY_STEPS[best_step]}, {rule_name(best_of[ranked[0]][0])} "
        f"| {100 * best_of[ranked[0]][1]:.1f} | {rank} of {len(ranked)} | {len(sources) / seconds:.0f} |"
    )
    head_rows = [
        f"| {name} | {QUERY_STEPS[key[0]]} | {key[1]}:{key[2]} | {float(head_scores[key]):.2f} "
        f"| {100 * per_head[key][None]:.1f} | {100 * per_head[key][0.0]:.1f} "
        f"| {100 * best_of[key][1]:.1f} ({rule_name(best_of[key][0])}) |"
        for key in sorted(per_head, key=lambda key: -float(head_scores[key]))
    ]
    for line in head_rows:
        log(line)
    return row, head_rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", choices=("synthetic", "multi30k"))
    parser.add_argument("--model", action="append", required=True, metavar="NAME=DIR", help="a model to align with")
    parser.add_argument("--data_dir", type=Path, help="Multi30k's folder (multi30k only)")
    parser.add_argument("--num_pairs", type=int, default=500, help="test pairs to align")
    parser.add_argument("--output_dir", type=Path, default=Path("benchmarks/outputs/alignment"))
    parser.add_argument("--markdown", nargs="*", default=[], help="files to write the table into")
    add_threads_option(parser)
    arguments = parser.parse_args()
    use_threads(arguments)
    models = dict(entry.split("=", 1) for entry in arguments.model)
    command = measured_command("bench_alignment.py")
    with benchmark_log(arguments.output_dir, command, vars(arguments), torch.__config__.parallel_info()[:60]) as log:
        if arguments.data == "synthetic":
            sources, targets, gold = synthetic_data(arguments.num_pairs, arguments.output_dir)
            reference = "gold"
        else:
            sources, targets, gold = eflomal_data(arguments.data_dir, arguments.num_pairs, arguments.output_dir, log)
            reference = "eflomal"
        rows = [
            f"| model | `hf-entmax align`: heads, step | AER vs {reference} | precision | recall "
            "| AER, same heads, `--threshold 0` | … best rule in hindsight | best single head in hindsight, rule "
            "| its AER | rank of the first chosen head | pairs/s |",
            "|---|---|---:|---:|---:|---:|---|---|---:|---|---:|",
        ]
        head_rows = [
            "| model | step | head | score (nats) | AER, most attended word | AER, support | AER, best rule |",
            "|---|---|---|---:|---:|---:|---|",
        ]
        for name, folder in models.items():
            row, model_head_rows = evaluate_model(name, folder, sources, targets, gold, log)
            rows.append(row)
            head_rows += model_head_rows
        caption = f"\n\n{len(sources)} {arguments.data} test pairs; `{command}`"
        tables = {
            f"alignment-{arguments.data}": "\n".join(rows) + caption,
            f"alignment-{arguments.data}-heads": "\n".join(head_rows) + caption,
        }
        log(tables[f"alignment-{arguments.data}"])
        if arguments.markdown:
            write_tables(arguments.markdown, tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
