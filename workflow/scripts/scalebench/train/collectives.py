"""The collective benchmark: a backend's own collectives, timed on the cell's ranks before training.

Every rank of a cell with more than one replica runs it after setup and before the first
epoch (the loop calls `benchmark`, off the epochs' clock and out of setup_s), through the library
the backend reduces its gradients with: the backend hands over a `Bench`
(train/torch/collectives.py, train/tf/collectives.py build them), and this framework-free
module times it the same way for all of them. Rank 0 writes the cell's collectives.csv and a
line in train.log; run.json gets the summary (`run_fields`).

Method (nccl-tests, PARAM): float32 messages, the model's gradient bytes first, then a sweep
from 4 bytes doubling up to max_bytes with the backend's bucket or fusion size among them; per size
`warmup` untimed iterations, then `iterations` timed ones, each after a barrier and each
waiting for its result on this rank (the device synchronised); the latency is the median
over iterations of the slowest rank's time, algbw = bytes / latency and busbw = algbw x the
operation's bus factor (nccl-tests' PERFORMANCE.md: 2(n-1)/n for all-reduce, (n-1)/n for
reduce-scatter and all-gather, 1 for reduce and broadcast), so one number compares with
the link's peak. Message sizes are nccl-tests' too: the whole buffer (all-gather: the
gathered output, reduce-scatter: the input).

The budget (training.collectives.budget_s) is shared by the operations. Every decision is
made from values reduced across ranks, so all ranks take the same sizes and iterations: a
size whose estimate (the last measured latency, scaled up to its bytes) does not fit in
what is left is not measured, and after a size's first iteration only as many more run as
fit. A failure while preparing a size (memory, an unsupported operation) is agreed on by
all ranks and ends that operation with the reason; an error inside a collective is taken
to be every rank's (a rank stuck in one with its peers gone is ended by the backend's
collective_timeout_s, as in training).
"""

from __future__ import annotations

import csv
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from scalebench.records.tables import CELL_COLLECTIVES
from scalebench.settings import CollectiveSettings
from scalebench.train.faults import NO_FAULTS, FaultPlan

ITEMSIZE = 4  # float32, the gradients' type
DTYPE = "float32"
# nccl-tests' bus factors: what each rank's links carry per byte of the message, for n ranks
BUS_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce": lambda n: 1.0,
    "broadcast": lambda n: 1.0,
}
# the prefix of the tensors' names where a library names them (Horovod: its timeline tells them apart)
TENSOR_NAME = "scalebench.collectives"


@dataclass
class Bench:
    """What a backend offers the benchmark: its collectives through its own library.

    ops: operation name (a key of BUS_FACTORS) -> prepare(elements), which allocates float32
    buffers of that many elements in all (a multiple of the ranks) and returns a function that
    runs the operation once and returns when its result is ready on this rank.
    """

    library: str  # what the ops go through, e.g. 'torch.distributed nccl', 'horovod (gloo)'
    ops: dict[str, Callable[[int], Callable[[], None]]]
    barrier: Callable[[], None]  # every rank waits for the others (before each iteration)
    fusion_bytes: int | None = None  # the backend's bucket or fusion size, where it has one
    fusion_source: str = ""  # where it comes from (DDP's bucket_bytes_cap, HOROVOD_FUSION_THRESHOLD, ...)
    release: Callable[[], None] = lambda: None  # give the buffers' memory back (a GPU's cache)


def all_reduce_bench(
    all_reduce: Callable[[int], Callable[[], None]],
    ranks: int,
    library: str,
    fusion_bytes: int | None = None,
    fusion_source: str = "",
    release: Callable[[], None] = lambda: None,
) -> Bench:
    """A Bench of one all-reduce whose barrier is the same all-reduce of one element per rank."""
    return Bench(library, {"all_reduce": all_reduce}, all_reduce(ranks), fusion_bytes, fusion_source, release)


