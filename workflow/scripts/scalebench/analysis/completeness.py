"""Which cells are not ok, why, and the exact commands that rerun each one and all of them."""

from __future__ import annotations

import pandas as pd

from scalebench.analysis.collect import OWN_SOURCE
from scalebench.analysis.legacy import Skipped
from scalebench.cell import Cell
from scalebench.rerun import Invocation

COLUMNS = ["item", "status", "reason", "rerun"]
ALL_ITEM = "all of the above"


def row_cell(row) -> Cell:
    return Cell(row["framework"], row["backend"], int(row["gpus"]), int(row["seed"]))


def cell_target(row) -> str:
    return f"{row_cell(row).folder}/metrics.jsonl"


def needs_force(row) -> bool:
    """Missing outputs are rebuilt by naming them; where run.json exists (diverged, oom, stale,
    a truncated record) --force makes Snakemake rerun that one job."""
    return row["status"] != "missing" and not row["reason"].startswith("no run.json")


def incomplete(runs: pd.DataFrame, skipped: list[Skipped], invocation: Invocation) -> pd.DataFrame:
    """One row per own cell that is not ok (with the command that reruns it as the study was
    run), one that reruns them all at once, and one per skipped legacy file."""
    rows = []
    own = runs[(runs["source"] == OWN_SOURCE) & (runs["status"] != "ok")]
    for _, row in own.iterrows():
        command = invocation.command([cell_target(row)], force=needs_force(row))
        rows.append({"item": row_cell(row).path, "status": row["status"], "reason": row["reason"], "rerun": command})
    if len(own) > 1:
        targets = [cell_target(row) for _, row in own.iterrows()]
        force = any(needs_force(row) for _, row in own.iterrows())
        reason = f"{len(own)} cells"
        rows.append({"item": ALL_ITEM, "status": "", "reason": reason, "rerun": invocation.command(targets, force)})
    for skip in skipped:
        rows.append({"item": skip.path, "status": "skipped (legacy import)", "reason": skip.reason, "rerun": ""})
    return pd.DataFrame(rows, columns=COLUMNS)
