"""Test hooks, set through SCALEBENCH_FAULT; the loop calls check() before each epoch's first step.

- ``oom:RANK:EPOCH``: rank RANK raises its framework's out-of-memory error in epoch EPOCH.
- ``stall:EPOCH``: a run that did not resume blocks at the start of epoch EPOCH, so it
  outlasts any time limit however fast the machine is (its retry resumes and goes on).
- ``meet:FOLDER:COUNT``: rank 0 of each cell waits before its first epoch until COUNT
  cells have arrived in FOLDER (cells that must run at the same time); fails after 300 s.
- ``hide_checkpoint:RANK``: rank RANK looks for the cell's checkpoint in an empty folder,
  as a rank on a node that does not see the cell's folder would (checkpoint_folder).
- ``lr:EPOCH:FACTOR``: in epoch EPOCH the optimizer is handed FACTOR times the schedule's rate,
  as a broken wiring would hand it another (learning_rate); the rate read back from it then
  differs (observed.py).
- ``collectives_fail:RANK``: rank RANK fails to prepare the collective benchmark's first
  all-reduce (collective_failure), as a rank out of memory for its buffers would.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

MEET_TIMEOUT_S = 300


def check(rank: int, epoch: int, resumed: bool, out_of_memory: Callable[[str], BaseException]) -> None:
    """Apply the hook of SCALEBENCH_FAULT, if any, at the start of 0-based `epoch`."""
    fault = os.environ.get("SCALEBENCH_FAULT", "")
    kind, _, argument = fault.partition(":")
    if kind == "oom":
        fault_rank, fault_epoch = argument.split(":")
        if int(fault_rank) == rank and int(fault_epoch) == epoch + 1:
            raise out_of_memory(f"out of memory (injected by SCALEBENCH_FAULT={fault})")
    elif kind == "stall" and not resumed and int(argument) == epoch + 1:
        print(f"stalling at epoch {epoch + 1} (SCALEBENCH_FAULT={fault})", flush=True)
        while True:
            time.sleep(1)
    elif kind == "meet" and epoch == 0 and rank == 0:
        folder, count = argument.rsplit(":", 1)
        meet(Path(folder), int(count), fault)


def checkpoint_folder(rank: int, out: Path) -> Path:
    """Where this rank looks for the cell's checkpoint: `out`, unless ``hide_checkpoint`` hides it."""
    kind, _, argument = os.environ.get("SCALEBENCH_FAULT", "").partition(":")
    if kind == "hide_checkpoint" and int(argument) == rank:
        return out / ".hidden-checkpoint"  # never written: this rank sees no checkpoint
    return out


def learning_rate(rate: float, epoch: int) -> float:
    """The rate the loop hands the framework in 0-based `epoch`: the schedule's, unless ``lr`` scales it."""
    kind, _, argument = os.environ.get("SCALEBENCH_FAULT", "").partition(":")
    if kind == "lr":
        fault_epoch, factor = argument.split(":")
        if int(fault_epoch) == epoch + 1:
            return rate * float(factor)
    return rate


def collective_failure(rank: int, op: str) -> None:
    """Raise where ``collectives_fail`` names this rank, while the benchmark prepares an all-reduce."""
    kind, _, argument = os.environ.get("SCALEBENCH_FAULT", "").partition(":")
    if kind == "collectives_fail" and int(argument) == rank and op == "all_reduce":
        raise RuntimeError(f"injected by SCALEBENCH_FAULT=collectives_fail:{argument}")


def meet(folder: Path, count: int, fault: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{os.getpid()}-{time.time_ns()}").touch()
    deadline = time.monotonic() + MEET_TIMEOUT_S
    while len(list(folder.iterdir())) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"SCALEBENCH_FAULT={fault}: the other cells did not arrive within {MEET_TIMEOUT_S} s")
        time.sleep(0.2)
