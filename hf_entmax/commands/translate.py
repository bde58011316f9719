"""`hf-entmax translate`: translate a text file, one sentence a line, with an AdaptiveEntmaxMarian or Marian model.

Line N of the output translates line N of the input; empty input lines stay empty. Sentences are sorted by token
length and batched (little padding), and the translations put back in input order. `--reference` scores them with
sacreBLEU (BLEU and chrF, with their signatures) against line-aligned references. `--sparsefinder` translates with
restricted attention at an operating point of `hf-entmax sparsefinder` (see docs/sparsefinder.md).

`--paragraphs` translates each paragraph — consecutive non-empty lines, up to an empty line — as one input: a model
trained on joined sentences (`hf-entmax train --document_context`) then sees the context of every sentence. Each
paragraph becomes one output line and the empty lines stay, so the output keeps the document's paragraph structure.
`--lines_per_input N` translates a paragraph N lines at a time instead, and joins those translations on its line: a
model trained on up to N joined sentences writes about one sentence per sentence it reads for inputs of that length,
and stops short on longer ones (docs/benchmarks.md, document-level training).

Input longer than the model accepts is truncated to its limit, with one warning listing the lines: a long document
should not fail hours in because of one over-long line, the output stays line-aligned, and the warning says which
lines to split.
"""

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from huggingface_hub import snapshot_download
from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError
from tqdm.auto import tqdm
from transformers import LogitsProcessorList, MarianMTModel, PreTrainedModel, PreTrainedTokenizerBase

from ..common.model_folder import MODEL_TYPE_NAMES, check_model_folder, load_config, load_pretrained, load_tokenizer
from ..common.outputs import check_output_files, line_output, write_text_atomically
from ..common.text_files import listed_lines, read_aligned_lines, read_lines
from ..errors import HfEntmaxFileNotFoundError, HfEntmaxInterrupted, HfEntmaxValueError, last_line
from ..modeling.configuration_adaptive_entmax_marian import position_limit
from ..modeling.modeling_adaptive_entmax_marian import AdaptiveEntmaxMarianMTModel
from ..modeling.pipeline_translation import input_length_limit
from ..modeling.sentence_ends import SentenceEndsBeforeStop, count_sentence_ends, sentence_end_token_ids
from ..modeling.sparsefinder_attention import PREDICTOR_FILE, SparsefinderPredictor, split_sparsity_settings
from ..training.metrics import corpus_scores
from .parsing import CommandParser


logger = logging.getLogger(__name__)

# Lines are sorted by length within blocks of this many batches (see `iter_translations`): enough for batches of
# similar lengths, few enough that the output advances steadily.
BATCHES_PER_BLOCK = 64


def add_parser_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        required=True,
        help="An AdaptiveEntmaxMarian or Marian model folder, or the Hub id of one in the local Hugging Face cache.",
    )
    parser.add_argument("--input", required=True, help="Sentences to translate, one a line (UTF-8).")
    parser.add_argument("--output", default=None, help="Write the translations here (default: standard output).")
    parser.add_argument(
        "--reference",
        default=None,
        help="Line-aligned reference translations: print sacreBLEU BLEU and chrF with their signatures (on "
        "standard error when the translations go to standard output).",
    )
    parser.add_argument("--metrics_file", default=None, help="With --reference: also write the scores as JSON here.")
    parser.add_argument(
        "--num_beams", type=int, default=None, help="Beam size (default: the model's generation config)."
    )
    parser.add_argument("--batch_size", type=int, default=32, help="Sentences per generate call (default: 32).")
    parser.add_argument(
        "--max_new_tokens",
        type=int,
        default=None,
        help="Longest translation, in tokens (default: the model's generation config).",
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N.")
    parser.add_argument(
        "--sparsefinder",
        nargs="+",
        default=None,
        metavar="[TYPE=]METHOD:KNOB=VALUE",
        help="Attend only over the pairs Sparsefinder predicts (an operating point of `hf-entmax sparsefinder`), e.g. "
        "distance:threshold=1.5,window=2 for every attention type, or cross=clustering:clusters=4 for one.",
    )
    parser.add_argument(
        "--sparsefinder_predictor",
        default=None,
        help=f"The {PREDICTOR_FILE} to use, or a folder holding one (default: the model folder's).",
    )
    parser.add_argument(
        "--paragraphs",
        action="store_true",
        help="Translate each paragraph (consecutive non-empty lines, up to an empty line) as one input, written as "
        "one line; empty lines stay. With --reference, the reference's lines of each paragraph are joined likewise.",
    )
    parser.add_argument(
        "--lines_per_input",
        type=int,
        default=None,
        help="With --paragraphs: translate each paragraph N consecutive lines at a time (one input each), their "
        "translations joined on the paragraph's line; for a model trained with --document_context N "
        "(default: the whole paragraph as one input).",
    )
    parser.add_argument(
        "--match_sentences",
        action="store_true",
        help="Let no translation end before it has as many sentence ends (. ! ? before a space) as its input: a model "
        "trained on inputs of up to n sentences stops after about n on longer ones.",
    )
    parser.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=True, help="Show a progress bar (on stderr)."
    )


