"""Which cells are not ok, why, and the exact command that reruns each one."""

from __future__ import annotations

import pandas as pd

from scalebench.analysis.collect import OWN_SOURCE
from scalebench.analysis.legacy import Skipped
from scalebench.cell import Cell

COLUMNS = ["item", "status", "reason", "rerun"]


def row_cell(row) -> Cell:
    return Cell(row["framework"], row["backend"], int(row["gpus"]), int(row["seed"]))


def cell_target(row) -> str:
    return f"{row_cell(row).folder}/metrics.jsonl"


def rerun_command(row, profile: str) -> str:
    """Missing outputs are rebuilt by naming them; where run.json exists (diverged, oom, a
    truncated record) --force makes Snakemake rerun that one job."""
    outputs_exist = row["status"] != "missing" and not row["reason"].startswith("no run.json")
    force = "--force " if outputs_exist else ""
    return f"snakemake --profile {profile} {force}{cell_target(row)}"


def incomplete(runs: pd.DataFrame, skipped: list[Skipped], profile: str) -> pd.DataFrame:
    """One row per own cell that is not ok and per skipped legacy file."""
    rows = []
    own = runs[(runs["source"] == OWN_SOURCE) & (runs["status"] != "ok")]
    for _, row in own.iterrows():
        item = row_cell(row).path
        rows.append(
            {"item": item, "status": row["status"], "reason": row["reason"], "rerun": rerun_command(row, profile)}
        )
    for skip in skipped:
        rows.append({"item": skip.path, "status": "skipped (legacy import)", "reason": skip.reason, "rerun": ""})
    return pd.DataFrame(rows, columns=COLUMNS)
