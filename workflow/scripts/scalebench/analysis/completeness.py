"""Which cells are not ok, why, and the exact commands that rerun each one and all of them;
and which cells the matrix left out (a pair that does not exist, a layout the backend cannot run)."""

from __future__ import annotations

import pandas as pd

from scalebench.analysis.legacy import Skipped
from scalebench.analysis.submissions import NEVER_STARTED
from scalebench.analysis.tables import table_frame
from scalebench.cell import OWN_SOURCE, RUNS_ROOT, cell_path
from scalebench.config import LeftOut
from scalebench.records.tables import INCOMPLETE
from scalebench.rerun import Invocation

ALL_ITEM = "all of the above"
LEFT_OUT = "left out"


def row_path(row) -> str:
    """The cell's folder below the runs root, from its keys in runs.csv."""
    return cell_path(row["framework"], row["backend"], row["variant"], int(row["gpus"]), int(row["seed"]))


def cell_target(row) -> str:
    return f"{RUNS_ROOT}/{row_path(row)}/metrics.jsonl"


def needs_force(row) -> bool:
    """Missing outputs are rebuilt by naming them; where run.json exists (diverged, oom, stale,
    a truncated record) --force makes Snakemake rerun that one job; a job sbatch refused left no outputs."""
    return row["status"] != "missing" and not row["reason"].startswith(("no run.json", NEVER_STARTED))


def incomplete(
    runs: pd.DataFrame, skipped: list[Skipped], invocation: Invocation, left_out: list[dict] = ()
) -> pd.DataFrame:
    """One row per own cell that is not ok (with the command that reruns it as the study was
    run), one that reruns them all at once, one per skipped legacy file, and one per entry of
    `left_out` (scalebench.config.LeftOut as a dict: pairs and GPU counts the matrix does not run)."""
    rows = []
    own = runs[(runs["source"] == OWN_SOURCE) & (runs["status"] != "ok")]
    for _, row in own.iterrows():
        command = invocation.command([cell_target(row)], force=needs_force(row))
        rows.append({"item": row_path(row), "status": row["status"], "reason": row["reason"], "rerun": command})
    if len(own) > 1:
        targets = [cell_target(row) for _, row in own.iterrows()]
        force = any(needs_force(row) for _, row in own.iterrows())
        reason = f"{len(own)} cells"
        rows.append({"item": ALL_ITEM, "status": "", "reason": reason, "rerun": invocation.command(targets, force)})
    for skip in skipped:
        rows.append({"item": skip.path, "status": "skipped (legacy import)", "reason": skip.reason, "rerun": ""})
    for entry in (LeftOut(**{**fields, "gpus": tuple(fields["gpus"])}) for fields in left_out):
        rows.append({"item": entry.item, "status": LEFT_OUT, "reason": entry.reason, "rerun": ""})
    return table_frame(INCOMPLETE, rows)