def check_generation_arguments(*, num_beams: int | None, batch_size: int, max_new_tokens: int | None) -> None:
    """Check the numbers `translate_lines` takes, before anything slow starts.

    Raises:
        HfEntmaxValueError: If one is not a positive integer (``num_beams`` and ``max_new_tokens`` may be None).
    """
    for name, value in (("num_beams", num_beams), ("batch_size", batch_size), ("max_new_tokens", max_new_tokens)):
        if value is None and name != "batch_size":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise HfEntmaxValueError(f"`{name}` must be a positive integer, got {value!r}")


def resolve_device(name: str) -> torch.device:
    """``cpu``, ``cuda`` or ``cuda:N`` as a device this machine has.

    Raises:
        HfEntmaxValueError: If the name is not one of those or the device is not available.
    """
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise HfEntmaxValueError(f"--device {name!r}: expected cpu, cuda or cuda:N")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise HfEntmaxValueError(f"--device {name}: CUDA is not available here; use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise HfEntmaxValueError(
                f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s), numbered from 0"
            )
    return device


def resolve_model_folder(model: str) -> Path:
    """The folder ``model`` names, or the local Hugging Face cache's snapshot of the Hub id ``model``.

    Nothing is downloaded: fetching a model is a separate, explicit step (``hf download``).

    Raises:
        HfEntmaxFileNotFoundError: If ``model`` is neither a folder nor a Hub id in the local cache.
        HfEntmaxValueError: If ``model`` is a file.
    """
    folder = Path(model)
    if folder.is_dir():
        return folder
    if folder.exists():
        raise HfEntmaxValueError(f"--model {model} is a file; expected a model folder or a Hub model id")
    try:
        return Path(snapshot_download(model, local_files_only=True))
    except HFValidationError:
        raise HfEntmaxFileNotFoundError(f"--model {model}: no such folder") from None
    except LocalEntryNotFoundError:
        raise HfEntmaxFileNotFoundError(
            f"--model {model}: no such folder, and no Hub model {model!r} in the local Hugging Face cache "
            f"(this command does not download: fetch it first with `hf download {model}`)"
        ) from None


