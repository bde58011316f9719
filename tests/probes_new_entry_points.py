"""Reliability probes of item 16 (the entry points added after the third pass: `hf-entmax align`, `translate
--paragraphs`, `train --document_context`, and decoder-only model folders, which the translation commands must
refuse); registered on import by tests/test_reliability.py."""

from pathlib import Path

from helpers import SENTENCES, tiny_config
from probes_api import _edit_weights, _nan_alpha
from probing import DOCUMENTED, api, cli, documented, probe, run_command

from hf_entmax import AdaptiveEntmaxMarianForCausalLM
from hf_entmax.training.arguments import DataArguments


ITEM = 16


def _align(bench, *extra: str, folder: Path | None = None) -> list[str]:
    """`hf-entmax align` of the workbench's sentences against themselves (a tiny model: any links will do)."""
    sentences = bench.sentences()
    model = folder or bench.hub_folder()
    return ["align", "--model", str(model), "--source_file", sentences, "--target_file", sentences, "--no-progress",
            *extra]  # fmt: skip


@probe(ITEM)
def probe_align_nan_alpha_logits(bench):
    """align --model: a folder whose weights hold a NaN α logit"""
    folder = bench.hub_folder()
    _edit_weights(folder, _nan_alpha)
    return cli(_align(bench, folder=folder), str(folder), "alpha_logits")


@probe(ITEM)
def probe_align_threshold_nan(bench):
    """align --threshold nan"""
    return cli(_align(bench, "--threshold", "nan"), "--threshold")


@probe(ITEM)
def probe_align_target_file_shorter_than_the_source(bench):
    """align --target_file with fewer lines than --source_file"""
    target = bench.write(bench.folder("text") / "short.txt", f"{SENTENCES[0]}\n")
    arguments = _align(bench)
    arguments[arguments.index("--target_file") + 1] = str(target)
    return cli(arguments, "--target_file")


@probe(ITEM)
def probe_align_gold_with_a_malformed_link(bench):
    """align --gold: a line with the link `0-x`"""
    gold = bench.write(bench.folder("text") / "gold.txt", "0-0\n0-x\n0-0\n0-0\n")
    return cli(_align(bench, "--gold", str(gold)), "--gold", "line 2", "0-x")


@probe(ITEM)
def probe_align_output_dev_full(bench):
    """align --output /dev/full (every write fails: no space left)"""
    return cli(_align(bench, "--output", "/dev/full"), "--output", "/dev/full", "no space")


@probe(ITEM)
def probe_align_markup_onto_the_source_file(bench):
    """align --markup naming the --source_file (the tagged translations would replace the input)"""
    arguments = _align(bench)
    source = arguments[arguments.index("--source_file") + 1]
    bench.keep(Path(source))
    return cli([*arguments, "--markup", source], "--markup", "--source_file")


@probe(ITEM, DOCUMENTED)
def probe_translate_paragraphs_of_empty_lines_only(bench):
    """translate --paragraphs: an input of empty and whitespace-only lines (no paragraph): one empty line each"""
    source = bench.write(bench.folder("text") / "empty.txt", "\n   \n\n")
    output = bench.folder("translations") / "out.txt"
    arguments = bench.translate_argv("--paragraphs", "--output", str(output))
    arguments[arguments.index("--input") + 1] = str(source)
    code, _, _ = run_command(arguments)
    lines = output.read_text(encoding="utf-8").split("\n") if output.exists() else None
    return documented(code == 0 and lines == ["", "", "", ""], f"exit code {code}, output lines {lines}")


@probe(ITEM)
def probe_translate_paragraphs_reference_shorter(bench):
    """translate --paragraphs --reference with fewer lines than --input"""
    reference = bench.write(bench.folder("text") / "reference.txt", "one line\n")
    return cli(bench.translate_argv("--paragraphs", "--reference", str(reference)), "--reference")


@probe(ITEM)
def probe_train_document_context_one(bench):
    """train --document_context 1 (joins nothing)"""
    return cli(bench.train_argv(bench.folder() / "run", "--document_context", "1"), "--document_context")


@probe(ITEM)
def probe_train_document_context_without_documents(bench):
    """train --document_context 2 on text files whose every pair is its own document (an empty line after each)"""
    folder = bench.folder("data")
    pairs = [("a b", "c d"), ("e f", "g h"), ("i j", "k l")]
    source = bench.write(folder / "train.en", "".join(f"{source}\n\n" for source, _ in pairs))
    target = bench.write(folder / "train.syn", "".join(f"{target}\n\n" for _, target in pairs))
    arguments = bench.train_argv(bench.folder() / "run", "--document_context", "2")
    data = arguments.index("--train_file")
    arguments[data : data + 2] = ["--train_source_file", str(source), "--train_target_file", str(target)]
    return cli(arguments, "--document_context", "no document of two or more pairs")


@probe(ITEM)
def probe_train_document_column_with_local_files(bench):
    """train --document_context 2 --document_column doc with a local --train_file (no columns of ids to read)"""
    arguments = bench.train_argv(bench.folder() / "run", "--document_context", "2", "--document_column", "doc")
    return cli(arguments, "--document_column", "--dataset_name")


@probe(ITEM)
def probe_data_arguments_document_context_ratio_above_one(bench):
    """DataArguments(document_context=2, document_context_ratio=2.0)"""
    return api(lambda: DataArguments(document_context=2, document_context_ratio=2.0), "--document_context_ratio")


def _decoder_only_folder(bench) -> Path:
    """A tiny AdaptiveEntmaxMarianForCausalLM folder with the workbench's tokenizer."""
    folder = bench.folder("causal-lm") / "model"
    AdaptiveEntmaxMarianForCausalLM(tiny_config(vocab_size=len(bench.tokenizer))).save_pretrained(folder)
    bench.tokenizer.save_pretrained(folder)
    return folder


DECODER_ONLY_COMMANDS = {
    "translate": lambda bench, model: ["translate", "--model", model, "--input", bench.sentences(), "--no-progress"],
    "align": lambda bench, model: _align(bench, folder=Path(model)),
    "analyze": lambda bench, model: ["analyze", model, "--source_file", bench.sentences(), "--output",
                                     str(bench.folder() / "analysis")],
    "export": lambda bench, model: ["export", "--model", model, "--output", str(bench.folder() / "export")],
    "train": lambda bench, model: bench.train_argv(bench.folder() / "run", "--model_name_or_path", model,
                                                   fresh=False),
}  # fmt: skip


def _register_decoder_only_probes() -> None:
    """One probe per command: a decoder-only folder is refused with one line saying what it is."""
    for command, make_argv in DECODER_ONLY_COMMANDS.items():

        def refused(bench, make_argv=make_argv):
            model = str(_decoder_only_folder(bench))
            return cli(make_argv(bench, model), model, "decoder-only", "AdaptiveEntmaxMarianForCausalLM")

        refused.__doc__ = f"{command}: an AdaptiveEntmaxMarianForCausalLM folder given as the translation model"
        refused.__name__ = f"probe_{command}_decoder_only_folder"
        probe(ITEM)(refused)


_register_decoder_only_probes()
