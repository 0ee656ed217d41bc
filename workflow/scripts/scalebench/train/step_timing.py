"""Where each rank's epoch goes: compute, exposed communication, data wait and the rest.

The method (docs/step-split.md, docs/design.md) is one per framework and lives in its
folder (train/torch/step_timing.py, train/tf/step_timing.py): each step gets four marks on the
rank's own timeline (the device's on a GPU),

    a  the step starts            b  every gradient of the step is computed on this rank
    c  the reduced gradients are ready for the optimizer              d  the step ends

and the framework hands the loop each step's d - a and its exposed communication c - b (plus
communication that blocks the rank inside the pass, where the backend reports it: FSDP's
collectives on CPU ranks). This module, framework-free, turns one rank's steps into its figures
and the ranks' figures into the epoch record's fields (gathered with one collective per epoch):

    epoch_time = compute + comm_exposed + data_wait + rest       (per rank, exactly)

compute is the steps' time less their exposed communication; data_wait is the loop's wait for
the next batch, as before; rest is what the epoch spends outside both (the loop's bookkeeping,
the synchronisation at its end, a step function's dispatch). rest is the remainder, so the sum
holds by construction; what can go wrong is a remainder below zero (measured parts longer than
the epoch), which must stay within records.REST_TOLERANCE_SHARE of the epoch plus
REST_TOLERANCE_S (the docs state it, a test checks it).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from scalebench.records import REST_TOLERANCE_S, REST_TOLERANCE_SHARE, STEP_SPLIT_FIELDS

# One rank's figures of one epoch, in the order of the row it contributes to the gathered table.
RANK_FIELDS = (
    "epoch_time_s",
    "compute_s",
    "comm_exposed_s",
    "data_wait_s",
    "rest_s",
    "steps",
    "step_median_s",
    "step_p90_s",
    "step_max_s",
    "comm_total_s",
    "comm_overlap",
)


@dataclass
class StepTimes:
    """One rank's steps of one epoch, as its framework's marks measured them."""

    step_s: list[float]  # each step, d - a
    exposed_s: list[float]  # each step's exposed communication
    comm_total_s: float | None = None  # communication in flight during the steps; None: comm_reason
    comm_reason: str = ""


def percentile(values: list[float], share: float) -> float:
    return float(np.percentile(values, 100 * share)) if values else math.nan


def rank_row(epoch_time_s: float, data_wait_s: float, steps: StepTimes) -> np.ndarray:
    """This rank's RANK_FIELDS (NaN where not measured)."""
    step_sum, exposed = float(sum(steps.step_s)), float(sum(steps.exposed_s))
    total = steps.comm_total_s
    overlap = min(1.0, max(0.0, 1 - exposed / total)) if total else None
    figures = {
        "epoch_time_s": epoch_time_s,
        "compute_s": step_sum - exposed,
        "comm_exposed_s": exposed,
        "data_wait_s": data_wait_s,
        "rest_s": epoch_time_s - data_wait_s - step_sum,
        "steps": len(steps.step_s),
        "step_median_s": percentile(steps.step_s, 0.5),
        "step_p90_s": percentile(steps.step_s, 0.9),
        "step_max_s": max(steps.step_s) if steps.step_s else math.nan,
        "comm_total_s": total,
        "comm_overlap": overlap,
    }
    return np.array([math.nan if figures[name] is None else figures[name] for name in RANK_FIELDS], dtype=np.float64)


def placed(row: np.ndarray, rank: int, processes: int) -> np.ndarray:
    """A table of `processes` rows with this rank's row at `rank` and zeros elsewhere: summed over
    the ranks (one allreduce), it is every rank's row."""
    table = np.zeros((processes, len(RANK_FIELDS)), dtype=np.float64)
    table[rank] = row
    return table.ravel()


def known(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def epoch_fields(table: np.ndarray, hosts: list[str], comm_reason: str) -> dict:
    """The epoch record's split fields from every rank's row (`table`, rank order) and hosts."""
    rows = np.asarray(table, dtype=np.float64).reshape(len(hosts), len(RANK_FIELDS))
    column = {name: rows[:, index] for index, name in enumerate(RANK_FIELDS)}
    ranks = [
        {"rank": rank, "host": host, **{name: known(column[name][rank]) for name in RANK_FIELDS}}
        for rank, host in enumerate(hosts)
    ]
    for entry in ranks:
        entry["steps"] = int(entry["steps"]) if entry["steps"] is not None else None

    def median(name: str) -> float | None:
        values = [v for v in column[name] if not math.isnan(v)]
        return float(statistics.median(values)) if values else None

    def largest(name: str) -> float | None:
        values = [v for v in column[name] if not math.isnan(v)]
        return float(max(values)) if values else None

    compute = column["compute_s"]
    straggler = int(np.argmax(compute))
    middle = float(statistics.median(compute))
    total = median("comm_total_s")
    return {
        "compute_s": median("compute_s"),
        "compute_max_s": largest("compute_s"),
        "comm_exposed_s": median("comm_exposed_s"),
        "comm_exposed_max_s": largest("comm_exposed_s"),
        "data_wait_median_s": median("data_wait_s"),
        "rest_s": median("rest_s"),
        "rest_max_s": largest("rest_s"),
        "comm_total_s": total,
        "comm_overlap": median("comm_overlap"),
        "comm_total_reason": None if total is not None else comm_reason or "not measured",
        "step_median_s": median("step_median_s"),
        "step_p90_s": largest("step_p90_s"),
        "step_max_s": largest("step_max_s"),
        "compute_spread": float((compute.max() - compute.min()) / middle) if middle > 0 else None,
        "straggler_rank": straggler,
        "straggler_host": hosts[straggler],
        "step_split_reason": None,
        "ranks": ranks,
    }


def unmeasured(reason: str) -> dict:
    """The split fields of an epoch that was not split: empty, with the reason."""
    fields = dict.fromkeys(name for name in STEP_SPLIT_FIELDS if not name.startswith("profile"))
    return fields | {"step_split_reason": reason, "comm_total_reason": reason, "ranks": None}


def rest_problem(rank: dict) -> str:
    """'' if a rank's rest is at least minus the tolerance (records/__init__.py); else what is wrong."""
    epoch, rest = rank["epoch_time_s"], rank["rest_s"]
    if rest is None or epoch is None:
        return ""
    allowed = REST_TOLERANCE_SHARE * epoch + REST_TOLERANCE_S
    if rest >= -allowed:
        return ""
    return f"rank {rank['rank']}: its measured parts exceed its epoch time by {-rest:.4f} s (allowed {allowed:.4f} s)"


class Ranks(Protocol):
    """What gather_epoch asks of the backend (train/interfaces.py Backend, which imports this module)."""

    rank: int
    processes: int

    def allreduce_sum(self, values: np.ndarray) -> np.ndarray: ...


def gather_epoch(steps: StepTimes | None, elapsed: float, wait: float, ranks: Ranks, hosts: list[str]) -> dict:
    """The epoch record's split fields: this rank's figures from its framework's marks (`steps`,
    None with training.step_split off), every rank's gathered by one collective; rank 0 warns in
    train.log of a rank whose remainder is below zero beyond the tolerance."""
    if steps is None:
        return unmeasured("training.step_split is off")
    row = rank_row(elapsed, wait, steps)
    table = ranks.allreduce_sum(placed(row, ranks.rank, ranks.processes))
    fields = epoch_fields(table, hosts, steps.comm_reason)
    if ranks.rank == 0:
        for problem in filter(None, map(rest_problem, fields["ranks"])):
            print(f"warning: step split: {problem}", flush=True)
    return fields
