"""The study's run order as it happened (results/summary/order.csv), and drift over it (drift.csv).

order.csv: one row per cell of the study: its place in the drawn order (config/run_order.py), its
block, when it started and its place among the starts, its SLURM job and hosts, why it is not in
the host comparison (analysis/hosts.py), and its residuals: each measure of the cell (a steady
epoch's time, compute, exposed communication, data wait, medians over ranks: runs.csv) over the
geometric mean of its configuration's seeds (framework, backend, variant, GPUs). A residual
compares a cell with the same cell run at other times, so what is left is the time it ran in.

drift.csv: per measure, a line through the logarithms of the values against the hours since the
study's first start, within each configuration (a configuration's own level drops out, as a model
with one effect per configuration would have it; one of a single seed says nothing about time):
its change from the first start to the last with an interval (95%, Bonferroni over the measures),
and a verdict on whether the later cells ran slower. In a study run in a random order, drift
spreads over every backend instead of biasing one; this says whether there was any.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from scalebench.analysis.hosts import LEVEL, MATERIAL, difference, left_out, percent
from scalebench.analysis.tables import table_frame
from scalebench.cell import OWN_SOURCE, Cell
from scalebench.config import run_order
from scalebench.distributions import t_quantile
from scalebench.records.tables import DRIFT, KEYS, ORDER

CONFIGURATION = ["framework", "backend", "variant", "gpus"]  # a cell without its seed
MIN_DOF = 2  # a line with fewer degrees of freedom left gives no interval worth reading
# drift.csv's measures: runs.csv's column (per steady epoch, median over ranks), order.csv's residual
# column, and the words of a verdict
MEASURES = {
    "epoch": ("steady_epoch_s", "residual_epoch", "slower", "faster"),
    "compute": ("compute_median_s", "residual_compute", "slower", "faster"),
    "exposed communication": ("comm_exposed_median_s", "residual_comm_exposed", "longer", "shorter"),
    "data wait": ("data_wait_median_s", "residual_data_wait", "longer", "shorter"),
}
RESIDUALS = {measure: residual for measure, (_, residual, *_) in MEASURES.items()}


def drawn_places(cells: list[dict], order: dict, seeds: list[int]) -> dict[tuple, int]:
    """Each cell's place in the drawn order, from 1 (`cells`: collect_runs' entries, with settings)."""
    if order["seed"] is None:
        return {}
    study = [Cell.from_json(entry["settings"]["cell"]) for entry in cells]
    return {
        tuple(cell.key()[k] for k in KEYS): place
        for place, cell in enumerate(run_order.run_order(study, order, seeds), 1)
    }


def residuals(runs: pd.DataFrame) -> pd.DataFrame:
    """Per ok cell and measure: its value over the geometric mean of its configuration's ok cells
    (NaN where the configuration has one such cell, or a value is missing or not positive)."""
    ok = runs[runs["status"] == "ok"]
    table = pd.DataFrame(index=runs.index, columns=list(RESIDUALS.values()), dtype=float)
    for _, group in ok.groupby(CONFIGURATION, dropna=False):
        for measure, (column, *_) in MEASURES.items():
            values = pd.to_numeric(group[column], errors="coerce")
            values = values[np.isfinite(values) & (values > 0)]
            if len(values) > 1:
                table.loc[values.index, RESIDUALS[measure]] = values / math.exp(np.log(values).mean())
    return table


def order_table(
    runs: pd.DataFrame, ranks: pd.DataFrame, cells: list[dict], order: dict, seeds: list[int]
) -> pd.DataFrame:
    """order.csv (records/tables.py ORDER), in the order the cells started (those that never did last)."""
    own = runs[runs["source"] == OWN_SOURCE].reset_index(drop=True)
    places = drawn_places(cells, order, seeds)
    keys = [tuple(row[k] for k in KEYS) for _, row in own.iterrows()]
    starts = pd.to_datetime(own["start"], utc=True, errors="coerce")
    table = own[[*KEYS, "status", "start", "slurm_job_id", "hosts"]].copy()
    table["block"] = pd.array(
        [run_order.block_of(int(s), seeds) if order["blocks"] else None for s in own["seed"]], dtype="Int64"
    )
    table["run_order"] = pd.array([places.get(key) for key in keys], dtype="Int64")
    table["hours"] = (starts - starts.min()).dt.total_seconds() / 3600
    job = pd.to_numeric(own["slurm_job_id"], errors="coerce")
    by_start = pd.DataFrame({"start": starts, "job": job, "planned": table["run_order"]}).sort_values(
        ["start", "job", "planned"], na_position="last"
    )
    started = by_start.index[by_start["start"].notna()]
    table["start_order"] = pd.Series(range(1, len(started) + 1), index=started, dtype="Int64").reindex(table.index)
    table["host_analysis"] = left_out(own, ranks)
    table = pd.concat([table, residuals(own)], axis=1)
    return table.loc[by_start.index, ORDER.names].reset_index(drop=True)


def drift_table(order: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """drift.csv: per measure, the change of the residuals from the first start to the last."""
    fits = {measure: residual_rows(order, measure) for measure in MEASURES}
    tested = sum(1 for used in fits.values() if dof(used) >= MIN_DOF and used["hours"].nunique() > 1)
    rows = [drift_row(measure, used, max(tested, 1), typical_share(measure, runs)) for measure, used in fits.items()]
    return table_frame(DRIFT, rows)


def residual_rows(order: pd.DataFrame, measure: str) -> pd.DataFrame:
    """order.csv's cells with a residual of `measure` and a start."""
    values = pd.to_numeric(order[RESIDUALS[measure]], errors="coerce")
    return order[np.isfinite(values) & order["hours"].notna()]


