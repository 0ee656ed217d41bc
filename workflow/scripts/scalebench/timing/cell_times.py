"""A cell's time from its records: the figures runs.csv shows (analysis/collect.py) and the bill fits
(config/bill.py), computed here once so that both read a cell's time alike.

- `figures`: the epochs, their summed time, the steady epoch (measures.steady_median: after the first,
  a profiled or resumed epoch left out), the first epoch, start-up and test;
- `run_seconds`: the rank's whole run, run.json's start to its end (start-up, every epoch with its
  evaluation and checkpoints, the test); empty with the reason where the run was resumed (the record
  holds only the last attempt's start) or has not ended;
- `read`: a finished cell's folder as the bill reads it (`Measured`), through the records' definitions.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
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
    profiled = [measures.unsteady(e) for e in epochs]
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

    @property
    def overhead_s(self) -> float:
        """The run's time besides its epochs at the steady time: start-up, the first epoch's warm-up
        above a steady one, evaluation, checkpoints and the test (NaN where the run time is unknown)."""
        return self.run_s - self.epochs * self.steady_epoch_s

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
    settings = run.get("settings") if isinstance(run.get("settings"), dict) else {}
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
    )