@dataclass
class Result:
    """The benchmark of one cell: its rows, and why there are none or why some are empty."""

    rows: list[dict] = field(default_factory=list)
    library: str | None = None
    fusion_bytes: int | None = None
    fusion_source: str = ""
    reason: str = ""  # why nothing was measured ('' where something was)
    seconds: float = 0.0  # the benchmark's time on this rank (kept out of setup_s)


def bus_factor(op: str, ranks: int) -> float:
    return BUS_FACTORS[op](ranks)


def bandwidths(op: str, nbytes: int, seconds: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s of an operation on `nbytes` that took `seconds` (nccl-tests)."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * bus_factor(op, ranks)


def elements_for(nbytes: int, ranks: int) -> int:
    """float32 elements of a message of about `nbytes`: whole elements, a multiple of the ranks
    (reduce-scatter and all-gather split the buffer evenly), at least one per rank."""
    elements = max(1, math.ceil(nbytes / ITEMSIZE))
    return max(ranks, math.ceil(elements / ranks) * ranks)


def sweep(max_bytes: int) -> list[int]:
    """4 bytes doubling up to max_bytes (and max_bytes itself)."""
    sizes, size = [], ITEMSIZE
    while size < max_bytes:
        sizes.append(size)
        size *= 2
    return [*sizes, max_bytes]


def planned_sizes(max_bytes: int, gradient_bytes: int, bucket_bytes: int | None, ranks: int) -> list[tuple[int, str]]:
    """(bytes, why) in the order they are measured: the model's gradients first (what the figures
    are read at), then the sweep from the smallest with the backend's bucket among them; each size
    as whole elements over the ranks (elements_for), and each measured once."""
    rest = [("sweep", nbytes) for nbytes in sweep(max_bytes)] + ([("bucket", bucket_bytes)] if bucket_bytes else [])
    rest.sort(key=lambda item: (item[1], item[0] != "bucket"))  # a bucket the sweep has is named as the bucket
    planned: dict[int, str] = {}
    for label, nbytes in [("gradient", gradient_bytes), *rest]:
        planned.setdefault(elements_for(nbytes, ranks) * ITEMSIZE, label)
    return list(planned.items())


def empty_row(op: str, nbytes: int, label: str, ranks: int, library: str, reason: str) -> dict:
    row = dict.fromkeys(CELL_COLLECTIVES.names)
    row.update(op=op, bytes=nbytes, size=label, dtype=DTYPE, ranks=ranks, library=library, reason=reason)
    return row


class Measurement:
    """One operation's sizes, timed in lockstep on every rank within the operation's share of the budget."""

    def __init__(
        self, bench: Bench, settings: CollectiveSettings, ranks: int, rank: int, reduce_max, clock, faults: FaultPlan
    ) -> None:
        self.bench, self.settings, self.ranks, self.rank, self.faults = bench, settings, ranks, rank, faults
        self.reduce_max, self.clock = reduce_max, clock

    def op(self, op: str, sizes: list[tuple[int, str]], budget_s: float) -> list[dict]:
        rows, spent, last = [], 0.0, None  # last: (bytes, latency) of the last size measured
        failed = ""
        for actual, label in sizes:
            elements = actual // ITEMSIZE
            if failed:
                rows.append(self.empty(op, actual, label, f"not measured: {failed}"))
                continue
            left = budget_s - spent
            estimate = last[1] * max(1.0, actual / last[0]) if last else 0.0
            if left <= 0 or estimate >= left:
                rows.append(self.empty(op, actual, label, self.over_budget(estimate, left)))
                continue
            row, wall, failed = self.size(op, actual, label, elements, left)
            spent += wall
            rows.append(row)
            if row["latency_us"] is not None:
                last = (actual, row["latency_us"] / 1e6)
        return rows

    def over_budget(self, estimate: float, left: float) -> str:
        budget = f"training.collectives.budget_s = {self.settings.budget_s:g} s"
        if left <= 0:
            return f"not measured: the budget is spent ({budget})"
        return f"not measured: about {estimate:.3g} s per iteration, {max(left, 0):.3g} s left of the budget ({budget})"

    def empty(self, op: str, nbytes: int, label: str, reason: str) -> dict:
        return empty_row(op, nbytes, label, self.ranks, self.bench.library, reason)

    def size(self, op: str, nbytes: int, label: str, elements: int, left: float) -> tuple[dict, float, str]:
        """One size: (its row, the slowest rank's time for it, why the operation stops here or '')."""
        started = self.clock()
        problem = ""
        try:
            self.faults.collective_failure(self.rank, op)
            run = self.bench.ops[op](elements)
        except Exception as error:  # memory, an operation the library lacks: agreed on below
            problem = f"{type(error).__name__}: {error}"
        if self.reduce_max(np.array([1.0 if problem else 0.0]))[0]:
            reason = f"failed on this rank: {problem}" if problem else "failed on another rank while preparing"
            return self.empty(op, nbytes, label, reason), 0.0, f"{op} failed at {nbytes} bytes"
        try:
            first = self.timed(run)
            first = float(self.reduce_max(np.array([first]))[0])  # the same on every rank: so are the counts
            allowed = max(0, int((left - first) / first)) if first > 0 else self.settings.iterations
            # the first iteration is the first warm-up, or the first timed one without warm-up
            warm, times = (min(self.settings.warmup - 1, allowed), []) if self.settings.warmup else (0, [first])
            count = min(self.settings.iterations - len(times), allowed - warm)
            for _ in range(warm):
                self.timed(run)
            times += [self.timed(run) for _ in range(count)]
        except Exception as error:  # inside a collective: every rank's (see the module's note)
            reason = f"failed: {type(error).__name__}: {error}"
            return self.empty(op, nbytes, label, reason), 0.0, f"{op} failed at {nbytes} bytes"
        wall = self.clock() - started
        slowest = self.reduce_max(np.array([*times, wall], dtype=np.float64)).tolist()
        times, wall = slowest[:-1], slowest[-1]
        if not times:
            reason = (
                f"not measured: one iteration takes {first:.3g} s, more than the {left:.3g} s left of the budget "
                f"(training.collectives.budget_s = {self.settings.budget_s:g} s)"
            )
            return self.empty(op, nbytes, label, reason), wall, ""
        latency = statistics.median(times)
        algbw, busbw = bandwidths(op, nbytes, latency, self.ranks)
        row = self.empty(op, nbytes, label, None)
        row.update(
            iterations=len(times),
            latency_us=latency * 1e6,
            latency_min_us=min(times) * 1e6,
            latency_max_us=max(times) * 1e6,
            algbw_gbps=algbw,
            busbw_gbps=busbw,
        )
        return row, wall, ""

    def timed(self, run: Callable[[], None]) -> float:
        self.bench.barrier()
        started = self.clock()
        run()
        return self.clock() - started


def measure(
    bench: Bench | str,
    settings: CollectiveSettings,
    ranks: int,
    rank: int,
    gradient_bytes: int,
    reduce_max: Callable[[np.ndarray], np.ndarray],
    clock: Callable[[], float] = time.perf_counter,
    *,
    faults: FaultPlan = NO_FAULTS,
) -> Result:
    """Time every operation of `bench` (or record why there is none: `bench` is then the reason;
    where one rank has none, no rank measures). `faults`: the rank's test faults (collectives_fail)."""
    started = clock()
    missing = isinstance(bench, str)
    if reduce_max(np.array([1.0 if missing else 0.0]))[0]:
        if not missing:
            bench.release()
        return Result(reason=bench if missing else "not measured: another rank has no benchmark (see its log)")
    sizes = planned_sizes(settings.max_bytes, gradient_bytes, bench.fusion_bytes, ranks)
    measurement = Measurement(bench, settings, ranks, rank, reduce_max, clock, faults)
    rows = []
    try:
        for op in bench.ops:
            rows += measurement.op(op, sizes, settings.budget_s / len(bench.ops))
    finally:
        bench.release()
    measured = any(row["latency_us"] is not None for row in rows)
    reason = "" if measured else next((row["reason"] for row in rows), "no operation")
    return Result(rows, bench.library, bench.fusion_bytes, bench.fusion_source, reason, clock() - started)


class BenchmarkedRanks(Protocol):
    """What `benchmark` asks of the backend (train/interfaces.py Backend, which imports this module)."""

    rank: int
    replicas: int

    def collective_bench(self, model: Any) -> Bench | str: ...

    def allreduce_max(self, values: np.ndarray) -> np.ndarray: ...


def benchmark(
    backend: BenchmarkedRanks,
    model: Any,
    settings: CollectiveSettings,
    gradient_bytes: int,
    folder: Path,
    *,
    faults: FaultPlan = NO_FAULTS,
) -> Result:
    """The cell's benchmark on every rank: the backend's Bench for `model` as it distributed it (or
    why it has none) measured, rank 0's collectives.csv in `folder` and its line in train.log. One
    replica has nothing to exchange. `faults`: the rank's test faults (collectives_fail)."""
    if backend.replicas < 2:
        result = Result(reason="one replica: nothing to exchange")
    else:
        try:
            bench = backend.collective_bench(model)
        except Exception as error:  # the cell trains on; every rank learns of it in measure()
            bench = f"failed: {type(error).__name__}: {error}"
        result = measure(
            bench, settings, backend.replicas, backend.rank, gradient_bytes, backend.allreduce_max, faults=faults
        )
        if backend.rank == 0:
            write_table(result.rows, Path(folder) / CELL_COLLECTIVES.name)
    if backend.rank == 0:
        print(f"collectives: {describe(result)}", flush=True)
    return result


def at_gradient(rows: list[dict], op: str = "all_reduce") -> dict | None:
    """The row of `op` at the model's gradient bytes, if the benchmark has one."""
    return next((row for row in rows if row["op"] == op and row["size"] == "gradient"), None)


def run_fields(result: Result, replicas: int) -> dict:
    """run.json's summary of the benchmark: the gradient reduction's latency and bandwidth (the
    all-reduce, or DataParallel's reduce), empty with the reason where not measured."""
    row = at_gradient(result.rows) or at_gradient(result.rows, "reduce")
    reason = result.reason
    if not reason and (row is None or row["latency_us"] is None):
        reason = row["reason"] if row is not None else "no reduction at the gradient size"
    measured = row is not None and row["latency_us"] is not None
    return {
        "collectives": {
            "library": result.library,
            "ranks": replicas,
            "op": row["op"] if row is not None else None,
            "gradient_bytes": row["bytes"] if row is not None else None,
            "latency_us": row["latency_us"] if measured else None,
            "algbw_gbps": row["algbw_gbps"] if measured else None,
            "busbw_gbps": row["busbw_gbps"] if measured else None,
            "fusion_bytes": result.fusion_bytes,
            "fusion_source": result.fusion_source or None,
            "seconds": result.seconds,
            "reason": reason or None,
        }
    }


def describe(result: Result) -> str:
    """train.log's line: the gradient reduction's figures, how many sizes were measured, or why none."""
    if result.reason:
        return result.reason
    measured = sum(row["latency_us"] is not None for row in result.rows)
    row = at_gradient(result.rows) or at_gradient(result.rows, "reduce")
    head = f"{measured} of {len(result.rows)} sizes measured in {result.seconds:.1f} s through {result.library}"
    if row is None or row["latency_us"] is None:
        return f"{head}; the gradient size not measured ({row['reason'] if row else 'no reduction'})"
    return (
        f"{head}; {row['op']} of the gradients ({row['bytes']} bytes): {row['latency_us']:.0f} us, "
        f"algbw {row['algbw_gbps']:.3g} GB/s, busbw {row['busbw_gbps']:.3g} GB/s"
    )


def write_table(rows: list[dict], path: str | Path) -> None:
    """The cell's collectives.csv (rank 0), written whole then renamed."""
    path = Path(path)
    partial = path.with_suffix(".csv.partial")
    with open(partial, "w", newline="") as handle:
        names = CELL_COLLECTIVES.names
        writer = csv.DictWriter(handle, fieldnames=names)
        writer.writeheader()
        writer.writerows({key: ("" if row.get(key) is None else row[key]) for key in names} for row in rows)
    partial.replace(path)
