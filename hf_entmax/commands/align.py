"""`hf-entmax align`: word alignments from a translation model's cross-attention, in the Pharaoh format.

Each source line is aligned with the line of --target_file (the decoder is forced to read it), or, without one, with
the model's own translation (written to --translation_output). Words are whitespace-separated tokens; a line of the
output lists ``i-j`` links, source word i with target word j, 0-based. Without --heads, the cross-attention heads are
chosen on the first pairs without gold alignments (docs/alignment.md says how and how well). --gold scores the
alignments (AER, precision, recall) against a gold file; --markup carries inline tags of the source lines
(``<b>…</b>``, ``{1}…{/1}``, ``<br/>``, ``{2}``) into the translations.
"""

import argparse
import contextlib
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import MarianMTModel

from ..alignment.align import SELECTION_PAIRS, Alignments, align_pairs, check_threshold
from ..alignment.markup import has_markup, parse_markup, transfer_markup
from ..alignment.pharaoh import alignment_scores, format_links, parse_links
from ..common.outputs import check_output_files, line_output
from ..common.text_files import listed_lines, read_aligned_lines, read_lines
from ..errors import HfEntmaxValueError
from .parsing import CommandParser
from .translate import (
    StandardOutput,
    check_generation_arguments,
    load_translation_model,
    resolve_device,
    scored_lines,
    translate_lines,
)


_HEAD = re.compile(r"(\d+):(\d+)")


def parse_heads(text: str) -> list[tuple[int, int]] | None:
    """``"auto"`` → None; ``"1:0,1:3"`` → ``[(1, 0), (1, 3)]``.

    Raises:
        HfEntmaxValueError: For anything else, naming the part that is not LAYER:HEAD.
    """
    if text == "auto":
        return None
    heads = []
    for part in text.split(","):
        match = _HEAD.fullmatch(part.strip())
        if match is None:
            raise HfEntmaxValueError(
                f"--heads {text}: {part!r} is not LAYER:HEAD; expected auto or e.g. 1:0,1:3 (0-based)"
            )
        heads.append((int(match[1]), int(match[2])))
    return heads


def add_parser_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        required=True,
        help="An AdaptiveEntmaxMarian or Marian model folder, or the Hub id of one in the local Hugging Face cache.",
    )
    parser.add_argument("--source_file", required=True, help="Source sentences, one a line (UTF-8).")
    parser.add_argument(
        "--target_file",
        default=None,
        help="Their translations, line-aligned; without it the model translates and aligns its own translations.",
    )
    parser.add_argument("--output", default=None, help="Write the alignments here (default: standard output).")
    parser.add_argument(
        "--translation_output",
        default=None,
        help="Without --target_file: write the model's translations here (the alignments refer to their words).",
    )
    parser.add_argument(
        "--heads",
        default="auto",
        help=f"Cross-attention heads to align with, LAYER:HEAD,... (0-based; their attention is averaged), or auto: "
        f"chosen without gold on the first {SELECTION_PAIRS} pairs (default).",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="Link each source word with more than this share of a target word's attention (0: every word in an "
        "α-entmax head's support); default: only the most attended source word.",
    )
    parser.add_argument(
        "--gold",
        default=None,
        help="Gold alignments, one Pharaoh line per pair (i-j sure, i?j or ipj possible): print AER, precision and "
        "recall.",
    )
    parser.add_argument(
        "--markup",
        default=None,
        metavar="FILE",
        help="The source lines carry inline tags: take them out before aligning (word indices count the words "
        "without them) and write the translations with the tags carried over to FILE.",
    )
    parser.add_argument("--batch_size", type=int, default=32, help="Sentence pairs per forward pass (default: 32).")
    parser.add_argument(
        "--num_beams", type=int, default=None, help="Without --target_file: beam size (default: the model's)."
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N.")
    parser.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=True, help="Show progress bars (on stderr)."
    )


def _read_gold(path: str, num_lines: int) -> tuple[list[set], list[set]]:
    lines = read_lines(path, "--gold")
    if len(lines) != num_lines:
        raise HfEntmaxValueError(
            f"--gold {path} has {len(lines)} lines for {num_lines} sentence pairs; give one line per pair"
        )
    parsed = [parse_links(line, f"--gold {path}, line {number}") for number, line in enumerate(lines, start=1)]
    return [sure for sure, _ in parsed], [possible for _, possible in parsed]


