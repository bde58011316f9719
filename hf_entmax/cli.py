"""The `hf-entmax` command: a dispatcher that only wires subcommands."""

import difflib
import os
import sys
from collections.abc import Sequence

from .commands import analyze, convert, demo, export, push, sparsefinder, train, translate
from .errors import HfEntmaxError


SUBCOMMANDS = {
    "train": train,
    "demo": demo,
    "convert": convert,
    "export": export,
    "push": push,
    "analyze": analyze,
    "sparsefinder": sparsefinder,
    "translate": translate,
}


def usage() -> str:
    lines = ["usage: hf-entmax <command> [arguments]  (hf-entmax <command> --help for its arguments)", "", "commands:"]
    width = max(map(len, SUBCOMMANDS))
    lines += [f"  {name:<{width}}  {module.HELP}" for name, module in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand. Known errors print one line (set HF_ENTMAX_DEBUG=1 for the traceback)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, arguments = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        close = difflib.get_close_matches(name, SUBCOMMANDS, n=1)
        suggestion = f"did you mean {close[0]}? " if close else ""
        print(
            f"hf-entmax: error: unknown command {name!r} ({suggestion}commands: {', '.join(SUBCOMMANDS)}); "
            "see hf-entmax --help",
            file=sys.stderr,
        )
        return 2
    try:
        return SUBCOMMANDS[name].main(arguments)
    except HfEntmaxError as error:
        if os.environ.get("HF_ENTMAX_DEBUG"):
            raise
        print(f"hf-entmax {name}: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
