"""Speedup and parallel efficiency per (source, framework, backend, variant, gpus), with 95% intervals over seeds.

A variant (the values of the optional axes: batch per GPU, precision, compression, strong
scaling) is a series of its own, with its own base.

The base of a framework and backend is its smallest GPU count that has cells with
status ok (the ``base_gpus`` column says which): 1 GPU where it ran, 2 for fsdp (which
needs two ranks, so the matrix leaves its 1-GPU cells out), more where the smaller
cells failed. Only cells with status ok enter the ratios; the others are counted in
``excluded``.

Metrics: the total training time, the steady-state epoch time and the time to the target
validation IOU (training.target_iou). A cell that never reached the target is still used
for the other two; its time-to-target ratios just leave it out (``time_to_target_used``
counts the cells that entered them, ``time_to_target_interval`` is their interval method,
and the base is the base GPU count's cells that reached the target).

Ideal: the base's time scaled by ``ideal_factor``, base / N times the work of an epoch at N over the
base's. An epoch is one pass over the same training set at every GPU count (work 1), unless
``training.steps_per_epoch`` fixes its steps per replica, when its images grow with the global
batch (weak scaling: N / base). The speedup and efficiency of the epoch and total training times are
per unit of work (``speedup * base / N * work``), so a fixed-step study that keeps its epoch time as
GPUs are added is perfectly efficient, not 1/N. The time to target is a time to a quality, not to an
amount of work, and is not scaled.

Interval, per row (column ``interval``):
- ``paired t``: every seed at this GPU count also ran at the base: the speedup is the
  mean of the per-seed ratios base/cell, with a t-interval of those ratios;
- ``log-ratio t``: seeds differ: ratio of the means, with a Welch t-interval on the
  log of the ratio (delta method);
- ``none``: one seed (at this size or at the base), so no interval.

The ``model_`` columns: the epoch-time model of the series fitted to its cells in the form of
its scaling, weak or strong (its parameters, the prediction at twice the largest GPU count,
repeated on each row) and, per row, the fit at that GPU count, its split into compute, the
per-step floor (strong form) and communication, and the residual. The ``backtest_`` columns
(per series): the model refitted without the largest GPU count, its predicted efficiency
there beside the measured one; see scaling_model.py.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from scalebench.analysis.tables import table_frame
from scalebench.distributions import t_quantile
from scalebench.records.tables import SCALING
from scalebench.timing.scaling_model import GROUP, backtest, fit_series, row_columns, series_columns

METRICS = {"train_time_s": "train_time", "steady_epoch_s": "epoch_time", "time_to_target_s": "time_to_target"}
# Every usable cell has these; a cell may lack the others (a target never reached) and still count.
TIMINGS = ("train_time_s", "steady_epoch_s")
# Metrics a usable cell may lack: their own count of cells used and interval method.
PARTIAL = [name for metric, name in METRICS.items() if metric not in TIMINGS]
LEVEL = 0.95


def t_interval(values: np.ndarray) -> tuple[float, float, float]:
    """Mean and the 95% t-interval of `values` (NaN bounds for fewer than two)."""
    values = np.asarray(values, dtype=float)
    mean = float(values.mean()) if len(values) else math.nan
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = t_quantile(0.5 + LEVEL / 2, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def paired_speedup(base: pd.Series, cell: pd.Series) -> tuple[float, float, float]:
    """Mean and interval of base/cell over the seeds (both indexed by seed)."""
    return t_interval((base[cell.index] / cell).to_numpy())


def unpaired_speedup(base: np.ndarray, cell: np.ndarray) -> tuple[float, float, float]:
    """Ratio of the means; Welch t-interval on its logarithm (NaN bounds with one value on a side)."""
    base, cell = np.asarray(base, float), np.asarray(cell, float)
    ratio = base.mean() / cell.mean()
    if len(base) < 2 or len(cell) < 2:
        return ratio, math.nan, math.nan
    # Var(log mean) ~ s^2 / (n mean^2); Welch-Satterthwaite degrees of freedom.
    var_b = base.var(ddof=1) / (len(base) * base.mean() ** 2)
    var_c = cell.var(ddof=1) / (len(cell) * cell.mean() ** 2)
    se = math.sqrt(var_b + var_c)
    if se == 0:
        return ratio, ratio, ratio
    dof = (var_b + var_c) ** 2 / (var_b**2 / (len(base) - 1) + var_c**2 / (len(cell) - 1))
    half = t_quantile(0.5 + LEVEL / 2, dof) * se
    return ratio, ratio * math.exp(-half), ratio * math.exp(half)


def interval_method(base_seeds: set, cell_seeds: list) -> str:
    if len(cell_seeds) < 2 or len(base_seeds) < 2:
        return "none"
    if all(not pd.isna(s) for s in cell_seeds) and set(cell_seeds) <= base_seeds:
        return "paired t"
    return "log-ratio t"


def known(runs: pd.DataFrame, metric: str) -> pd.Series:
    return runs[metric].notna() & (runs[metric] > 0)


def usable(runs: pd.DataFrame, metric: str | None = None) -> pd.DataFrame:
    """Cells that enter the ratios: status ok and both timings known; with `metric`, those
    that know it too (a cell without a time to target still counts for the timings)."""
    ok = runs["status"].eq("ok")
    for timing in TIMINGS:
        ok &= known(runs, timing)
    if metric is not None:
        ok &= known(runs, metric)
    return runs[ok]


def epoch_work(cells: pd.DataFrame) -> float:
    """Images per epoch, in units that compare within one series (its cells share a dataset): the
    global batch with fixed steps per epoch (training.steps_per_epoch), else 1 (one pass over the
    training set); NaN where a fixed-step cell does not record its global batch."""
    steps = pd.to_numeric(cells.get("steps_per_epoch"), errors="coerce") if "steps_per_epoch" in cells else None
    if steps is None or steps.isna().all():
        return 1.0
    return float(pd.to_numeric(cells["global_batch"], errors="coerce").mean()) if "global_batch" in cells else math.nan


def ideal_factor(cells: pd.DataFrame, base: pd.DataFrame, gpus: int, base_gpus: int) -> float:
    """What the base's epoch time is multiplied by to give the ideal at `gpus` (module docstring)."""
    return base_gpus / gpus * epoch_work(cells) / epoch_work(base)


