"""Look inside a run of bench_length_decoder_only.py kept with ``--save_models``: where each head's attention goes,
and where the wrong strings first go wrong.

    python benchmarks/inspect_length_decoder_only.py RUN [--multiples 1 4 16] [--head_strings 8] [--threads 1]

``RUN`` is a run folder, ``<output_dir>/<task>/<positions>/<variant>/seed<N>``, holding the run's ``result.json``
and its kept ``model/``. At each multiple of the run's longest training string (by default those it was tested at)
the script reads the run's own test strings (the benchmark's strings for its ``--test_seed`` and counts, so that the
errors are those behind its table) and prints two Markdown tables:

- **heads**, on the first ``--head_strings`` strings read with the right answer as input (teacher forcing), over the
  positions that predict the answer: per layer and head, its position term (ALiBi with its slope, none, RoPE) and
  whether its queries are length-scaled (SSMax, ASEntmax), how many keys its attention keeps on average (the support
  size; every key it can see for softmax) and how many it sees, and the shares of its attention on ``<bos>``, on the
  source's copies of the symbol to write next and on the answer's copies, so far, of the symbol written last. A head
  that retrieves keeps a few keys whatever the length; one that averages keeps a share of all it sees.
- **errors**, on every test string decoded greedily as the benchmark does: how many are wrong, and each wrong one's
  first wrong position sorted into one kind: it *stops early* (writes ``<eos>``); it *ends a run early* (the answer
  repeats the symbol just written and the output moves on; with how many of the run's copies were written); it *runs
  on* (writes the symbol just written once more); for copy and reverse it *jumps to another copy* (writes the symbol
  next to another copy, in the source, of the symbol just written, the next one in the source for copy, the one
  before it for reverse: a lookup by content that found the wrong copy); or *other*.
"""

import argparse
import collections
import json
from pathlib import Path

import bench_length_decoder_only as bench
import length_runs
import torch
from runs import add_threads_option, stop_in_one_line

from hf_entmax import AdaptiveEntmaxMarianForCausalLM
from hf_entmax.modeling.modeling_adaptive_entmax_marian import AdaptiveEntmaxMarianAttention


# Where the copy a content lookup goes to sits in the source, from the copy of the symbol just written.
NEXT_IN_SOURCE = {"copy": 1, "reverse": -1}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a run folder: <output_dir>/<task>/<positions>/<variant>/seed<N>")
    parser.add_argument("--multiples", nargs="+", type=int, help="test lengths, in multiples of the longest training")
    parser.add_argument("--head_strings", type=int, default=8, help="strings the heads table is read on, per length")
    add_threads_option(parser)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    return parser


def load_run(run: Path, fail) -> tuple[str, argparse.Namespace, AdaptiveEntmaxMarianForCausalLM]:
    """``(task, settings, model)`` of a run folder: its task from the folder's place in the benchmark's layout, the
    benchmark's arguments with the run's settings (`result.json`), and its kept model in evaluation mode."""
    result_file, kept = run / "result.json", run / "model"
    if not result_file.is_file():
        fail(
            f"{result_file} does not exist: RUN is a run folder of bench_length_decoder_only.py, "
            "<output_dir>/<task>/<positions>/<variant>/seed<N>"
        )
    if not kept.is_dir():
        fail(f"{kept} does not exist: the run was trained without --save_models, so there is no model to look into")
    folders = run.resolve().parts
    task = folders[-4] if len(folders) >= 4 else ""
    if task not in bench.TASKS:
        fail(f"{run} is not in a task's folder ({task!r} is not one of {', '.join(bench.TASKS)})")
    try:
        settings = json.loads(result_file.read_text())["settings"]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        fail(f"{result_file} is not a run's result (no 'settings': {error})")
    arguments = bench.parse_arguments(["--tasks", task])
    for name in bench.SETTINGS:
        if name in settings:
            setattr(arguments, name, settings[name])
    return task, arguments, AdaptiveEntmaxMarianForCausalLM.from_pretrained(kept).eval()


def head_labels(model: AdaptiveEntmaxMarianForCausalLM) -> list[list[str]]:
    """Per layer and head: its position term, and ``scaled`` where its queries are length-scaled."""
    labels = []
    for module in model.modules():
        if not isinstance(module, AdaptiveEntmaxMarianAttention) or module.attention_type != "decoder_self":
            continue
        heads = module.num_heads
        slopes = module.alibi_slopes or (0.0,) * heads
        rope = module.position_type == "rope"
        positions = [f"ALiBi {slope:.3g}" if slope else ("RoPE" if rope else "none") for slope in slopes]
        scaled = [module.scaling_method != "none"] * heads if module.scaled_heads is None else module.scaled_heads
        labels.append(
            [
                position + (", scaled" if is_scaled else "")
                for position, is_scaled in zip(positions, scaled, strict=True)
            ]
        )
    return labels


