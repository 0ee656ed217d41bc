"""The collective benchmark's tables: every cell's collectives.csv gathered into
results/summary/collectives.csv (its keys, nodes and device beside each size), and each backend's
figures at the model's gradient size (the report's table).

Only the cells' files are read (train/collectives.py writes them); a cell without one (one GPU,
not run yet, or trained before the benchmark existed) adds no rows: runs.csv says why for each.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from scalebench import records
from scalebench.analysis.tables import no_variant_as_empty
from scalebench.cell import cell_path
from scalebench.records.tables import CELL_COLLECTIVES, COLLECTIVES, KEYS

# the reduction a step's gradients go through: an all-reduce, or DataParallel's reduce onto its first GPU
GRADIENT_OPS = ("all_reduce", "reduce")
AT_GRADIENT_COLUMNS = [
    "framework",
    "backend",
    "variant",
    "gpus",
    "nodes",
    "device",
    "op",
    "library",
    "bytes",
    "seeds",
    "measured",
    "latency_us",
    "algbw_gbps",
    "busbw_gbps",
    "reason",
]


def cell_facts(folder: Path) -> dict:
    """Where a cell ran, from its run.json (records/tables.py COLLECTIVE_CELL: a GPU or the CPU, one node or
    several), empty where it has none that can be read."""
    try:
        run = json.loads((folder / "run.json").read_text())
    except (OSError, ValueError):
        run = {}
    if not isinstance(run, dict):
        run = {}
    run = records.read_run(run)
    return {
        "nodes": run.get("nodes"),
        "device": (run.get("training") or {}).get("device"),  # cuda or cpu, as the cell resolved it
        "model_width": run.get("model_width"),
        "gradient_bytes": run.get("gradient_bytes"),
    }


def gather(runs_root: str | Path, cells: list[dict]) -> pd.DataFrame:
    """results/summary/collectives.csv: the rows of every cell of `cells` (their keys) that has a table."""
    frames = []
    for entry in cells:
        keys = {key: entry.get(key, "") for key in KEYS}
        folder = Path(runs_root) / cell_path(**keys)
        if not (folder / CELL_COLLECTIVES.name).exists():
            continue
        rows = pd.read_csv(folder / CELL_COLLECTIVES.name, dtype=CELL_COLLECTIVES.text())
        frames.append(rows.assign(**keys, **cell_facts(folder)))
    return typed(pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLLECTIVES.names))


def typed(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.reindex(columns=COLLECTIVES.names)
    frame["variant"] = no_variant_as_empty(frame["variant"])
    for column in COLLECTIVES.of_type("int"):
        frame[column] = pd.to_numeric(frame[column]).astype("Int64")
    for column in COLLECTIVES.of_type("float"):
        frame[column] = pd.to_numeric(frame[column])
    frame["reason"] = frame["reason"].fillna("")
    return frame.sort_values([*KEYS, "op", "bytes"], kind="stable").reset_index(drop=True)


def read(path: str | Path) -> pd.DataFrame:
    """results/summary/collectives.csv back, typed."""
    try:
        frame = pd.read_csv(path, dtype=COLLECTIVES.text())
    except pd.errors.EmptyDataError:
        frame = pd.DataFrame(columns=COLLECTIVES.names)
    return typed(frame)


def at_gradient(frame: pd.DataFrame) -> pd.DataFrame:
    """Per framework, backend, variant and GPU count: the gradient reduction at the model's gradient
    size, the median over seeds of the measured ones, and why the others were not."""
    rows = frame[(frame["size"] == "gradient") & frame["op"].isin(GRADIENT_OPS)]
    table = []
    for key, group in rows.groupby(["framework", "backend", "variant", "gpus", "op"], sort=True):
        measured = group[group["latency_us"].notna()]
        reasons = sorted(set(group.loc[group["latency_us"].isna(), "reason"]) - {""})
        table.append(
            {
                **dict(zip(["framework", "backend", "variant", "gpus", "op"], key, strict=True)),
                "nodes": group["nodes"].max(),
                "device": ", ".join(sorted(set(group["device"].dropna()))),
                "library": ", ".join(sorted(set(group["library"].dropna()))),
                "bytes": int(group["bytes"].median()),
                "seeds": len(group),
                "measured": len(measured),
                "latency_us": measured["latency_us"].median(),
                "algbw_gbps": measured["algbw_gbps"].median(),
                "busbw_gbps": measured["busbw_gbps"].median(),
                "reason": "; ".join(reasons),
            }
        )
    return pd.DataFrame(table, columns=AT_GRADIENT_COLUMNS)
