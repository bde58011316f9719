"""Command-line parsing shared by every `hf-entmax` command: a mistake on the command line is one line.

argparse answers a mistake with the usage of every flag and exits with 2; here it raises `HfEntmaxValueError`, which
`hf_entmax.cli` prints as ``hf-entmax <command>: error: …`` (exit code 1). A misspelled flag is named first, with
the flag it was probably meant to be, even when argparse would have complained about a missing required flag.
"""

import argparse
import difflib
from collections.abc import Sequence

from ..errors import HfEntmaxValueError


class OneLineErrors:
    """Mixin for an `argparse.ArgumentParser` (or transformers' `HfArgumentParser`): errors raise one line."""

    def error(self, message: str):
        raise HfEntmaxValueError(f"{message}; see {self.prog} --help")


def unknown_flags(parser: argparse.ArgumentParser, arguments: Sequence[str]) -> list[str]:
    """The ``--flags`` in ``arguments`` that ``parser`` does not know (``--flag=value`` counts as ``--flag``)."""
    return [
        argument
        for argument in arguments
        if argument.startswith("--") and argument.split("=", 1)[0] not in parser._option_string_actions
    ]


def unknown_flags_message(parser: argparse.ArgumentParser, unknown: Sequence[str]) -> str:
    """The unknown flags, each with the known flag it is closest to (for `OneLineErrors.error`)."""
    known = list(parser._option_string_actions)
    flags = [argument for argument in unknown if argument.startswith("-")] or list(unknown)
    parts = []
    for flag in flags:
        close = difflib.get_close_matches(flag.split("=", 1)[0], known, n=1)
        parts.append(f"{flag} (did you mean {close[0]}?)" if close else flag)
    return f"unknown argument{'s' if len(parts) > 1 else ''}: {', '.join(parts)}"


class CommandParser(OneLineErrors, argparse.ArgumentParser):
    """The parser of an argparse-based command (`convert`, `export`, `push`, `analyze`, `translate`).

    Flags are never abbreviated: ``--mod`` is a mistake, not ``--model``.
    """

    def __init__(self, prog: str, description: str | None = None):
        super().__init__(prog=prog, description=description, allow_abbrev=False)

    def parse_args(self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None):
        if args is not None and (unknown := unknown_flags(self, args)):
            self.error(unknown_flags_message(self, unknown))
        return super().parse_args(args, namespace)
