"""A cell's time from its records: the figures runs.csv shows (analysis/collect.py) and the bill fits
(config/bill.py), computed here once so that both read a cell's time alike.

- `figures`: the epochs, their summed time, the steady epoch (measures.steady_median: after the first,
  a profiled or resumed epoch left out), the first epoch, start-up and test;
- `job_seconds`: what the cell's job held, launch.py's job_s (launch/accounting.py: SLURM's elapsed,
  or the launch process's own start, before any framework's import, to the ranks' end): the cost
  (GPUs x job_s, runs.csv's gpu_hours) and what the bill predicts; empty with the reason where it is
  not recorded (an older study, imported logs, a killed launch);
- `run_seconds`: rank 0's run, run.json's start to its end (after the framework's imports: start-up,
  every epoch with its evaluation and checkpoints, the test); empty with the reason where the run was
  resumed (the record holds only the last attempt's start) or has not ended. The bill falls back to it
  where a cell has no job_s;
- `read`: a finished cell's folder as the bill reads it (`Measured`), through the records' definitions;
- `with_cold_starts`: the measured cells with each framework's first on each host marked cold (its
  start-up paid what the later cells of the node did not: compilation and kernel caches, the page
  cache, the device's first use).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from scalebench import measures
from scalebench.measures import finite_number
from scalebench.records import read_metrics, read_run, run_problem
from scalebench.records.definitions import EPOCH, FINAL
from scalebench.timing import step_split


def figures(epochs: list, final: dict, run: dict) -> dict:
    """runs.csv's time figures of a cell: its epoch records, final record and run.json, each read
    through its definition (NaN where not measured, never 0)."""
    profiled = measures.steady_flags(epochs)  # profiled, resumed, or on nodes other than the kept ones
    times = [finite_number(e.get("epoch_time_s")) for e in epochs]
    train_time = finite_number(final.get("train_time_s"))
    if math.isnan(train_time) and epochs:
        train_time = finite_number(epochs[-1].get("train_time_s"))
    return {
        "epochs": len(epochs),
        "train_time_s": train_time,
        "steady_epoch_s": measures.steady_median(times, profiled),
        "first_epoch_s": times[0] if times else math.nan,
        "setup_s": finite_number(final.get("setup_s", run.get("setup_s"))),
        "test_time_s": finite_number(final.get("test_time_s")),
    }


NO_JOB_WALL = (
    "not recorded (run.json has no job_s: an older study, imported logs, or a launch killed before it could record it)"
)


def job_seconds(run: dict) -> tuple[float, str, str]:
    """(launch.py's job_s, its source, "") or (NaN, "", why it is empty)."""
    if "job_s" not in run and "job_s_reason" not in run:
        return math.nan, "", NO_JOB_WALL
    seconds = finite_number(run.get("job_s"))
    if math.isnan(seconds):
        return seconds, "", run.get("job_s_reason") or "job_s is empty"
    return seconds, run.get("job_s_source") or "", ""


def run_seconds(run: dict) -> tuple[float, str]:
    """Seconds from run.json's start to its end, and why they are empty where they are."""
    if run.get("resumed_from_epoch") is not None:
        return (
            math.nan,
            f"resumed after epoch {run['resumed_from_epoch']}: run.json holds the last attempt's start only",
        )
    start, end = run.get("start"), run.get("end")
    if not start or not end:
        return math.nan, "run.json has no end (the cell did not end)" if start else "run.json has no start"
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds(), ""
    except (TypeError, ValueError):
        return math.nan, f"run.json's start or end is not a time ({start!r}, {end!r})"


@dataclass(frozen=True)
class Measured:
    """What a cell that finished ok says about its time (the bill's input): its keys, where and
    with what it ran, and its figures."""

    framework: str
    backend: str
    gpus: int
    seed: int
    nodes: int | None
    steady_epoch_s: float
    comm_exposed_critical_s: float  # per steady epoch; NaN without the step split (the model infers it then)
    epochs: int
    run_s: float  # NaN where unknown (run_seconds)
    scaling: str | None  # weak or strong (training.scaling as the cell ran)
    settings: dict = field(default_factory=dict, hash=False)  # run.json's settings ({} in older records)
    data_key: str | None = None
    devices: tuple[str, ...] = ()
    job_s: float = math.nan  # what its job held (job_seconds); NaN in older records
    train_time_s: float = math.nan  # its epochs' summed time
    first_epoch_s: float = math.nan
    host: str | None = None  # rank 0's node
    start: str | None = None  # run.json's start
    cold: bool = False  # its framework's first on its host (with_cold_starts)

    @property
    def span_s(self) -> float:
        """The run the bill predicts: the job's wall, else (an older record) run.json's start to its end."""
        return self.job_s if math.isfinite(self.job_s) else self.run_s

    @property
    def from_job(self) -> bool:
        """span_s is the job's wall (not run.json's start to end, which leaves the imports out)."""
        return math.isfinite(self.job_s)

    @property
    def startup_s(self) -> float:
        """The run outside its epochs: imports, setup, the collective benchmark, evaluation,
        checkpoints, the test and the end (NaN where the run is unknown)."""
        return self.span_s - self.train_time_s

    @property
    def first_extra_s(self) -> float:
        """The first epoch above a steady one: compilation, the first batches' caches (0 where unknown)."""
        extra = self.first_epoch_s - self.steady_epoch_s
        return extra if math.isfinite(extra) else 0.0

    @property
    def fixed_s(self) -> float:
        """What the cell's run holds besides its epochs at the steady time: start-up and the first
        epoch's extra, measured figures that do not scale with the epochs (NaN where the run is unknown)."""
        return self.startup_s + self.first_extra_s

    def row(self) -> dict:
        """The columns the scaling model reads (timing/scaling_model.py: fit_series)."""
        return {
            "gpus": self.gpus,
            "nodes": self.nodes,
            "status": "ok",
            "steady_epoch_s": self.steady_epoch_s,
            "comm_exposed_critical_s": self.comm_exposed_critical_s,
            "scaling": self.scaling,
        }

    def setting(self, dotted: str) -> object:
        """The cell's setting at `dotted` (model.width, training.precision), None where its record lacks it."""
        return setting(self.settings, dotted)


def setting(settings: dict, dotted: str) -> object:
    """The value at `dotted` (model.width) of a cell's settings, None where they lack it."""
    value: object = settings
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def read(folder: str | Path) -> Measured | None:
    """The cell in `folder` where it finished ok with an epoch time (None otherwise: not run, failed,
    diverged, out of memory, refused, or without an epoch). A one-epoch cell's steady epoch is its
    only one, warm-up included, as runs.csv has it (measures.steady_median)."""
    folder = Path(folder)
    try:
        raw = json.loads((folder / "run.json").read_text())
        lines, complete = read_metrics(folder / "metrics.jsonl")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if run_problem(raw) or not complete:
        return None
    run = read_run(raw)
    finals = [FINAL.read(line) for line in lines if line.get("type") == "final"]
    if run.get("status") != "ok" or not finals or finals[-1].get("status") != "ok":
        return None
    epochs = [EPOCH.read(line) for line in lines if line.get("type") == "epoch"]
    found = figures(epochs, finals[-1], run)
    steady = found["steady_epoch_s"]
    if math.isnan(steady) or steady <= 0:
        return None
    run_s, _ = run_seconds(run)
    job_s, _, _ = job_seconds(run)
    settings = run.get("settings") if isinstance(run.get("settings"), dict) else {}
    train_time = found["train_time_s"]
    if math.isnan(train_time):
        train_time = sum(finite_number(e.get("epoch_time_s")) for e in epochs)
    hosts = run.get("hosts") or []
    return Measured(
        framework=str(run["framework"]),
        backend=str(run["backend"]),
        gpus=int(run["gpus"]),
        seed=int(run["seed"]),
        nodes=int(run["nodes"]) if isinstance(run.get("nodes"), int) else None,
        steady_epoch_s=steady,
        comm_exposed_critical_s=step_split.run_columns(epochs, steady)["comm_exposed_critical_s"],
        epochs=found["epochs"],
        run_s=run_s,
        scaling=(run.get("training") or {}).get("scaling") or settings.get("training", {}).get("scaling"),
        settings=settings,
        data_key=run.get("data_key"),
        devices=tuple(run.get("devices") or ()),
        job_s=job_s,
        train_time_s=train_time,
        first_epoch_s=found["first_epoch_s"],
        host=run.get("launch_host") or (str(hosts[0]) if hosts else None),
        start=run.get("start"),
    )


def started(cell: Measured) -> datetime | None:
    try:
        return datetime.fromisoformat(cell.start) if cell.start else None
    except (TypeError, ValueError):
        return None


def with_cold_starts(cells: list[Measured]) -> list[Measured]:
    """`cells` with the first of each framework on each host (the earliest run.json start among
    them) marked cold: the start-up it paid (compilation and kernel caches, the page cache, the
    device's first use) is not one the later cells of that node pay. A cell without a host or a
    start is not marked."""
    firsts: dict[tuple[str, str], tuple[datetime, int]] = {}
    for index, cell in enumerate(cells):
        when = started(cell)
        if cell.host is None or when is None:
            continue
        key = (cell.framework, cell.host)
        try:
            earlier = key in firsts and firsts[key][0] <= when
        except TypeError:  # a naive and an aware time: not comparable, leave the first
            earlier = True
        if not earlier:
            firsts[key] = (when, index)
    cold = {index for _, index in firsts.values()}
    return [replace(cell, cold=index in cold) for index, cell in enumerate(cells)]
