"""Outcomes that are results, not failures: out of memory (oom) and refused.

A rank that runs out of memory ends its whole cell at once, with status oom.
Waiting for the other ranks to notice would leave them blocked in a collective
until its timeout, and the job would fail and be retried. Instead the rank
leaves a mark in the cell's folder and exits with OOM_EXIT_CODE; the launcher
(torchrun, srun --kill-on-bad-exit, horovodrun) then stops the other ranks, and
launch.py, seeing the mark, writes the final record and run.json's status oom
and ends the job successfully: an out-of-memory run is a result, not a failure.

A rank that refuses the cell (scalebench/refusal.py: no usable GPU, ranks sharing
one, Horovod without NCCL, a refused setting) does the same with status refused
and REFUSED_EXIT_CODE, so Snakemake does not retry what no retry can change.
run.json's `reason` says why, in the rank's words.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from scalebench import records
from scalebench.files import write_text_atomic
from scalebench.records import store

OOM_EXIT_CODE = 75
REFUSED_EXIT_CODE = 78  # EX_CONFIG: the set-up is wrong, not the run
# The folder of each outcome's marks in the cell's folder, and run.json's error prefix.
MARKS = {"oom": ".oom", "refused": ".refused"}
ERRORS = {"oom": "out of memory", "refused": "refused"}


class CellOutOfMemory(Exception):
    """This rank ran out of device memory; the cell ends with status oom."""


def mark(out: str | Path, rank: int, message: str, status: str = "oom") -> None:
    folder = Path(out) / MARKS[status]
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / f"rank{rank}", message)


def clear(out: str | Path) -> None:
    for name in MARKS.values():
        shutil.rmtree(Path(out) / name, ignore_errors=True)


def record(out: str | Path, status: str, reason: str, cell: dict | None = None) -> None:
    """The final record and run.json's status and reason of a cell that ended `status` (oom, refused)."""
    out = Path(out)
    records_path = out / "metrics.jsonl"
    lines = (store.read_text(records_path) or "").splitlines()
    epochs = [r for r in (json.loads(line) for line in lines if line.strip()) if r.get("type") == "epoch"]
    train_time = epochs[-1]["train_time_s"] if epochs else 0.0
    records.append_record(records_path, records.final_record(status, None, train_time, len(epochs)))
    run_json = out / "run.json"
    run = store.read_run(run_json) or dict(cell or {})
    run.update(status=status, reason=reason, error=f"{ERRORS[status]}: {reason}", end=records.now_iso())
    store.write_run(run_json, run)


def finish(out: str | Path, cell: dict | None = None) -> tuple[str, str] | None:
    """If a rank left a mark: the final record, run.json's status and reason, and (status, reason);
    else None. Out of memory wins over a refusal (a rank can only run out of memory after starting)."""
    for status, name in MARKS.items():
        folder = Path(out) / name
        marks = sorted(folder.glob("rank*")) if folder.is_dir() else []
        if marks:
            reason = "; ".join(f"{m.name}: {m.read_text()}" for m in marks)
            record(out, status, reason, cell)
            clear(out)
            return status, reason
    return None
