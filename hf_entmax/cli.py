"""The `hf-entmax` command: a dispatcher that only wires subcommands."""

import argparse
import os
import sys
from collections.abc import Sequence

from . import demo
from .errors import HfEntmaxError


SUBCOMMANDS = (demo,)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-entmax", description="Adaptively sparse (α-entmax) translation models for Hugging Face."
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for subcommand in SUBCOMMANDS:
        subcommand.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand. Known errors print one line (set HF_ENTMAX_DEBUG=1 for the traceback)."""
    arguments = build_parser().parse_args(argv)
    try:
        arguments.run(arguments)
    except HfEntmaxError as error:
        if os.environ.get("HF_ENTMAX_DEBUG"):
            raise
        print(f"hf-entmax {arguments.command}: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
