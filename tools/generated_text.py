"""Writing generated text into a document between two marker lines (the configuration reference,
the backends' table, the report's sentence about each backend), shared by the tools that do it."""

from __future__ import annotations

from pathlib import Path


def write_between(path: Path, start: str, end: str, text: str, newlines: bool = True) -> None:
    """Replace what lies between `start` and `end` in `path` by `text` (on lines of its own when
    `newlines`), keeping the markers and everything around them."""
    head, rest = path.read_text().split(start)
    _, tail = rest.split(end)
    gap = "\n" if newlines else ""
    path.write_text(f"{head}{start}{gap}{text}{gap}{end}{tail}")