def _align(
    args: argparse.Namespace,
    heads: list[tuple[int, int]] | None,
    device: torch.device,
    sources: list[str],
    targets: list[str] | None,
) -> tuple[Alignments, list[list[tuple[int, int]]], list[str]]:
    """Load the model, translate where no targets are given, and align; a line without a pair gets no links."""
    model, tokenizer = load_translation_model(args.model, device, progress=args.progress)
    if isinstance(model, MarianMTModel):
        model.set_attn_implementation("eager")  # the implementation that returns attention probabilities
    if targets is None:
        targets = translate_lines(
            model, tokenizer, sources, num_beams=args.num_beams, batch_size=args.batch_size, progress=args.progress
        )
        paired = [index for index, source in enumerate(sources) if source.strip()]
    else:
        description = f"--source_file {args.source_file} / --target_file {args.target_file}"
        paired = scored_lines(sources, targets, description, "align")
    alignments = align_pairs(
        model,
        tokenizer,
        [sources[index] for index in paired],
        [targets[index] for index in paired],
        heads=heads,
        threshold=args.threshold,
        batch_size=args.batch_size,
    )
    links = [[] for _ in sources]
    for index, pair_links in zip(paired, alignments.links, strict=True):
        links[index] = pair_links
    return alignments, links, targets


def run(args: argparse.Namespace) -> int:
    # Everything that can be wrong with the arguments and files is reported before the model loads.
    heads = parse_heads(args.heads)
    check_generation_arguments(num_beams=args.num_beams, batch_size=args.batch_size, max_new_tokens=None)
    check_threshold(args.threshold, "--threshold")
    if args.target_file and args.translation_output:
        raise HfEntmaxValueError("--translation_output is for the model's own translations; drop it or --target_file")
    if args.target_file and args.num_beams is not None:
        raise HfEntmaxValueError("--num_beams is for the model's own translations; drop it or --target_file")
    if not args.target_file and not (args.translation_output or args.markup):
        raise HfEntmaxValueError(
            "without --target_file the model translates, and the alignments refer to the words of its translations: "
            "name a file to write them to with --translation_output (or --markup)"
        )
    check_output_files(
        {"--source_file": args.source_file, "--target_file": args.target_file, "--gold": args.gold},
        [
            ("--output", args.output, "the alignments"),
            ("--translation_output", args.translation_output, "the translations"),
            ("--markup", args.markup, "the tagged translations"),
        ],
    )
    device = resolve_device(args.device)
    if args.target_file:
        sources, targets = read_aligned_lines(args.source_file, args.target_file, "--source_file", "--target_file")
    else:
        sources, targets = read_lines(args.source_file, "--source_file"), None
    gold = _read_gold(args.gold, len(sources)) if args.gold else None
    marked = None
    if args.markup:
        marked = [
            parse_markup(line, f"--source_file {args.source_file}, line {number}")
            for number, line in enumerate(sources, start=1)
        ]
        sources = [line.text for line in marked]
        tagged_targets = [number for number, line in enumerate(targets or [], start=1) if has_markup(line)]
        if tagged_targets:
            raise HfEntmaxValueError(
                f"--target_file {args.target_file} has tags on line(s) {listed_lines(tagged_targets)}: --markup "
                "carries the source's tags into an untagged translation"
            )

    # The output files are opened (created under temporary names) before the model loads, so a folder that cannot be
    # written fails now; each is renamed into place once its lines are written.
    with contextlib.ExitStack() as stack:
        outputs = {
            flag: stack.enter_context(line_output(Path(path), flag) if path else contextlib.nullcontext(None))
            for flag, path in (
                ("--output", args.output),
                ("--translation_output", args.translation_output),
                ("--markup", args.markup),
            )
        }
        alignments, links, targets = _align(args, heads, device, sources, targets)
        lines = {"--output": [format_links(line) for line in links], "--translation_output": targets}
        if marked is not None:
            lines["--markup"] = [
                transfer_markup(line, target, line_links)
                for line, target, line_links in zip(marked, targets, links, strict=True)
            ]
        for flag, output in outputs.items():
            if flag == "--output" or output is not None:
                (output or StandardOutput()).write("".join(f"{line}\n" for line in lines[flag]))

    # Standard output carries only the alignments unless they go to a file.
    messages = sys.stdout if args.output else sys.stderr
    choice = alignments.choice
    heads_text = "+".join(f"{layer}:{head}" for layer, head in choice.heads)
    how = "given" if heads is not None else f"chosen on the first {choice.num_pairs} pairs"
    print(
        f"Aligned {len(alignments.links)} sentence pairs with cross-attention head(s) {heads_text} ({how}; target "
        f"words read at the {choice.query_step} step; score {choice.score:.2f} nats).",
        file=messages,
    )
    if gold is not None:
        scores = alignment_scores(links, *gold)
        print(
            f"AER {100 * scores.aer:.1f}  precision {100 * scores.precision:.1f}  recall {100 * scores.recall:.1f} "
            f"(against --gold {args.gold}, {len(links)} pairs)",
            file=messages,
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = CommandParser(prog="hf-entmax align", description=__doc__)
    add_parser_arguments(parser)
    return run(parser.parse_args(sys.argv[1:] if argv is None else argv))
