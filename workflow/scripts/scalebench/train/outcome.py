"""A rank that runs out of memory ends its whole cell at once, with status oom.

Waiting for the other ranks to notice would leave them blocked in a collective
until its timeout, and the job would fail and be retried. Instead the rank
leaves a mark in the cell's folder and exits with OOM_EXIT_CODE; the launcher
(torchrun, srun --kill-on-bad-exit, horovodrun) then stops the other ranks, and
launch.py, seeing the mark, writes the final record and run.json's status oom
and ends the job successfully: an out-of-memory run is a result, not a failure.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from scalebench.files import write_json_atomic, write_text_atomic
from scalebench.train import metrics, provenance

OOM_EXIT_CODE = 75
MARKS = ".oom"


class CellOutOfMemory(Exception):
    """This rank ran out of device memory; the cell ends with status oom."""


def mark(out: str | Path, rank: int, message: str) -> None:
    folder = Path(out) / MARKS
    folder.mkdir(exist_ok=True)
    write_text_atomic(folder / f"rank{rank}", message)


def clear(out: str | Path) -> None:
    shutil.rmtree(Path(out) / MARKS, ignore_errors=True)


def finish(out: str | Path) -> str | None:
    """If a rank left its mark: the final record, run.json's status oom, and the message; else None."""
    folder = Path(out) / MARKS
    marks = sorted(folder.glob("rank*")) if folder.is_dir() else []
    if not marks:
        return None
    message = "; ".join(f"{m.name}: {m.read_text()}" for m in marks)
    out = Path(out)
    records_path = out / "metrics.jsonl"
    lines = records_path.read_text().splitlines() if records_path.exists() else []
    epochs = [r for r in (json.loads(line) for line in lines if line.strip()) if r.get("type") == "epoch"]
    train_time = epochs[-1]["train_time_s"] if epochs else 0.0
    metrics.append_record(records_path, metrics.final_record("oom", None, train_time, len(epochs)))
    run_json = out / "run.json"
    run = json.loads(run_json.read_text()) if run_json.exists() else {}
    run.update(status="oom", error=f"out of memory: {message}", end=provenance.now_iso())
    write_json_atomic(run_json, run)
    clear(out)
    return message
