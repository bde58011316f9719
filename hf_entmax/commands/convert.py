"""`hf-entmax convert`: turn a MarianMT checkpoint into an AdaptiveEntmaxMarian one, as a Hub-ready folder.

With the default α = 1 (fixed) the converted model computes the same function as the source; the command checks
this on a few sentences before writing and says so. Then fine-tune it so that the heads learn their α: `hf-entmax
train --model_name_or_path <output> --learn_alpha True --alpha_init 1.1 ...`, or convert with a learned α directly
(`--learn_alpha --alpha_init 1.1`) and fine-tune that.
"""

import argparse
import sys
from collections.abc import Sequence

from ..common.hub_ids import check_repo_id
from ..common.text_files import read_sentences
from ..hub.convert import convert_marian
from ..training.arguments import add_attention_arguments, given_attention_options
from .hub_folder import add_hub_folder_arguments, check_written_folder
from .parsing import CommandParser


CONVERT_NOT_GIVEN = (
    "α = 1 fixed (softmax) and no query scaling, so that the converted model computes the source's function."
)


def add_parser_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", required=True, help="A MarianMT folder or Hub id (e.g. Helsinki-NLP/opus-mt-de-en)."
    )
    parser.add_argument("--output", required=True, help="The folder to write (safetensors, code, tokenizer, card).")
    add_attention_arguments(parser, not_given=CONVERT_NOT_GIVEN)
    parser.add_argument(
        "--allow_pickle",
        action="store_true",
        help="Accept a checkpoint with only pickle weights (pytorch_model.bin, *.pt). Unpickling runs code from the "
        "file: only for checkpoints you trust. The output is safetensors only.",
    )
    parser.add_argument(
        "--check_sentences", default=None, help="A text file, one source sentence a line, for the equivalence check."
    )
    parser.add_argument("--source_lang", default=None, help="Source language code for the model card.")
    parser.add_argument("--target_lang", default=None, help="Target language code for the model card.")
    parser.add_argument("--base_model", default=None, help="Hub id of the source, for the card (if --model is local).")
    add_hub_folder_arguments(parser)


def run(args: argparse.Namespace) -> int:
    for flag, value in (("--repo_id", args.repo_id), ("--base_model", args.base_model)):
        if value is not None:
            check_repo_id(value, flag)
    report = convert_marian(
        args.model,
        args.output,
        allow_pickle=args.allow_pickle,
        check_sentences=read_sentences(args.check_sentences, "--check_sentences"),
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        base_model=args.base_model,
        model_id=args.repo_id,
        max_shard_size=args.max_shard_size,
        overwrite=args.overwrite,
        **given_attention_options(args),
    )
    print(report.summary())
    print(f"Saved to {args.output} (safetensors only; loads with trust_remote_code=True).")
    check_written_folder(args)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = CommandParser(prog="hf-entmax convert", description=__doc__)
    add_parser_arguments(parser)
    return run(parser.parse_args(sys.argv[1:] if argv is None else argv))
