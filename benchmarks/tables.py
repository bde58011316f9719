"""Benchmark tables into the docs, so that no table is pasted by hand.

A benchmark called with ``--markdown README.md docs/benchmarks.md`` replaces, in each file, what lies between the
markers ``<!-- table:NAME -->`` and ``<!-- /table:NAME -->`` with the table NAME it measured (and the command that
measured it). A file holds the markers of the tables it shows (the README only the headline ones); a file with none of
a benchmark's markers gets all its tables appended; a new file is created.
"""

import os
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path


def measured_command(script: str, argv: Sequence[str] | None = None) -> str:
    """The command line that measured a table, as a reader would retype it from the repository root:
    ``python benchmarks/SCRIPT`` and ``argv`` (default: this process's arguments), with every absolute path made
    relative to the working directory, since a path of the measuring machine means nothing to the reader (and says
    where that machine keeps its files)."""

    def relative(argument: str) -> str:
        flag, equals, value = argument.partition("=") if argument.startswith("--") else ("", "", argument)
        if os.path.isabs(value):
            value = os.path.relpath(value)
        return f"{flag}{equals}{value}"

    arguments = sys.argv[1:] if argv is None else argv
    return shlex.join(["python", f"benchmarks/{script}", *map(relative, arguments)])


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- table:{name} -->", f"<!-- /table:{name} -->"


def write_tables(paths: list[str | Path], tables: dict[str, str]) -> None:
    """Put each Markdown table of ``tables`` (``{name: table}``) between its markers in each file of ``paths``."""
    for path in map(Path, paths):
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        shown = [name for name in tables if _markers(name)[0] in text]
        for name in shown or tables:
            start, end = _markers(name)
            block = f"{start}\n{tables[name].strip()}\n{end}"
            pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
            if pattern.search(text):
                text = pattern.sub(lambda _, block=block: block, text, count=1)
            else:
                text = f"{text.rstrip()}\n\n{block}\n" if text.strip() else f"{block}\n"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