def load_translation_model(
    model: str, device: str | torch.device = "cpu", *, progress: bool = True
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load an AdaptiveEntmaxMarian or Marian model (a folder, or a Hub id in the local cache) and its tokenizer.

    No remote code runs: the AdaptiveEntmaxMarian class is hf_entmax's own, and the tokenizer is given the config.
    The tokenizer loads first, so a folder without one fails before the weights load.

    Args:
        model: A model folder or a Hub model id.
        device: Where to put the model.
        progress: Show transformers' progress bar while the weights load.

    Returns:
        ``(model, tokenizer)``, the model in eval mode on ``device``.

    Raises:
        HfEntmaxFileNotFoundError: If the folder, its config.json or the cached Hub model does not exist.
        HfEntmaxValueError: If it holds another kind of model, no safetensors weights or two sets of them, or a
            config, weights or tokenizer that cannot be loaded.
    """
    folder = resolve_model_folder(model)
    model_type = check_model_folder(folder, f"--model {folder}", tuple(MODEL_TYPE_NAMES))["model_type"]
    model_class = MarianMTModel if model_type == "marian" else AdaptiveEntmaxMarianMTModel
    config = load_config(model_class.config_class, folder, f"--model {model}")
    tokenizer = load_tokenizer(folder, f"--model {model}", config=config)
    loaded = load_pretrained(
        model_class, folder, f"--model {model}", config=config, use_safetensors=True, progress=progress
    )
    return loaded.to(device).eval(), tokenizer


def source_length_limit(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> int | None:
    """The most source tokens (with ``</s>``) the model accepts: the tokenizer's and the position table's limit, or
    None where neither sets one (relative positions, and a tokenizer without a length)."""
    limit = input_length_limit(model.config, tokenizer)
    return None if limit is None else limit[0]


def translate_lines(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    lines: Sequence[str],
    *,
    num_beams: int | None = None,
    batch_size: int = 32,
    max_new_tokens: int | None = None,
    match_sentences: bool = False,
    progress: bool = True,
) -> list[str]:
    """Translate sentences in batches of similar length; return one translation per line, in input order.

    Empty or whitespace-only lines give ``""`` and never reach the model. A sentence longer than
    `source_length_limit` is truncated to it, with one warning listing those lines (1-based positions in ``lines``).

    Args:
        model: An encoder–decoder with ``generate`` (AdaptiveEntmaxMarian or Marian), in eval mode.
        tokenizer: Its tokenizer.
        lines: The sentences, one per item, without line breaks.
        num_beams: Beam size; None takes the model's generation config.
        batch_size: Sentences per ``generate`` call.
        max_new_tokens: Longest translation in tokens (``</s>`` included); None takes the generation config's
            length limit.
        match_sentences: Let no translation end before it has as many sentence ends as its line
            (`hf_entmax.modeling.sentence_ends`): models stop early on inputs of more sentences than they were
            trained on.
        progress: Show a progress bar over the sentences (on stderr).

    Returns:
        The translations, each a single line with no line break, ``len(lines)`` of them.

    Raises:
        HfEntmaxValueError: If a number is not a positive integer, or ``max_new_tokens`` needs more decoder
            positions than the model has.
    """
    return list(
        iter_translations(
            model,
            tokenizer,
            lines,
            num_beams=num_beams,
            batch_size=batch_size,
            max_new_tokens=max_new_tokens,
            match_sentences=match_sentences,
            progress=progress,
        )
    )


def iter_translations(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    lines: Sequence[str],
    *,
    num_beams: int | None = None,
    batch_size: int = 32,
    max_new_tokens: int | None = None,
    match_sentences: bool = False,
    progress: bool = True,
) -> Iterator[str]:
    """`translate_lines`, yielding each line's translation in input order as soon as it and the lines before it are
    done: a long file's first translations can be written (and kept, if the run is stopped) before its last ones.

    Lines are translated in blocks of `BATCHES_PER_BLOCK` batches, sorted by length within a block, so that batches
    hold sentences of similar length (little padding) while the output still advances in input order.
    """
    check_generation_arguments(num_beams=num_beams, batch_size=batch_size, max_new_tokens=max_new_tokens)
    generate_kwargs = {}
    if num_beams is not None:
        generate_kwargs["num_beams"] = num_beams
    if max_new_tokens is not None:
        # The decoder start token counts in `max_length`, so for an encoder–decoder this is exactly
        # `max_new_tokens`, without transformers' warning about both limits when the generation config sets one.
        generate_kwargs["max_length"] = max_new_tokens + 1
        positions = position_limit(model.config)
        if positions is not None and max_new_tokens + 1 > positions:
            raise HfEntmaxValueError(
                f"`max_new_tokens` {max_new_tokens} is more than this model can generate: with the start token the "
                f"output must fit its {positions} positions (max_position_embeddings); use at most {positions - 1}"
            )

    sentences = {index: line.strip() for index, line in enumerate(lines) if line.strip()}
    max_source_length = source_length_limit(model, tokenizer)
    # Counted up to one past the limit: enough to sort and to find the lines that will be truncated, without
    # tokenizing a huge line whole (or transformers' own warning about it). Without a limit, nothing is truncated.
    texts = list(sentences.values())
    counting = {} if max_source_length is None else {"truncation": True, "max_length": max_source_length + 1}
    token_ids = tokenizer(texts, **counting)["input_ids"] if texts else []
    token_counts = dict(zip(sentences, map(len, token_ids), strict=True))
    too_long = (
        []
        if max_source_length is None
        else [index + 1 for index, count in token_counts.items() if count > max_source_length]
    )
    if too_long:
        logger.warning(
            f"input longer than the model's limit of {max_source_length} tokens was truncated to it on "
            f"{len(too_long)} line(s): {listed_lines(too_long)}; split those lines to translate them whole"
        )

    end_token_ids = sentence_end_token_ids(tokenizer) if match_sentences else None
    block_size = batch_size * BATCHES_PER_BLOCK
    with (
        torch.inference_mode(),
        tqdm(total=len(sentences), desc="Translating", unit="sentence", disable=not progress) as bar,
    ):
        for block_start in range(0, len(lines), block_size):
            block = range(block_start, min(block_start + block_size, len(lines)))
            translations = {index: "" for index in block}
            # Longest first: a batch too large for memory fails at the start, not at the end.
            order = sorted(
                (index for index in block if index in sentences), key=token_counts.__getitem__, reverse=True
            )
            for start in range(0, len(order), batch_size):
                batch = order[start : start + batch_size]
                inputs = tokenizer(
                    [sentences[index] for index in batch],
                    padding=True,
                    truncation=max_source_length is not None,
                    max_length=max_source_length,
                    return_tensors="pt",
                ).to(model.device)
                if end_token_ids is not None:
                    needed = [count_sentence_ends(sentences[index]) for index in batch]
                    guard = SentenceEndsBeforeStop(needed, end_token_ids, model.generation_config.eos_token_id)
                    generate_kwargs["logits_processor"] = LogitsProcessorList([guard])
                output_ids = model.generate(**inputs, **generate_kwargs)  # (len(batch), output length)
                decoded = tokenizer.batch_decode(output_ids, skip_special_tokens=True)
                for index, text in zip(batch, decoded, strict=True):
                    # One translation a line is the output's contract, whatever the vocabulary can spell.
                    translations[index] = text.replace("\r", " ").replace("\n", " ").strip()
                bar.update(len(batch))
            yield from translations.values()


def use_operating_point(
    model: PreTrainedModel, settings: Sequence[str], predictor: str | None, model_name: str
) -> None:
    """``model.set_predicted_sparsity(settings, predictor)``, with what can go wrong as one line.

    Raises:
        HfEntmaxValueError: For a Marian (softmax) model, a spec the predictor cannot serve, or no predictor.
        HfEntmaxFileNotFoundError: If ``predictor`` does not exist.
    """
    if not isinstance(model, AdaptiveEntmaxMarianMTModel):
        raise HfEntmaxValueError(f"--sparsefinder: --model {model_name} is a softmax Marian model; it needs α-entmax")
    if predictor is not None:
        if not Path(predictor).exists():
            raise HfEntmaxFileNotFoundError(f"--sparsefinder_predictor {predictor}: no such file or folder")
        try:
            predictor = SparsefinderPredictor.from_pretrained(predictor)
        except (OSError, ValueError) as error:
            raise HfEntmaxValueError(f"--sparsefinder_predictor {last_line(str(error))}") from None
    try:
        model.set_predicted_sparsity(list(settings), predictor=predictor)
    except (OSError, ValueError) as error:
        raise HfEntmaxValueError(f"--sparsefinder: {last_line(str(error))}") from None


def paragraphs(lines: Sequence[str]) -> list[list[int]]:
    """The output lines of ``--paragraphs``: for each, the 0-based indices of the lines of ``lines`` it holds — a
    paragraph's (a run of non-empty lines), or none for an empty (or whitespace-only) line.

    ``["a", "b", "", "c"]`` gives ``[[0, 1], [], [3]]``.
    """
    layout: list[list[int]] = []
    in_paragraph = False
    for index, line in enumerate(lines):
        if not line.strip():
            layout.append([])
            in_paragraph = False
        elif in_paragraph:
            layout[-1].append(index)
        else:
            layout.append([index])
            in_paragraph = True
    return layout


def join_paragraphs(lines: Sequence[str], paragraph_lines: Sequence[str] | None = None) -> list[str]:
    """Each paragraph of ``lines`` (`paragraphs`) as one line of its lines joined with a space, the empty lines kept as
    ``""``; with ``paragraph_lines`` (as long as ``lines``), the paragraphs are ``lines``' and the text joined is
    ``paragraph_lines``' (a reference joined where its source is).

    ``["a", "b", "", "c"]`` gives ``["a b", "", "c"]``.
    """
    texts = lines if paragraph_lines is None else paragraph_lines
    if len(texts) != len(lines):
        raise ValueError(f"{len(texts)} lines to join where the paragraphs have {len(lines)}")
    return [" ".join(texts[index].strip() for index in paragraph) for paragraph in paragraphs(lines)]


def paragraph_inputs(lines: Sequence[str], lines_per_input: int | None = None) -> list[list[str]]:
    """For each output line of ``--paragraphs`` (`paragraphs`), the inputs it is translated from: its paragraph's
    lines in consecutive groups of at most ``lines_per_input`` (None: the whole paragraph), each group joined with a
    space (none for an empty line).

    ``(["a", "b", "c", "", "d"], 2)`` gives ``[["a b", "c"], [], ["d"]]``.
    """
    inputs = []
    for paragraph in paragraphs(lines):
        size = lines_per_input or max(len(paragraph), 1)  # an empty line's paragraph has no lines, no groups
        groups = [paragraph[start : start + size] for start in range(0, len(paragraph), size)]
        inputs.append([" ".join(lines[index].strip() for index in group) for group in groups])
    return inputs


def joined_translations(translations: Iterator[str], inputs_per_line: Sequence[int]) -> Iterator[str]:
    """Each output line's translation, as ``translations`` (of every line's inputs in order) come: the next
    ``inputs_per_line[i]`` of them joined with a space (``""`` for a line of none)."""
    for count in inputs_per_line:
        yield " ".join(next(translations) for _ in range(count))


def scored_lines(
    sources: Sequence[str], references: Sequence[str], description: str, verb: str = "score"
) -> list[int]:
    """The 0-based indices of the lines to score (or to ``verb`` otherwise): those where both the source and the
    reference are non-empty.

    A line empty on one side only is a sign of misalignment: it is left out with a warning listing it.

    Raises:
        HfEntmaxValueError: If no line has both a source sentence and a reference.
    """
    scored = [index for index in range(len(sources)) if sources[index].strip() and references[index].strip()]
    one_sided = [
        index + 1 for index in range(len(sources)) if bool(sources[index].strip()) != bool(references[index].strip())
    ]
    if one_sided:
        logger.warning(
            f"{len(one_sided)} line(s) of {description} are empty on one side only and are left out: "
            f"{listed_lines(one_sided)}"
        )
    if not scored:
        raise HfEntmaxValueError(f"{description}: no line has both a sentence and a reference to {verb}")
    return scored


def run(args: argparse.Namespace) -> int:
    # Everything that can be wrong with the arguments and files is reported before the model loads.
    check_generation_arguments(
        num_beams=args.num_beams, batch_size=args.batch_size, max_new_tokens=args.max_new_tokens
    )
    if args.metrics_file and not args.reference:
        raise HfEntmaxValueError("--metrics_file needs --reference (the scores are computed against it)")
    if args.lines_per_input is not None and not args.paragraphs:
        raise HfEntmaxValueError("--lines_per_input needs --paragraphs (it groups the lines of each paragraph)")
    if args.lines_per_input is not None and args.lines_per_input < 1:
        raise HfEntmaxValueError(f"--lines_per_input must be a positive number of lines, got {args.lines_per_input}")
    device = resolve_device(args.device)
    if args.reference:
        sources, references = read_aligned_lines(args.input, args.reference, "--input", "--reference")
        scored = scored_lines(sources, references, f"--input {args.input} / --reference {args.reference}")
    else:
        sources, references, scored = read_lines(args.input, "--input"), None, []
    # What is translated: each line, or each paragraph's inputs (one per output line, or several joined on it).
    inputs = [[line] for line in sources]
    if args.paragraphs:
        # A reference is joined where its source is, so that each paragraph is scored against its own lines.
        if references is not None:
            references = join_paragraphs(sources, references)
        inputs = paragraph_inputs(sources, args.lines_per_input)
        sources = join_paragraphs(sources)
        if references is not None:
            scored = [index for index in range(len(sources)) if sources[index] and references[index]]
    # What the command writes must not replace what it reads, nor each other.
    check_output_files(
        {"--input": args.input, "--reference": args.reference},
        [("--output", args.output, "the translations"), ("--metrics_file", args.metrics_file, "the scores")],
    )

    if args.sparsefinder_predictor and not args.sparsefinder:
        raise HfEntmaxValueError("--sparsefinder_predictor needs --sparsefinder (the operating point to use)")
    if args.sparsefinder:
        try:
            split_sparsity_settings(args.sparsefinder)  # a bad spec fails before the model loads
        except ValueError as error:
            raise HfEntmaxValueError(f"--sparsefinder: {error}") from None

    # The output file is opened (created under a temporary name) before the model loads: a folder that cannot be
    # written fails now, not after the translation. Lines are written in input order as their block is done.
    translations: list[str] = []
    try:
        file = line_output(Path(args.output), "--output") if args.output else contextlib.nullcontext(StandardOutput())
        with file as output:
            model, tokenizer = load_translation_model(args.model, device, progress=args.progress)
            if args.sparsefinder:
                use_operating_point(model, args.sparsefinder, args.sparsefinder_predictor, args.model)
            translated = iter_translations(
                model,
                tokenizer,
                [text for line_inputs in inputs for text in line_inputs],
                num_beams=args.num_beams,
                batch_size=args.batch_size,
                max_new_tokens=args.max_new_tokens,
                match_sentences=args.match_sentences,
                progress=args.progress,
            )
            for translation in joined_translations(translated, [len(line_inputs) for line_inputs in inputs]):
                output.write(f"{translation}\n")
                translations.append(translation)
    except KeyboardInterrupt:
        where = f"--output {args.output} holds" if args.output else "standard output got"
        kept = f"{where} the translations of the first {len(translations):,} of {len(sources):,} lines"
        raise HfEntmaxInterrupted(kept if translations else "nothing was translated yet") from None

    # Standard output carries only the translations unless they go to a file.
    messages = sys.stdout if args.output else sys.stderr
    if args.output:
        print(f"Wrote {len(translations)} lines to {args.output}.", file=messages)

    if references is not None:
        scores = corpus_scores(
            [translations[index] for index in scored], [references[index].strip() for index in scored]
        )
        scores["lines_scored"] = len(scored)
        print(f"BLEU = {scores['bleu']:.2f}  {scores['bleu_signature']}", file=messages)
        print(f"chrF = {scores['chrf']:.2f}  {scores['chrf_signature']}", file=messages)
        print(f"(on {scores['lines_scored']} of {len(sources)} lines)", file=messages)
        if args.metrics_file:
            metrics = {**scores, "model": args.model, "input": args.input, "reference": args.reference}
            write_text_atomically(Path(args.metrics_file), json.dumps(metrics, indent=2) + "\n", flag="--metrics_file")
    return 0


class StandardOutput:
    """Standard output as the translations' file (see `line_output`): each line shows as soon as it is written."""

    @staticmethod
    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    parser = CommandParser(prog="hf-entmax translate", description=__doc__)
    add_parser_arguments(parser)
    return run(parser.parse_args(sys.argv[1:] if argv is None else argv))