def base_gpus_of(good: pd.DataFrame) -> float:
    """The base of one framework and backend: the smallest GPU count among its usable cells (NaN: none)."""
    return int(good["gpus"].min()) if len(good) else math.nan


def scaling(runs: pd.DataFrame, per_node: int | None = None) -> pd.DataFrame:
    """One row per (source, framework, backend, gpus); see the module docstring. `per_node`: GPUs
    (ranks) a node holds, for the model's node step where a cell does not record its nodes."""
    rows = []
    for series, group in runs.groupby(GROUP, sort=True, dropna=False):
        model = fit_series(group, per_node)
        model_series = series_columns(model, backtest(group, model, per_node))
        good = usable(group)
        base_gpus = base_gpus_of(good)
        base = good[good["gpus"] == base_gpus]
        for gpus, cells in group.groupby("gpus", sort=True):
            used = good[good["gpus"] == gpus]
            row = {
                **dict(zip(GROUP, series, strict=True)),
                "gpus": int(gpus),
                "base_gpus": base_gpus,
                "cells": len(cells),
                "used": len(used),
                "excluded": len(cells) - len(used),
                "excluded_status": ", ".join(
                    f"{status} {count}"
                    for status, count in cells.loc[~cells.index.isin(used.index), "status"].value_counts().items()
                ),
            }
            row["interval"] = interval_method(set(base["seed"].dropna()), list(used["seed"]))
            if used.empty:
                row["interval"] = "no usable cells"
            work = ideal_factor(used, base, int(gpus), base_gpus) * gpus / base_gpus if len(used) else math.nan
            row["work_ratio"] = work
            for metric, name in METRICS.items():
                metric_base, metric_used = base[known(base, metric)], used[known(used, metric)]
                method = interval_method(set(metric_base["seed"].dropna()), list(metric_used["seed"]))
                if name in PARTIAL:
                    row[f"{name}_used"] = len(metric_used)
                    row[f"{name}_interval"] = method if len(metric_used) else "no cell reached it"
                row[f"{name}_mean_s"] = metric_used[metric].mean() if len(metric_used) else math.nan
                if metric_used.empty or metric_base.empty:
                    speedup = (math.nan, math.nan, math.nan)
                elif method == "paired t":
                    speedup = paired_speedup(
                        metric_base.set_index("seed")[metric], metric_used.set_index("seed")[metric]
                    )
                else:
                    speedup = unpaired_speedup(metric_base[metric].to_numpy(), metric_used[metric].to_numpy())
                if name != "time_to_target":  # per unit of work (module docstring)
                    speedup = tuple(value * work for value in speedup)
                for suffix, value in zip(("", "_lo", "_hi"), speedup):
                    row[f"speedup_{name}{suffix}"] = value
                    row[f"efficiency_{name}{suffix}"] = value * base_gpus / gpus
            iou = t_interval(used["iou"].dropna().to_numpy())
            row.update(iou_mean=iou[0], iou_lo=iou[1], iou_hi=iou[2])
            row["images_per_s_per_gpu_mean"] = used["images_per_s_per_gpu"].mean() if len(used) else math.nan
            rows.append(row | model_series | row_columns(model, int(gpus)))
    return table_frame(SCALING, rows)


def interval_summary(table: pd.DataFrame, name: str = "train_time") -> str:
    """A sentence for a figure's caption: which intervals the figure of metric `name` shows."""
    partial = name in PARTIAL
    counted = f"{name}_used" if partial else "used"
    used = table[table[counted] > 0]
    if used.empty:
        return "No cell with status ok reached the target yet." if partial else "No cell with status ok yet."
    methods = set(used[f"{name}_interval" if partial else "interval"])
    parts = []
    if "paired t" in methods:
        parts.append("95% t-interval of seed-paired ratios")
    if "log-ratio t" in methods:
        parts.append("95% Welch t-interval on the log ratio of means where seeds differ from the base")
    if "none" in methods:
        parts.append("no interval where only one seed ran")
    excluded = int(table["excluded"].sum())
    text = "; ".join(parts)
    text = text[0].upper() + text[1:] + "."
    if excluded:
        text += f" {excluded} cell(s) excluded (not ok)."
    if partial:
        never = int((table["used"] - table[counted]).sum())
        if never:
            text += f" {never} ok cell(s) never reached the target: left out here, used in the other figures."
    return text
