"""Render the docs' table of backends from the registry (scalebench/backends.py).

    python tools/backends_table.py            # print it
    python tools/backends_table.py --write    # update docs/backends.md between the markers

A unit test checks that docs/backends.md holds the current table, so a new registry entry
reaches the docs with this command and nothing else.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "workflow" / "scripts"))
from scalebench.backends import markdown_table  # noqa: E402

DOC = ROOT / "docs" / "backends.md"
START, END = "<!-- backends-table:start -->", "<!-- backends-table:end -->"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    if not args.write:
        print(markdown_table())
        return 0
    head, rest = DOC.read_text().split(START)
    _, tail = rest.split(END)
    DOC.write_text(f"{head}{START}\n{markdown_table()}\n{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