@torch.inference_mode()
def heads_table(model, pairs: list, labels: list[list[str]]) -> list[str]:
    """The heads table (see the module's docstring) on ``pairs``, read one string at a time (a string's attention
    weights, layers × heads × its length², are the memory this needs)."""
    sums = torch.zeros(len(labels), len(labels[0]), 5, dtype=torch.float64)  # (layers, heads, figures)
    positions = 0
    for source, target in pairs:
        batch = bench.training_batch([(source, target)])
        ids = batch["input_ids"][0]
        output = model(input_ids=batch["input_ids"].to(model.device), output_attentions=True)
        first = len(source) + 1  # the <sep>, which predicts the answer's first symbol
        queries = torch.arange(first, len(ids) - 1)  # each predicts ids[query + 1]
        to_write, written = ids[queries + 1], ids[queries]
        in_source = torch.zeros(len(ids), dtype=torch.bool)
        in_source[1 : len(source) + 1] = True
        in_answer = torch.arange(len(ids)) > first
        source_next = (in_source & (ids[None, :] == to_write[:, None])).double()  # (queries, keys)
        answer_last = (in_answer & (ids[None, :] == written[:, None])).double()
        for layer, weights in enumerate(output.attentions):
            rows = weights[0, :, queries].cpu().double()  # (heads, queries, keys)
            sums[layer] += torch.stack(
                [
                    (rows > 0).sum(dim=(1, 2)).double(),
                    (queries + 1).double().sum().expand(len(rows)),  # keys a query sees under the causal mask
                    rows[:, :, 0].sum(dim=1),
                    (rows * source_next).sum(dim=(1, 2)),
                    (rows * answer_last).sum(dim=(1, 2)),
                ],
                dim=1,
            )
        positions += len(queries)
    lines = [
        "| layer | head | position | keys kept | keys seen | `<bos>` | next symbol in source "
        "| last symbol in answer |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for layer, figures in enumerate((sums / positions).tolist()):
        for head, (kept, seen, bos, source_next, answer_last) in enumerate(figures):
            lines.append(
                f"| {layer} | {head} | {labels[layer][head]} | {kept:.1f} | {seen:.0f} | {bos:.1%} "
                f"| {source_next:.1%} | {answer_last:.1%} |"
            )
    return lines


def symbol(token: int) -> str:
    """A token as the task's symbol (the task's numbering, before `samples` shifts it past the special tokens)."""
    special = {bench.PAD: "<pad>", bench.BOS: "<bos>", bench.SEP: "<sep>", bench.EOS: "<eos>"}
    return special.get(token, str(token - bench.FIRST_SYMBOL))


def first_error(task: str, source: torch.Tensor, answer: torch.Tensor, output: torch.Tensor) -> tuple[str, str] | None:
    """``(kind, where)`` of a string's first wrong position (the kinds: see the module's docstring), or None when
    ``output`` is ``answer``; ``source`` is the prompt's string, ``answer`` the target and its ``<eos>``."""
    compared = torch.full_like(answer, bench.PAD)
    compared[: min(len(output), len(answer))] = output[: len(answer)]
    wrong = (compared != answer).nonzero()
    if len(wrong) == 0:
        return None
    at = int(wrong[0])
    expected, wrote = int(answer[at]), int(compared[at])
    where = f"at {at + 1} of {len(answer)}: expected {symbol(expected)}, wrote {symbol(wrote)}"
    last = int(answer[at - 1]) if at else None
    if wrote == bench.EOS:
        return "stops early", where
    if expected == last:
        return "ends a run early", f"{where}; {int((answer[:at] == last).sum())} of {int((answer == last).sum())}"
    if wrote == last:
        return "runs on", where
    step = NEXT_IN_SOURCE.get(task)
    if step is not None and last is not None:
        copies = (source == last).nonzero().flatten() + step
        neighbours = {int(source[index]) for index in copies if 0 <= index < len(source)}
        if wrote in neighbours:
            return "jumps to another copy", where
    return "other", where


def errors_table(model, task: str, pairs: list, arguments: argparse.Namespace) -> list[str]:
    """The errors table (see the module's docstring) on ``pairs``, and one line per wrong string."""
    kinds, details, index = collections.Counter(), [], 0
    for prompts, answers, outputs in bench.decode_pairs(model, pairs, arguments):
        for prompt, answer, output in zip(prompts, answers, outputs, strict=True):
            error = first_error(task, prompt[1:-1], answer, output)
            kinds[error[0] if error else "right"] += 1
            if error:
                details.append(f"- string {index}: {error[0]} ({error[1]})")
            index += 1
    lines = ["| first error | strings |", "| --- | ---: |"]
    lines += [f"| {kind} | {count} |" for kind, count in kinds.most_common()]
    return [*lines, "", *details]


def main(argv=None) -> None:
    parser = build_parser()
    arguments = parser.parse_args(argv)
    if arguments.head_strings < 1:
        parser.error(f"--head_strings must be at least 1, got {arguments.head_strings}")
    if arguments.multiples and min(arguments.multiples) < 1:
        parser.error(f"--multiples are positive multiples of the longest training string, got {arguments.multiples}")
    length_runs.use_device(arguments, parser.error)
    task, settings, model = load_run(arguments.run, parser.error)
    model.to(arguments.device)
    labels = head_labels(model)
    for multiple in arguments.multiples or settings.test_multiples:
        length = multiple * settings.train_max_length
        pairs = bench.test_pairs(task, length, settings)
        print(f"## {multiple}× ({length} symbols), {arguments.run}\n")
        print(f"Heads, on {min(arguments.head_strings, len(pairs))} strings, teacher forced:\n")
        print("\n".join(heads_table(model, pairs[: arguments.head_strings], labels)) + "\n")
        print(f"First errors, {len(pairs)} strings decoded greedily:\n")
        print("\n".join(errors_table(model, task, pairs, settings)) + "\n", flush=True)


if __name__ == "__main__":
    stop_in_one_line(main)
