"""Render docs/tables.md, the columns of the summary tables (runs.csv, epochs.csv, ...), from their one
definition (workflow/scripts/scalebench/analysis/tables.py).

    python tools/tables_reference.py            # print it
    python tools/tables_reference.py --write    # update docs/tables.md

A unit test checks that docs/tables.md is current, so the page can never drift from the tables.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "workflow" / "scripts"))
from generated_text import cell, print_or_write  # noqa: E402
from scalebench.analysis.tables import TABLES, Table  # noqa: E402

PAGE = ROOT / "docs" / "tables.md"
HEAD = """# The summary tables

`collect_runs` reads every cell's records ([records.md](records.md)) into two tables under
`results/summary/`: runs.csv, one row per cell, and epochs.csv, one row per epoch record; the
analysis adds cost.csv, rounds.csv and verdicts.csv ([report.md](report.md)). Every column below
is defined once, in `workflow/scripts/scalebench/analysis/tables.py`: the collector builds its
rows to these names and fails on a row with another set, and the analysis reads runs.csv and
epochs.csv back with these types. A number that could not be measured is empty, never 0; the
last column says when a column is empty and which column says why. An `int` column of runs.csv
or epochs.csv is written without a decimal point; a `float` one may hold a whole number as
`1.0`. *Copied*: the cell's record field of the same name, as it is (run.json for runs.csv, the
epoch record for epochs.csv).

This page is generated: `python tools/tables_reference.py --write`.
"""


def section(table: Table) -> str:
    lines = [f"## {table.name}: `{table.where}`", "", table.meaning, ""]
    lines += ["| column | type | unit | meaning | empty when |", "| --- | --- | --- | --- | --- |"]
    for column in table.columns:
        meaning = f"*copied*: {column.meaning}" if column.copied else column.meaning
        lines.append(f"| `{column.name}` | {column.type} | {column.unit} | {cell(meaning)} | {cell(column.empty)} |")
    return "\n".join(lines)


def page() -> str:
    return "\n\n".join([HEAD.rstrip(), *(section(table) for table in TABLES)]) + "\n"


if __name__ == "__main__":
    sys.exit(print_or_write(page(), PAGE, __doc__))
