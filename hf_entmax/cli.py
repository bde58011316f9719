"""The `hf-entmax` command: a dispatcher that only wires subcommands."""

import difflib
import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType

from .errors import HfEntmaxError, HfEntmaxInterrupted, describe_os_error


# Each command is a module of hf_entmax.commands, imported only when it runs: their dependencies differ (datasets for
# train and demo, matplotlib for analyze), and importing all of them would add seconds to every call. Their one-line
# summaries live here, so that `hf-entmax --help` imports none of them.
SUBCOMMANDS = {
    "train": "train or fine-tune a model on a Hub dataset, local files or the built-in synthetic pair",
    "demo": "train a small model on the built-in synthetic pair, evaluate it and translate with it (offline)",
    "convert": "convert a MarianMT checkpoint (folder or Hub id) into an AdaptiveEntmaxMarian Hub-ready folder",
    "export": "write an AdaptiveEntmaxMarian model folder as a Hub-ready folder with a model card",
    "push": "upload a model folder's model files to the Hugging Face Hub (after checking they load without hf_entmax)",
    "analyze": "analyse the attention heads of a model (α, density, diversity, head roles): figures and a report",
    "sparsefinder": (
        "predict each head's entmax graph (Sparsefinder): sparsity–recall per head and BLEU per operating point"
    ),
    "translate": "translate a text file line by line; with --reference, score BLEU and chrF",
    "align": (
        "word-align sentences with their translations through cross-attention (Pharaoh format); carry markup over"
    ),
}


def subcommand(name: str) -> ModuleType:
    """The module of one command, with its ``main(arguments)``."""
    return importlib.import_module(f"{__package__}.commands.{name}")


def usage() -> str:
    lines = ["usage: hf-entmax <command> [arguments]  (hf-entmax <command> --help for its arguments)", "", "commands:"]
    width = max(map(len, SUBCOMMANDS))
    lines += [f"  {name:<{width}}  {summary}" for name, summary in SUBCOMMANDS.items()]
    return "\n".join(lines)


# Exit codes: 0 done, 1 an error (one line on stderr), 2 no or an unknown command, 130 stopped by Ctrl-C (128 + SIGINT,
# as shells report it).
EXIT_ERROR = 1
EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand. Every error a user or the machine can cause prints one line: the errors the commands
    foresee, and as a last resort any OSError (a full disk, a read-only folder) and Ctrl-C. Set HF_ENTMAX_DEBUG=1 for
    the traceback."""
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
        return subcommand(name).main(arguments)
    except (HfEntmaxInterrupted, KeyboardInterrupt) as error:
        if os.environ.get("HF_ENTMAX_DEBUG"):
            raise
        kept = f": {error}" if isinstance(error, HfEntmaxInterrupted) else ""
        print(f"hf-entmax {name}: interrupted{kept}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except HfEntmaxError as error:
        if os.environ.get("HF_ENTMAX_DEBUG"):
            raise
        print(f"hf-entmax {name}: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:
        # The reader of standard output went away (`hf-entmax translate ... | head`): nothing left to say to it.
        # Python would report the pipe again when it flushes stdout at exit, so stdout points at devnull from here.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    except OSError as error:
        if os.environ.get("HF_ENTMAX_DEBUG"):
            raise
        print(f"hf-entmax {name}: error: {describe_os_error(error)}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
