"""Writing generated text into a document between two marker lines (the configuration reference,
the backends' table, the report's sentence about each backend) or as a whole page (docs/records.md,
docs/tables.md), shared by the tools that do it."""

from __future__ import annotations

import argparse
from pathlib import Path


def write_between(path: Path, start: str, end: str, text: str, newlines: bool = True) -> None:
    """Replace what lies between `start` and `end` in `path` by `text` (on lines of its own when
    `newlines`), keeping the markers and everything around them."""
    head, rest = path.read_text().split(start)
    _, tail = rest.split(end)
    gap = "\n" if newlines else ""
    path.write_text(f"{head}{start}{gap}{text}{gap}{end}{tail}")


def cell(text: str) -> str:
    """`text` as a Markdown table cell."""
    return text.replace("|", "\\|")


def print_or_write(page: str, path: Path, description: str) -> int:
    """A page tool's command line: print the page, or with --write replace `path` by it."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--write", action="store_true")
    if parser.parse_args().write:
        path.write_text(page)
    else:
        print(page, end="")
    return 0
