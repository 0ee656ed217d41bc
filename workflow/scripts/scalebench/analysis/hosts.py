"""Slow hosts, from every rank of every cell (results/summary/hosts.csv).

A node that is slow in every job it runs (a throttled GPU, a noisy neighbour, a slow local disk)
shows in every cell it touches, but each cell names only its own straggler rank. Here the ranks
of the whole study are pooled by host, in a way that separates the host from the cell:

1. In each cell and steady epoch (after the first; a profiled one left out), each rank's compute,
   exposed communication and data wait is compared with the same epoch's ranks on *other* hosts
   (the median over those hosts of each one's median rank, so that each host counts once): the
   log of their ratio. The cell's own speed (its backend, GPU count, the hour it ran) is the same
   on both sides and drops out; a cell whose ranks all ran on one host compares nothing.
2. A host's rank-epochs in one cell are averaged: one value per cell, since a cell's epochs and
   ranks share its allocation and are not independent of each other. A cell whose epochs ran on
   two sets of nodes (a requeued job that resumed elsewhere: ranks.csv node_set) counts as two cells.
3. Over the cells a host touched: the mean and a t interval (95%, Bonferroni-corrected over the
   hosts compared, so that a study of 64 nodes does not find 3 slow ones by chance), as a ratio.

The verdict names a host slower (or faster) only where the interval clears a margin of 5% (not
just 1: a node 2% slower is not worth excluding, and a study without a slow node then names none
but by a chance far below the interval's 5%) and the difference costs at least 1% of an epoch (the
host's excess seconds over the other ranks' epoch time): a data wait twice as long as the others'
is no slow node when it is a millisecond. In synchronous
training the ranks that are not slow wait for the slow one inside the reduction, so their exposed
communication grows: a host slower in exposed communication alone is not called a slow node
(`slow_node`), and only compute and data wait give the command that reruns a host's cells without it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from scalebench.analysis.completeness import cell_target
from scalebench.analysis.tables import table_frame
from scalebench.cell import OWN_SOURCE
from scalebench.distributions import t_quantile
from scalebench.records.tables import HOSTS, KEYS
from scalebench.rerun import Invocation

LEVEL = 0.95
MIN_CELLS = 3  # fewer cells give no interval worth reading
MATERIAL = 0.01  # a host's excess below 1% of an epoch is no slower host, whatever its ratio
MARGIN = 0.05  # nor is one whose interval does not clear 5%: not worth a node, and chance alone never does
# hosts.csv's measures: ranks.csv's column, the words of a verdict (more, less), and whether it names a slow node
MEASURES = {
    "compute": ("compute_s", "slower", "faster", True),
    "exposed communication": ("comm_exposed_s", "longer", "shorter", False),
    "data wait": ("data_wait_s", "longer", "shorter", True),
}
ONE_HOST = "one host: nothing to compare"
SINGLE_HOST_CELL = "its ranks ran on one host: nothing to compare within the cell"


def steady(ranks: pd.DataFrame) -> pd.DataFrame:
    """The rank rows of each cell's steady epochs (measures.steady_median's rule): after the first,
    a profiled one or the first after a resume left out (ranks.csv unsteady; with every later one so, as if none were); the only one if one."""
    cells = ranks.groupby(KEYS, dropna=False)["epoch"]
    later = ranks["epoch"] > cells.transform("min")
    unprofiled = later & ~ranks["unsteady"].astype(bool)
    any_unprofiled = unprofiled.groupby([ranks[k] for k in KEYS], dropna=False).transform("any")
    single = cells.transform("nunique") == 1
    return ranks[single | unprofiled | (later & ~any_unprofiled)]


def others_median(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """For each entry, the median of the other entries of its group (NaN where it is alone).

    `group` holds each entry's group number; vectorised through one sort: with the group's values
    sorted, leaving out the one at place p shifts the places at and after p by one."""
    order = np.lexsort((values, group))
    sorted_group, sorted_values = group[order], values[order]
    starts = np.searchsorted(sorted_group, sorted_group, side="left")
    counts = np.searchsorted(sorted_group, sorted_group, side="right") - starts
    place, left = np.arange(len(order)) - starts, counts - 1

    def remaining(k: np.ndarray) -> np.ndarray:
        index = np.clip(starts + k + (k >= place), 0, max(len(order) - 1, 0))
        return sorted_values[index]

    low_k = np.where(left % 2 == 1, (left - 1) // 2, left // 2 - 1)
    high_k = np.where(left % 2 == 1, low_k, left // 2)
    medians = np.where(left > 0, (remaining(low_k) + remaining(high_k)) / 2, np.nan)
    result = np.empty(len(order))
    result[order] = medians
    return result


def cell_comparisons(ranks: pd.DataFrame, ok_cells: pd.DataFrame) -> pd.DataFrame:
    """Per cell, host and measure: the mean log ratio of the host's rank-epochs to the other hosts'
    (the median over the other hosts of each one's median rank, in the same cell and epoch), the mean
    excess share, and how many rank-epochs. Vectorised: a study of a million rank-epochs takes seconds."""
    rows = steady(ranks.merge(ok_cells[KEYS], on=KEYS))
    columns = ["cell", "host", "measure", "log_ratio", "excess_share", "rank_epochs"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    # a cell's epochs on each set of nodes count apart: a requeued cell that resumed elsewhere ran in
    # two allocations, each its own comparison (ranks.csv node_set)
    rows = rows.assign(cell=rows.groupby([*KEYS, "node_set"], dropna=False).ngroup())
    values = {name: column for name, (column, *_) in MEASURES.items()} | {"epoch": "epoch_time_s"}
    per_host = rows.groupby(["cell", "epoch", "host"], as_index=False)[list(values.values())].median()
    group = per_host.groupby(["cell", "epoch"]).ngroup().to_numpy()
    for column in values.values():  # NaN stays NaN: a measure some host lacks compares nothing there
        per_host[f"ref_{column}"] = others_median(group, per_host[column].to_numpy(float))
    rows = rows.merge(
        per_host[["cell", "epoch", "host", *(f"ref_{c}" for c in values.values())]], on=["cell", "epoch", "host"]
    )
    parts = []
    epoch_ref = rows["ref_epoch_time_s"].to_numpy(float)
    for measure, column in values.items():
        if measure == "epoch":
            continue
        value, reference = rows[column].to_numpy(float), rows[f"ref_{column}"].to_numpy(float)
        known = np.isfinite(value) & np.isfinite(reference) & (value > 0) & (reference > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            parts.append(
                pd.DataFrame(
                    {
                        "cell": rows["cell"].to_numpy()[known],
                        "host": rows["host"].to_numpy()[known],
                        "measure": measure,
                        "log_ratio": np.log(value[known] / reference[known]),
                        "excess_share": ((value - reference) / np.where(epoch_ref > 0, epoch_ref, np.nan))[known],
                    }
                )
            )
    compared = pd.concat(parts, ignore_index=True)
    return compared.groupby(["cell", "host", "measure"], as_index=False).agg(
        log_ratio=("log_ratio", "mean"), excess_share=("excess_share", "mean"), rank_epochs=("log_ratio", "size")
    )[columns]


@dataclass(frozen=True)
class Pooled:
    """One host's comparison in one measure over the cells it touched."""

    ratio: float
    low: float
    high: float
    cells: int
    rank_epochs: int
    excess_share: float


def pooled(per_cell: pd.DataFrame, compared_hosts: int) -> Pooled:
    """Mean over cells with a t interval, Bonferroni over `compared_hosts`; no interval under MIN_CELLS."""
    values = per_cell["log_ratio"].to_numpy(float)
    mean, n = float(values.mean()), len(values)
    low = high = math.nan
    if n >= MIN_CELLS:
        spread = values.std(ddof=1) / math.sqrt(n)
        half = t_quantile(1 - (1 - LEVEL) / (2 * max(compared_hosts, 1)), n - 1) * spread
        low, high = math.exp(mean - half), math.exp(mean + half)
    return Pooled(
        math.exp(mean), low, high, n, int(per_cell["rank_epochs"].sum()), float(per_cell["excess_share"].mean())
    )


def percent(value: float, digits: int = 0) -> str:
    return f"{abs(value - 1) * 100:.{digits}f}%"


def difference(ratio: float, low: float, high: float) -> str:
    """'9% (6-12%)': a ratio's difference from 1 and its interval's, the nearer end first (to a tenth
    of a percent where whole percents would print the interval as one number)."""
    near, far = (low, high) if low > 1 else (high, low)
    digits = 1 if percent(near) == percent(far) else 0
    return f"{percent(ratio, digits)} ({percent(near, digits)[:-1]}-{percent(far, digits)})"


def verdict(measure: str, found: Pooled) -> tuple[str, bool]:
    """The verdict's words ("slower by 9% (6-12%) in 14 cells") and whether they name a slow node."""
    _, more, less, names_node = MEASURES[measure]
    if found.cells < MIN_CELLS:
        return f"too few cells to tell ({found.cells} shared with another host; {MIN_CELLS} needed)", False
    if not (found.low > 1 or found.high < 1):
        return "no different", False
    word, beyond = (more, found.low > 1 + MARGIN) if found.low > 1 else (less, found.high < 1 / (1 + MARGIN))
    shown = difference(found.ratio, found.low, found.high)
    if not beyond:
        return f"no different beyond {MARGIN:.0%}: {word} by {shown}", False
    if abs(found.excess_share) < MATERIAL:
        return f"no different: {word} by {shown}, but under 1% of an epoch", False
    return f"{word} by {shown} in {found.cells} cells", names_node and word == more


def host_table(
    ranks: pd.DataFrame, runs: pd.DataFrame, invocation: Invocation, exclude: list[str] = ()
) -> pd.DataFrame:
    """hosts.csv: every host that ran ranks of a cell with status ok, per measure (records/tables.py HOSTS).

    `exclude`: the study's cluster.exclude, kept in the rerun command beside the slow nodes."""
    ok_cells = own_ok(runs)
    hosts = sorted(set(ranks.merge(ok_cells[KEYS], on=KEYS)["host"].dropna()))
    if not hosts:
        return table_frame(HOSTS, [])
    if len(hosts) == 1:
        rows = [{"host": hosts[0], "measure": m, "verdict": ONE_HOST, "slow_node": False} for m in MEASURES]
        return table_frame(HOSTS, rows)
    per_cell = cell_comparisons(ranks, ok_cells)
    rows = []
    for measure in MEASURES:
        of_measure = per_cell[per_cell["measure"] == measure]
        counts = of_measure.groupby("host")["cell"].nunique()
        compared = int((counts >= MIN_CELLS).sum())
        for host in hosts:
            mine = of_measure[of_measure["host"] == host]
            if mine.empty:
                rows.append({"host": host, "measure": measure, "cells": 0, "rank_epochs": 0, "slow_node": False})
                rows[-1]["verdict"] = f"too few cells to tell (0 shared with another host; {MIN_CELLS} needed)"
                continue
            found = pooled(mine, compared)
            words, slow = verdict(measure, found)
            rows.append({"host": host, "measure": measure, **found.__dict__, "verdict": words, "slow_node": slow})
    table = table_frame(HOSTS, rows)
    table["rerun"] = rerun_without(table, runs, invocation, exclude)
    return table


def own_ok(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[(runs["source"] == OWN_SOURCE) & (runs["status"] == "ok")]


def cells_on(hosts: set[str], runs: pd.DataFrame) -> pd.DataFrame:
    """The study's ok cells with a rank on any of `hosts` (runs.csv's hosts: also cells without per-rank rows)."""
    ok = own_ok(runs)
    ran_on = ok["hosts"].fillna("").map(lambda text: bool(hosts & set(text.split(","))))
    return ok[ran_on]


def rerun_without(table: pd.DataFrame, runs: pd.DataFrame, invocation: Invocation, exclude: list[str]) -> pd.Series:
    """One command for all slow nodes: the cells any of them ran, forced, with every one of them in
    cluster.exclude (beside the study's own), so that no rerun lands on another slow node."""
    slow = set(table.loc[table["slow_node"], "host"])
    if not slow:
        return pd.Series([None] * len(table), index=table.index, dtype=object)
    cells = cells_on(slow, runs)
    names = sorted(set(exclude) | slow)
    entry = 'cluster={"exclude": [' + ", ".join(f'"{name}"' for name in names) + "]}"
    command = invocation.with_config(entry).command([cell_target(row) for _, row in cells.iterrows()], force=True)
    return table["slow_node"].map(lambda slow_row: command if slow_row else None)


def left_out(runs: pd.DataFrame, ranks: pd.DataFrame) -> pd.Series:
    """Why each own cell of runs.csv is not in the host comparison ('' where it is), by runs' index."""
    hosts = ranks.groupby(KEYS, dropna=False)["host"].nunique() if len(ranks) else pd.Series(dtype=int)
    reasons = []
    for _, row in runs.iterrows():
        key = tuple(row[k] for k in KEYS)
        if row["status"] != "ok":
            reasons.append(f"status {row['status']}")
        elif key not in hosts.index:
            why = row.get("step_split_reason")
            reasons.append("no per-rank rows" + (f": {why}" if isinstance(why, str) and why else ""))
        elif hosts[key] < 2:
            reasons.append(SINGLE_HOST_CELL)
        else:
            reasons.append("")
    return pd.Series(reasons, index=runs.index, dtype=object)


def read_hosts(path) -> pd.DataFrame:
    """hosts.csv as written (a host named 007 stays text)."""
    frame = pd.read_csv(path, dtype=HOSTS.text())
    frame["slow_node"] = frame["slow_node"].astype(bool)
    return frame
