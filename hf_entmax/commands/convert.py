"""`hf-entmax convert`: turn a MarianMT checkpoint into an AdaptiveEntmaxMarian one, as a Hub-ready folder.

With the default α = 1 (fixed) the converted model computes the same function as the source; the command checks
this on a few sentences before writing and says so. Fine-tune it afterwards with `hf-entmax train
--model_name_or_path <output> --learn_alpha True`, or convert with a learned α directly (`--learn_alpha
--alpha_init 1.1`).
"""

import argparse
import sys
from collections.abc import Sequence

from ..conversion.convert import convert_marian
from ..modeling.configuration_adaptive_entmax_marian import ATTENTION_TYPES
from ..training.arguments import parse_alpha_init
from .hub_folder import add_hub_folder_arguments, check_written_folder, read_sentences


HELP = "convert a MarianMT checkpoint (folder or Hub id) into an AdaptiveEntmaxMarian Hub-ready folder"


def add_parser_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", required=True, help="A MarianMT folder or Hub id (e.g. Helsinki-NLP/opus-mt-de-en)."
    )
    parser.add_argument("--output", required=True, help="The folder to write (safetensors, code, tokenizer, card).")
    parser.add_argument(
        "--alpha_init",
        default="1.0",
        help="Initial α of every head: a number in [1, 2] or 'random' (needs --learn_alpha). Default 1: softmax, "
        "the same function as the source.",
    )
    parser.add_argument(
        "--learn_alpha",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="Make α a learned parameter per head (then --alpha_init must be at least --alpha_min). Default: fixed.",
    )
    parser.add_argument("--alpha_min", type=float, default=1.01, help="Lower bound of a learned α.")
    parser.add_argument("--alpha_max", type=float, default=2.0, help="Upper bound of a learned α.")
    for kind in ATTENTION_TYPES:
        name = kind.replace("_", " ")
        parser.add_argument(
            f"--{kind}_alpha_init", default=None, help=f"Override of --alpha_init for {name} attention."
        )
        parser.add_argument(
            f"--{kind}_learn_alpha",
            action=argparse.BooleanOptionalAction,
            default=None,
            help=f"Override of --learn_alpha for {name} attention.",
        )
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
    alpha_inits = {
        f"{prefix}alpha_init": parse_alpha_init(getattr(args, f"{prefix}alpha_init"), f"--{prefix}alpha_init")
        for prefix in ("", *(f"{kind}_" for kind in ATTENTION_TYPES))
    }
    report = convert_marian(
        args.model,
        args.output,
        **alpha_inits,
        learn_alpha=args.learn_alpha,
        alpha_min=args.alpha_min,
        alpha_max=args.alpha_max,
        **{f"{kind}_learn_alpha": getattr(args, f"{kind}_learn_alpha") for kind in ATTENTION_TYPES},
        allow_pickle=args.allow_pickle,
        check_sentences=read_sentences(args.check_sentences, "--check_sentences"),
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        base_model=args.base_model,
        model_id=args.repo_id,
        max_shard_size=args.max_shard_size,
    )
    print(report.summary())
    print(f"Saved to {args.output} (safetensors only; loads with trust_remote_code=True).")
    check_written_folder(args)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hf-entmax convert", description=__doc__)
    add_parser_arguments(parser)
    return run(parser.parse_args(sys.argv[1:] if argv is None else argv))
