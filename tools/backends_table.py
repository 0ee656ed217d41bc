"""Render the docs' table of backends and the report's sentence about each from the registry
(scalebench/backends.py).

    python tools/backends_table.py            # print the table
    python tools/backends_table.py --write    # update docs/backends.md and report/workflow.rst between the markers

A unit test checks that both hold the current text, so a new registry entry reaches the docs
and the report with this command and nothing else.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "workflow" / "scripts"))
from generated_text import write_between  # noqa: E402
from scalebench.backends import about, markdown_table  # noqa: E402

DOC = ROOT / "docs" / "backends.md"
START, END = "<!-- backends-table:start -->", "<!-- backends-table:end -->"
REPORT = ROOT / "report" / "workflow.rst"
ABOUT_START, ABOUT_END = "{# backends-about:start #}", "{# backends-about:end #}"


def report_about() -> str:
    """The report's Jinja dict of what each backend is (the template reads only the config)."""
    entries = "".join(f"  {json.dumps(name)}: {json.dumps(text)},\n" for name, text in about().items())
    return "{% set about = {\n" + entries + "} %}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    if not args.write:
        print(markdown_table())
        return 0
    write_between(DOC, START, END, markdown_table(), newlines=True)
    write_between(REPORT, ABOUT_START, ABOUT_END, report_about(), newlines=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
