"""What the commands that write a Hub-ready folder (`convert`, `export`) share: flags and the final check."""

import argparse

from ..hub.export import is_shard_size
from ..hub.load_check import check_folder_loads


def add_hub_folder_arguments(parser: argparse.ArgumentParser) -> None:
    """``--repo_id``, ``--max_shard_size``, ``--overwrite`` and ``--check_load/--no-check_load``."""
    parser.add_argument("--repo_id", default=None, help="The repo id you will push to, for the card's usage example.")
    parser.add_argument(
        "--max_shard_size",
        default="2GB",
        type=shard_size,
        help="Write several safetensors shards above this size (e.g. 500MB, 2GB).",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="Replace --output whole even if it is not an earlier export left as it was written (files edited or "
        "added since, another command's output).",
    )
    parser.add_argument(
        "--check_load",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="After writing, load the folder in a fresh process without hf_entmax and compare outputs.",
    )


def shard_size(value: str) -> str:
    """``--max_shard_size`` checked as the command line is parsed (it is used only after the model is loaded)."""
    if not is_shard_size(value):
        raise argparse.ArgumentTypeError(f"expected a size such as 500MB or 2GB, got {value!r}")
    return value


def check_written_folder(args: argparse.Namespace) -> None:
    """Unless ``--no-check_load``: prove the folder in ``args.output`` loads without hf_entmax, and say so."""
    if args.check_load:
        check_folder_loads(args.output)
        print("Checked: the folder loads in a fresh process without hf_entmax and gives identical outputs.")
