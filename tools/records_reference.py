"""Render docs/records.md, the fields of every record a cell writes, from their one definition
(workflow/scripts/scalebench/records/definitions.py).

    python tools/records_reference.py            # print it
    python tools/records_reference.py --write    # update docs/records.md

A unit test checks that docs/records.md is current, so the page can never drift from the records.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "workflow" / "scripts"))
from generated_text import cell, print_or_write  # noqa: E402
from scalebench.records.definitions import RECORDS  # noqa: E402
from scalebench.records.fields import Field, Record  # noqa: E402

PAGE = ROOT / "docs" / "records.md"
HEAD = """# The records a cell writes

Each cell's folder holds `metrics.jsonl` (one epoch record per line, then the final record) and
`run.json` (where and with what it ran, and how it ended). Every field below is defined once, in
`workflow/scripts/scalebench/records/definitions.py`: the writers' records are tested against it
and the analysis (runs.csv, epochs.csv) reads through it, so a field renamed on one side fails a
test instead of reading as empty. A field that could not be measured is empty (`null`), never 0;
the last column says when it is empty and which field says why. Records written by earlier
versions still read: a field they lack reads as not measured, with the reason in runs.csv,
fields marked *old* appear only in them, and a field or word renamed since reads under today's
name (the compatibility reader, `records.read_run`; the list is at the end of this page).

This page is generated: `python tools/records_reference.py --write`.
"""


def section(record: Record) -> str:
    lines = [f"## {record.name}: {record.where}", "", record.meaning]
    if record.open:
        lines += ["", "It may hold names beyond these (see above)."]
    lines += ["", "| field | type | unit | meaning | empty when |", "| --- | --- | --- | --- | --- |"]
    for field in record.fields:
        meaning = f"*old*: {field.meaning}" if field.old else field.meaning
        part = f" (below: {field.part.name})" if field.part is not None else ""
        empty = f"{field.empty}; left out {field.absent}" if field.absent else field.empty
        lines.append(
            f"| `{field.name}` | {field.type} | {field.unit} | {cell(meaning)}{part}{renamed(field)} | {cell(empty)} |"
        )
    return "\n".join(lines)


def renamed(field: Field) -> str:
    """What earlier versions wrote instead, for the meaning column."""
    said = [f"`{old}` reads as `{today}`" for old, today in field.old_words]
    if field.was:
        said.insert(0, f"earlier records call it `{field.was}`")
    return f" ({'; '.join(said)})" if said else ""


def changes() -> str:
    """The renamed fields and words of every record, each with the record it is in."""
    lines = [
        "## Renamed since earlier versions",
        "",
        "One name for one thing: a field that meant another thing than its name says elsewhere in the code "
        "was renamed, and a word was made the one the rest of the records use. Records written before read "
        "under today's names (`records.read_run`), so finished studies stay readable.",
        "",
    ]
    for record in RECORDS:
        for field in record.fields:
            if field.was:
                lines.append(f"- {record.where}: `{field.was}` is now `{field.name}` ({field.meaning}).")
            for old, today in field.old_words:
                lines.append(f"- {record.where}: `{field.name}` `{old}` reads as `{today}`.")
    return "\n".join(lines)


def page() -> str:
    return "\n\n".join([HEAD.rstrip(), *(section(record) for record in RECORDS), changes()]) + "\n"


if __name__ == "__main__":
    sys.exit(print_or_write(page(), PAGE, __doc__))