def typical_share(measure: str, runs: pd.DataFrame) -> float:
    """The measure's share of a steady epoch in the study's ok cells (median), so that a drift of a
    part too small to matter is said to be so."""
    ok = runs[runs["status"] == "ok"]
    column = MEASURES[measure][0]
    value, epoch = pd.to_numeric(ok[column], errors="coerce").median(), ok["steady_epoch_s"].median()
    return float(value / epoch) if epoch and np.isfinite(value) else math.nan


@dataclass(frozen=True)
class Line:
    """The least-squares slope of the log residuals over the hours, within configurations."""

    slope: float  # per hour
    stderr: float
    dof: int
    hours: float  # the mean start of the cells it went through, where it crosses the residuals' centre


def dof(used: pd.DataFrame) -> int:
    """The degrees of freedom a line through `used` leaves: its cells less its configurations' means and the slope."""
    return len(used) - used.groupby(CONFIGURATION, dropna=False).ngroups - 1


def line(used: pd.DataFrame, measure: str) -> Line:
    """Time and log residual centred within each configuration (a configuration's level drops out),
    then the slope through the origin; its degrees of freedom count the configurations' means."""
    y = np.log(used[RESIDUALS[measure]].to_numpy(float, copy=True))
    x = used["hours"].to_numpy(float, copy=True)
    groups = used.groupby(CONFIGURATION, dropna=False).ngroup().to_numpy()
    for group in np.unique(groups):
        mine = groups == group
        x[mine], y[mine] = x[mine] - x[mine].mean(), y[mine] - y[mine].mean()
    spread = float((x * x).sum())
    slope = float((x * y).sum() / spread) if spread > 0 else math.nan
    left = dof(used)
    scatter = float(((y - slope * x) ** 2).sum() / left) if left > 0 else math.nan
    return Line(slope, math.sqrt(scatter / spread) if spread > 0 else math.nan, left, float(used["hours"].mean()))


def duration(hours: float) -> str:
    return f"{hours * 60:.0f} minutes" if hours < 1 else f"{hours:.1f} hours"


def drift_row(measure: str, used: pd.DataFrame, tested: int, share: float) -> dict:
    _, _, more, less = MEASURES[measure]
    cells = len(used)
    hours = float(used["hours"].max() - used["hours"].min()) if cells else math.nan
    row = {"measure": measure, "cells": cells, "hours": hours, "change": math.nan, "low": math.nan, "high": math.nan}
    if dof(used) < MIN_DOF:
        configurations = used.groupby(CONFIGURATION, dropna=False).ngroups
        return row | {
            "verdict": f"too few cells to tell ({cells} in {configurations} configuration"
            f"{'' if configurations == 1 else 's'} of several seeds; {configurations + MIN_DOF + 1} needed)"
        }
    if used["hours"].nunique() < 2:
        return row | {"verdict": "every cell started at the same time: no drift to tell"}
    fit = line(used, measure)
    if not math.isfinite(fit.slope):
        return row | {"verdict": "each configuration's cells started at the same time: no drift to tell"}
    half = t_quantile(1 - (1 - LEVEL) / (2 * tested), fit.dof) * fit.stderr
    change, low, high = (math.exp(b * hours) for b in (fit.slope, fit.slope - half, fit.slope + half))
    row |= {"change": change, "low": low, "high": high}
    span = f"over {duration(hours)}, {cells} cells"
    if not (low > 1 or high < 1):
        return row | {
            "verdict": f"no drift the cells can show ({(low - 1) * 100:+.0f}% to {(high - 1) * 100:+.0f}% {span})"
        }
    word = more if low > 1 else less
    if np.isfinite(share) and abs(change - 1) * share < MATERIAL:
        return row | {"verdict": f"no drift that matters: {word} by {percent(change)}, under 1% of an epoch ({span})"}
    return row | {"verdict": f"later cells {word} by {difference(change, low, high)} {span}"}


def read_order(path) -> pd.DataFrame:
    """order.csv as written ('' for no variant, job ids and hosts as text)."""
    frame = pd.read_csv(path, dtype=ORDER.text())
    frame["variant"] = frame["variant"].fillna("")
    frame["host_analysis"] = frame["host_analysis"].fillna("")
    return frame


def read_drift(path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=DRIFT.text())
