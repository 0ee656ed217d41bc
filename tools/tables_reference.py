"""Render docs/tables.md, the columns of every table a study writes (bill.csv, runs.csv, ...), from their
one definition (workflow/scripts/scalebench/records/tables.py).

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
from scalebench.records.fields import Record  # noqa: E402
from scalebench.records.tables import TABLES  # noqa: E402

PAGE = ROOT / "docs" / "tables.md"
HEAD = """# The tables a study writes

Every CSV a study writes is defined once, in `workflow/scripts/scalebench/records/tables.py`, by
the machinery that defines the records a cell writes ([records.md](records.md)): the planner's
bill.csv and submitted.csv under `results/plan/`, a cell's collectives.csv, and the summary tables
under `results/summary/`. `collect_runs` reads every cell's records into runs.csv (one row per
cell), epochs.csv (one row per epoch record), provenance.csv, incomplete.csv and ranks.csv; the
analysis derives the others from them ([report.md](report.md)). Each writer builds its rows to these
names and takes its header from here (a row that names another column fails), the readers take the
names and the text columns from here, and the tests compare every writer's file and a finished
study's tables with these columns, naming any that differ. A number that could not be measured is
empty, never 0; the last column says when a column is empty and which column says why. An `int`
column of runs.csv or epochs.csv is written without a decimal point; a `float` one may hold a whole
number as `1.0`. *Copied*: the field of the same name of what the table is made from, as it is
(run.json for runs.csv, the epoch record for epochs.csv, submitted.csv for cost.csv).

This page is generated: `python tools/tables_reference.py --write`.
"""


def section(table: Record) -> str:
    lines = [f"## {table.name}: `{table.where}`", "", table.meaning, ""]
    if table.open:
        lines += ["After these columns it may hold more (above).", ""]
    lines += ["| column | type | unit | meaning | empty when |", "| --- | --- | --- | --- | --- |"]
    for column in table.fields:
        meaning = f"*copied*: {column.meaning}" if column.copied else column.meaning
        lines.append(f"| `{column.name}` | {column.type} | {column.unit} | {cell(meaning)} | {cell(column.empty)} |")
    return "\n".join(lines)


def page() -> str:
    return "\n\n".join([HEAD.rstrip(), *(section(table) for table in TABLES)]) + "\n"


if __name__ == "__main__":
    sys.exit(print_or_write(page(), PAGE, __doc__))
