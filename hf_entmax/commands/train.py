"""`hf-entmax train`: train or fine-tune an AdaptiveEntmaxMarian translation model.

Arguments are `ModelArguments`, `DataArguments` and transformers' `Seq2SeqTrainingArguments`, given as
flags or as one `.json`/`.yaml` file. With no data argument the built-in synthetic pair is used.
"""

import sys
from collections.abc import Sequence

import torch
from transformers import HfArgumentParser, Seq2SeqTrainingArguments

from ..training.arguments import DataArguments, ModelArguments
from ..training.run import train


HELP = "train or fine-tune a model on a Hub dataset, local files or the built-in synthetic pair"
DEFAULT_OUTPUT_DIR = "outputs/train"


def parse_arguments(argv: Sequence[str]) -> tuple[ModelArguments, DataArguments, Seq2SeqTrainingArguments]:
    """Parse flags, or a single .json/.yaml file, into the three argument dataclasses."""
    parser = HfArgumentParser(
        (ModelArguments, DataArguments, Seq2SeqTrainingArguments), prog="hf-entmax train", description=__doc__
    )
    argv = list(argv)
    if len(argv) == 1 and argv[0].endswith(".json"):
        return parser.parse_json_file(argv[0])
    if len(argv) == 1 and argv[0].endswith((".yaml", ".yml")):
        return parser.parse_yaml_file(argv[0])
    argv = _with_default(argv, "--output_dir", DEFAULT_OUTPUT_DIR)
    if not torch.accelerator.is_available():
        # Without an accelerator, say so: only then do processes started by torchrun form a (gloo) DDP group
        # instead of each training alone, and the data loader stops pinning memory for a GPU that is not there.
        argv = _with_default(argv, "--use_cpu", "True")
        argv = _with_default(argv, "--dataloader_pin_memory", "False")
    return parser.parse_args_into_dataclasses(args=argv)


def _with_default(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` plus ``flag value`` unless the user gave ``flag`` already."""
    if flag in argv or any(argument.startswith(f"{flag}=") for argument in argv):
        return argv
    return [*argv, flag, value]


def print_summary(summary: dict, output_dir: str) -> None:
    metrics = summary["metrics"]
    print(f"\nTrained {summary['source_lang']} -> {summary['target_lang']} for {summary['global_step']} steps.")
    for prefix, name in (("eval", "validation"), ("test", "test")):
        if f"{prefix}_bleu" in metrics:
            print(f"  {name:<10} BLEU {metrics[f'{prefix}_bleu']:.2f}  chrF {metrics[f'{prefix}_chrf']:.2f}")
    if any(key.endswith("_bleu") for key in metrics):
        print(f"  ({summary['sacrebleu_signatures']['bleu_signature']})")
    print("Learned α per head (layer rows):")
    for kind, layers in summary["alphas"].items():
        for layer, row in enumerate(layers):
            print(f"  {kind:<12} layer {layer}: " + " ".join(f"{alpha:.2f}" for alpha in row))
    print(f"Saved to {output_dir} (loads with trust_remote_code=True; pipeline('translation') works).")


def main(argv: Sequence[str] | None = None) -> int:
    model_args, data_args, training_args = parse_arguments(sys.argv[1:] if argv is None else argv)
    summary = train(model_args, data_args, training_args)
    print_summary(summary, training_args.output_dir)
    return 0
