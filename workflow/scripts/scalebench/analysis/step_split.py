"""The step split of a cell's epoch records (records.STEP_SPLIT_FIELDS) as columns of runs.csv and
epochs.csv: per epoch as recorded, per cell over its steady epochs (measures.steady_median's
rule: after the first, without a profiled one).

A record written before the split existed, or with training.step_split off, reads as not
measured: NaN with the reason in step_split_reason, never 0.
"""

from __future__ import annotations

import math
from collections import Counter

from scalebench import measures
from scalebench.measures import finite_number

PREDATES = "not recorded (the cell predates the step split)"

# per steady epoch (median over the cell's steady epochs of the epoch records' values)
STEADY_COLUMNS = [
    "compute_s",  # median over ranks
    "comm_exposed_s",
    "data_wait_median_s",
    "rest_s",
    "comm_total_s",
    "comm_overlap",
    "step_median_s",
    "step_p90_s",
    "step_max_s",
    "compute_spread",
]
RUN_COLUMNS = [
    *STEADY_COLUMNS,
    "comm_share",  # comm_exposed_s / steady_epoch_s: the share of a steady epoch spent in exposed communication
    "straggler_rank",  # the rank with the largest compute in most steady epochs
    "straggler_host",
    "step_split_reason",  # why the split is empty
    "comm_total_reason",  # why comm_total_s and comm_overlap are empty
    "profiled_epoch",  # the epoch training.profile traced (left out of the steady figures)
    "profile_trace",  # its trace's folder in the cell, or empty with profile_reason
    "profile_reason",
]
# epochs.csv: each epoch record's summaries over ranks (its per-rank list stays in metrics.jsonl)
EPOCH_VALUES = [*STEADY_COLUMNS, "compute_max_s", "comm_exposed_max_s", "rest_max_s", "straggler_rank"]
EPOCH_TEXT = ["straggler_host", "step_split_reason", "profiled"]


def epoch_columns(record: dict) -> dict:
    """An epoch record's split columns of epochs.csv."""
    row = {name: finite_number(record.get(name)) for name in EPOCH_VALUES}
    row["straggler_host"] = record.get("straggler_host")
    row["step_split_reason"] = record.get("step_split_reason") if "compute_s" in record else PREDATES
    row["profiled"] = bool(record.get("profiled"))
    return row


def first_reason(epochs: list[dict], field: str) -> str | None:
    for record in epochs:
        if record.get(field):
            return record[field]
    return None


def run_columns(epochs: list[dict], steady_epoch_s: float) -> dict:
    """A cell's split columns of runs.csv from its epoch records."""
    profiled = [measures.unsteady(record) for record in epochs]  # a profiled or resumed epoch: not steady
    row = {name: measures.steady_median([record.get(name) for record in epochs], profiled) for name in STEADY_COLUMNS}
    row["comm_share"] = row["comm_exposed_s"] / steady_epoch_s if steady_epoch_s else math.nan
    steady = [record for index, record in enumerate(epochs) if index and not profiled[index]] or epochs[:1]
    ranks = [record.get("straggler_rank") for record in steady if record.get("straggler_rank") is not None]
    straggler = Counter(ranks).most_common(1)[0][0] if ranks else None
    row["straggler_rank"] = straggler if straggler is not None else math.nan
    row["straggler_host"] = next(
        (record.get("straggler_host") for record in steady if record.get("straggler_rank") == straggler), None
    )
    if not epochs:
        row["step_split_reason"] = "no epoch record"
    elif not any("compute_s" in record for record in epochs):
        row["step_split_reason"] = PREDATES
    else:
        row["step_split_reason"] = (
            None if not math.isnan(row["compute_s"]) else first_reason(epochs, "step_split_reason")
        )
    row["comm_total_reason"] = (
        None
        if not math.isnan(row["comm_total_s"])
        else first_reason(epochs, "comm_total_reason") or row["step_split_reason"]
    )
    traced = [record for record in epochs if record.get("profiled")]
    row["profiled_epoch"] = traced[0].get("epoch") if traced else math.nan
    row["profile_trace"] = traced[0].get("profile_trace") if traced else None
    row["profile_reason"] = traced[0].get("profile_reason") if traced else None
    return row
