"""Benchmark tables into the docs, so that no table is pasted by hand.

A benchmark called with ``--markdown docs/benchmarks.md`` replaces, in that file, what lies between the markers
``<!-- table:NAME -->`` and ``<!-- /table:NAME -->`` with the table it measured (and the command that measured it).
A file without the markers gets the marked table appended; a new file is created.
"""

import re
from pathlib import Path


def write_table(path: str | Path, name: str, table: str) -> None:
    """Put ``table`` (Markdown) between the ``name`` markers of the file at ``path``."""
    path = Path(path)
    start, end = f"<!-- table:{name} -->", f"<!-- /table:{name} -->"
    block = f"{start}\n{table.strip()}\n{end}"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text, count=1)
    else:
        text = f"{text.rstrip()}\n\n{block}\n" if text.strip() else f"{block}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
