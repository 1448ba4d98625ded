"""The one report writer of the benchmarks: Markdown tables, the PASS / MISS lines of the targets, and a section of
a Markdown file replaced between its markers (other text kept)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

from .stats import Target


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A Markdown table as lines: the header, the separator, one line per row (cells as ``str``)."""
    lines = ["| " + " | ".join(str(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def target_lines(targets: Iterable[Target]) -> list[str]:
    """``- **PASS** name: detail`` per target (MISS, N/A alike)."""
    return [t.line() for t in targets]


def write_section(path: Path, name: str, text: str) -> None:
    """Replace (or append) the section ``name`` of ``path``, between ``<!-- name -->`` and ``<!-- /name -->``."""
    begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    block = f"{begin}\n{text.rstrip()}\n{end}\n"
    old = path.read_text() if path.exists() else "# Benchmark results\n\n"
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        _, tail = rest.split(end, 1)
        new = head + block + tail.lstrip("\n")
    else:
        new = old.rstrip("\n") + "\n\n" + block
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)
