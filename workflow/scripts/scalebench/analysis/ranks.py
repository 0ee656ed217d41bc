"""results/summary/ranks.csv: one row per cell, epoch and rank, from the epoch records' `ranks`.

Each epoch record holds every rank's own step split (records/definitions.py RANK, written by
train/step_timing.py). Here they become a table with the cell's keys, when the cell started and
its SLURM job, so that analyses across cells (slow hosts and drift: analysis/hosts.py; the loss
waterfall) read ranks without opening every cell's metrics.jsonl. docs/report.md defines the columns.

Cells whose epoch records have no per-rank rows (recorded before the step split, with
training.step_split off, imported legacy logs) have no rows here; runs.csv's step_split_reason
says why.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from scalebench.analysis.collect import KEYS, no_variant_as_empty
from scalebench.cell import cell_path
from scalebench.measures import finite_number
from scalebench.records import read_metrics, read_run
from scalebench.records.definitions import EPOCH, RANK

# the rank's figures, as RANK defines them (all but its number and host)
RANK_VALUES = [name for name in RANK.names if name not in ("rank", "host")]
COLUMNS = [*KEYS, "start", "slurm_job_id", "epoch", "profiled", "rank", "host", *RANK_VALUES]


def cell_ranks(folder: Path, keys: dict) -> list[dict]:
    """The rows of one cell folder: every rank of every epoch record that has per-rank rows."""
    metrics = folder / "metrics.jsonl"
    if not metrics.exists():
        return []
    run = {}
    if (folder / "run.json").exists():
        try:
            run = json.loads((folder / "run.json").read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            run = {}
    run = read_run(run if isinstance(run, dict) else {})
    cell = {**keys, "start": run.get("start"), "slurm_job_id": (run.get("slurm") or {}).get("job_id")}
    rows = []
    for line in read_metrics(metrics)[0]:
        if line.get("type") != "epoch":
            continue
        record = EPOCH.read(line)
        for rank in record.get("ranks") or []:
            rows.append(
                {
                    **cell,
                    "epoch": record.get("epoch"),
                    "profiled": bool(record.get("profiled")),
                    "rank": rank.get("rank"),
                    "host": rank.get("host"),
                    **{name: finite_number(rank.get(name)) for name in RANK_VALUES},
                }
            )
    return rows


def collect_ranks(runs_root: str | Path, cells: list[dict]) -> pd.DataFrame:
    """ranks.csv of the study's cells (`cells`: each cell's keys, as collect_runs gets them)."""
    rows = []
    for entry in cells:
        keys = {name: entry.get(name, "") for name in KEYS}
        rows += cell_ranks(Path(runs_root) / cell_path(**keys), keys)
    return ranks_frame(pd.DataFrame(rows, columns=COLUMNS))


def ranks_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """ranks.csv's types: the cell's keys as runs.csv has them ('' for no variant), hosts and job ids as text."""
    frame = frame.reindex(columns=COLUMNS)
    frame["variant"] = no_variant_as_empty(frame["variant"])
    for column in ("gpus", "seed", "epoch", "rank"):
        frame[column] = frame[column].astype("Int64")
    frame["profiled"] = frame["profiled"].astype(bool)
    return frame


def read_ranks(path: str | Path) -> pd.DataFrame:
    text = {"framework": str, "backend": str, "variant": str, "host": str, "slurm_job_id": str, "start": str}
    try:
        return ranks_frame(pd.read_csv(path, dtype=text))
    except pd.errors.EmptyDataError:
        return ranks_frame(pd.DataFrame(columns=COLUMNS))
