"""results/summary/ranks.csv: one row per cell, epoch and rank, from the epoch records' `ranks`.

Each epoch record holds every rank's own step split (records/definitions.py RANK, written by
train/step_timing.py). Here they become a table with the cell's keys, when the cell started and
its SLURM job, so that analyses across cells (slow hosts and drift: analysis/hosts.py; the loss
waterfall) read ranks without opening every cell's metrics.jsonl. records/tables.py defines the columns (RANKS).

Cells whose epoch records have no per-rank rows (recorded before the step split, with
training.step_split off, imported legacy logs) have no rows here; runs.csv's step_split_reason
says why.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from scalebench import measures
from scalebench.analysis.tables import no_variant_as_empty
from scalebench.cell import cell_path
from scalebench.records import read_metrics, read_run
from scalebench.records.definitions import EPOCH
from scalebench.records.tables import KEYS, RANK_FIGURES, RANKS, names

# the rank's figures, as the rank record defines them (all but its number and host)
RANK_VALUES = names(RANK_FIGURES)


def cell_ranks(folder: Path, keys: dict) -> pd.DataFrame:
    """The rows of one cell folder: every rank of every epoch record that has per-rank rows."""
    metrics = folder / "metrics.jsonl"
    if not metrics.exists():
        return pd.DataFrame(columns=RANKS.names)
    run = {}
    if (folder / "run.json").exists():
        try:
            run = json.loads((folder / "run.json").read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            run = {}
    run = read_run(run if isinstance(run, dict) else {})
    epochs, profiled, ranks, records = [], [], [], []
    for line in read_metrics(metrics)[0]:
        if line.get("type") != "epoch" or not EPOCH.read(line).get("ranks"):
            continue
        record = EPOCH.read(line)
        records.append(record)
        # the ranks' names are RANK's own (RANKS): read in bulk, a million rank-epochs in seconds
        epochs.append((record.get("epoch"), len(line["ranks"])))
        profiled.append(measures.unsteady(record))
        ranks += line["ranks"]
    frame = pd.DataFrame.from_records(ranks, columns=["rank", "host", *RANK_VALUES])
    for name in RANK_VALUES:  # a missing or non-finite figure reads as NaN, never 0 (measures.finite_number)
        values = pd.to_numeric(frame[name], errors="coerce").astype(float)
        frame[name] = values.where(np.isfinite(values))
    counts = [count for _, count in epochs]
    # each epoch's set of nodes: a requeued cell resumed elsewhere is two allocations (measures.placement)
    frame.insert(0, "node_set", np.repeat(measures.placement(records).per_epoch, counts))
    frame.insert(0, "unsteady", np.repeat(profiled, counts).astype(bool))
    frame.insert(0, "epoch", np.repeat([number for number, _ in epochs], counts))
    cell = {**keys, "start": run.get("start"), "slurm_job_id": (run.get("slurm") or {}).get("job_id")}
    for position, name in enumerate([*KEYS, "start", "slurm_job_id"]):
        frame.insert(position, name, cell[name])
    return frame[RANKS.names]


def collect_ranks(runs_root: str | Path, cells: list[dict]) -> pd.DataFrame:
    """ranks.csv of the study's cells (`cells`: each cell's keys, as collect_runs gets them)."""
    frames = [pd.DataFrame(columns=RANKS.names)]
    for entry in cells:
        keys = {name: entry.get(name, "") for name in KEYS}
        frames.append(cell_ranks(Path(runs_root) / cell_path(**keys), keys))
    return ranks_frame(pd.concat([f for f in frames if len(f)] or frames, ignore_index=True))


def ranks_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """ranks.csv's types: the cell's keys as runs.csv has them ('' for no variant), hosts and job ids as text."""
    frame = frame.reindex(columns=RANKS.names)
    frame["variant"] = no_variant_as_empty(frame["variant"])
    for column in ("gpus", "seed", "epoch", "node_set", "rank"):
        frame[column] = frame[column].astype("Int64")
    frame["unsteady"] = frame["unsteady"].astype(bool)
    return frame


def read_ranks(path: str | Path) -> pd.DataFrame:
    try:
        return ranks_frame(pd.read_csv(path, dtype=RANKS.text()))
    except pd.errors.EmptyDataError:
        return ranks_frame(pd.DataFrame(columns=RANKS.names))
