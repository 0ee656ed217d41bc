"""The step split of a cell's epoch records (records.STEP_SPLIT_FIELDS) as columns of runs.csv and
epochs.csv: per epoch as recorded, per cell over its steady epochs (measures.steady_median's
rule: after the first, without a profiled one).

Two readings of an epoch, both in the tables:

- **The median rank's parts** (``compute_median_s``, ``comm_exposed_median_s``,
  ``data_wait_median_s``, ``rest_median_s``): the epoch record's medians over ranks, as recorded.
  They describe a typical rank, and in synchronous training a typical rank spends the time it
  waits for a slow peer inside the reduction: a straggler reads there as communication.
- **The critical path** (``compute_typical_s`` + ``imbalance_s`` + ``comm_exposed_critical_s`` +
  ``data_wait_critical_s`` + ``rest_critical_s`` = ``epoch_time_s``, exactly): from the record's
  per-rank rows. The *critical* rank is the one whose own work (its epoch less its exposed
  communication) took longest: the rank the others waited for. The *typical* rank's compute is the
  median over the other ranks (with one rank, its own): a median over all ranks would, at two ranks,
  hold half of a straggler's lateness. So a straggler's extra compute is ``imbalance_s`` at every rank
  count, and exposed communication is
  what the critical rank itself waited for in the reductions: the network and the collective, not its
  peers. ``rest_critical_s`` is the critical rank's rest plus the few milliseconds by which the slowest
  rank's epoch (the record's epoch time) outlasted the critical rank's. The loss waterfall
  (analysis/waterfall.py), the report's where-the-time-goes figure, the communication share and the
  scaling model's measured communication all read the critical path.

The critical rank is chosen per epoch, from the per-rank sums the record holds: where the slowest rank
changes from step to step (jitter rather than a persistent straggler), the critical rank's exposed
communication also holds the steps in which it waited for another rank (docs/report.md).

A record written before the step split existed, or with training.step_split off, reads as not
measured: NaN with the reason in step_split_reason, never 0.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter

from scalebench import measures
from scalebench.measures import finite_number

PREDATES = "not recorded (the cell predates the step split)"
NO_RANKS = "the epoch records hold no per-rank rows"

# The critical path of an epoch (module docstring), in order; they add up to its epoch time.
CRITICAL_PATH = [
    "compute_typical_s",  # the median compute of the ranks other than the critical one
    "imbalance_s",  # the critical rank's compute above it: stragglers
    "comm_exposed_critical_s",  # the exposed communication the critical rank waited for
    "data_wait_critical_s",
    "rest_critical_s",
]
# The epoch record's summaries over ranks, by the tables' names: (column, record field)
MEDIAN_RANK = {
    "compute_median_s": "compute_s",
    "comm_exposed_median_s": "comm_exposed_s",
    "data_wait_median_s": "data_wait_median_s",
    "rest_median_s": "rest_s",
}
# per steady epoch (median over the cell's steady epochs of the epoch records' values)
STEADY_FIELDS = {
    **MEDIAN_RANK,
    "comm_total_s": "comm_total_s",
    "comm_overlap": "comm_overlap",
    "step_median_s": "step_median_s",
    "step_p90_s": "step_p90_s",
    "step_max_s": "step_max_s",
    "compute_spread": "compute_spread",
}
# epochs.csv: the epoch record's maxima over ranks (the columns, their order and meaning: records/tables.py)
EPOCH_MAXIMA = {
    "compute_max_s": "compute_max_s",
    "comm_exposed_max_s": "comm_exposed_max_s",
    "rest_max_s": "rest_max_s",
}


def critical_path(record: dict) -> dict:
    """An epoch record's CRITICAL_PATH and critical_rank from its per-rank rows (NaN without them)."""
    empty = dict.fromkeys([*CRITICAL_PATH, "critical_rank"], math.nan)
    parts = ("epoch_time_s", "compute_s", "comm_exposed_s", "data_wait_s")
    ranks = [
        rank
        for rank in record.get("ranks") or []
        if all(not math.isnan(finite_number(rank.get(name))) for name in parts)
    ]
    epoch = finite_number(record.get("epoch_time_s"))
    if not ranks or math.isnan(epoch) or len(ranks) != len(record["ranks"]):
        return empty
    # the rank the others waited for: its own work (all but its exposed communication) took longest
    critical = max(ranks, key=lambda rank: (rank["epoch_time_s"] - rank["comm_exposed_s"], -rank["rank"]))
    others = [rank["compute_s"] for rank in ranks if rank is not critical] or [critical["compute_s"]]
    typical = float(statistics.median(others))
    comm, wait = critical["comm_exposed_s"], critical["data_wait_s"]
    return {
        "compute_typical_s": typical,
        "imbalance_s": critical["compute_s"] - typical,
        "comm_exposed_critical_s": comm,
        "data_wait_critical_s": wait,
        "rest_critical_s": epoch - critical["compute_s"] - comm - wait,
        "critical_rank": critical["rank"],
    }


def epoch_columns(record: dict) -> dict:
    """An epoch record's split columns of epochs.csv."""
    fields = {**STEADY_FIELDS, **EPOCH_MAXIMA, "straggler_rank": "straggler_rank"}
    row = {column: finite_number(record.get(field)) for column, field in fields.items()}
    row.update(critical_path(record))
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
    profiled = measures.steady_flags(epochs)  # a profiled or resumed epoch, or one on other nodes: not steady
    row = {
        column: measures.steady_median([record.get(field) for record in epochs], profiled)
        for column, field in STEADY_FIELDS.items()
    }
    row.update(steady_critical_path(epochs, profiled))
    row["comm_share"] = row["comm_exposed_critical_s"] / steady_epoch_s if steady_epoch_s else math.nan
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
    elif not math.isnan(row["compute_median_s"]) and math.isnan(row["compute_typical_s"]):
        row["step_split_reason"] = NO_RANKS
    else:
        row["step_split_reason"] = (
            None if not math.isnan(row["compute_median_s"]) else first_reason(epochs, "step_split_reason")
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


def steady_critical_path(epochs: list[dict], profiled: list[bool]) -> dict:
    """The critical path of the steady median epoch(s) (measures.median_epochs: the two a median of
    an even count averages, averaged alike), so its parts add up to steady_epoch_s."""
    chosen = measures.median_epochs([record.get("epoch_time_s") for record in epochs], profiled)
    paths = [critical_path(epochs[index]) for index in chosen]
    row = {name: float(sum(path[name] for path in paths) / len(paths)) if paths else math.nan for name in CRITICAL_PATH}
    row["critical_rank"] = paths[0]["critical_rank"] if paths else math.nan
    return row
