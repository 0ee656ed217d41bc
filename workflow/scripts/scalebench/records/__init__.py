"""A cell's records: reading and appending metrics.jsonl, the final record that both its ranks and
launch.py write (the launcher ends an out-of-memory or refused cell with it: outcome.py), the
timestamps, and run.json's compatibility reader (read_run). Each record's fields are defined in records/definitions.py;
the epoch records and the progress line are the ranks' own (train/metrics.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from scalebench.records import definitions, store
from scalebench.records.fields import ReadRecord


def now_iso() -> str:
    """run.json's start and end: UTC, to the millisecond (a tiny cell ends within its first second,
    and its GPU-hours must not read as zero)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def read_run(run: dict) -> ReadRecord:
    """A parsed run.json for reading through its definition, in today's names and words (the
    compatibility reader: records/definitions.py says what each field was called or said before,
    `was` and `old_words`; e.g. an old TensorFlow record's device gpu reads as cuda, an old
    world_size as replicas)."""
    return definitions.RUN.read(definitions.RUN.today(run))


# What a finished cell's run.json says at the end; refused: it cannot run as set up there, and says why.
FINISHED_STATUSES = ("ok", "diverged", "oom", "refused")


# The fields every run.json has had from its start (train/provenance.start_record, outcome.record).
RUN_IDENTITY = ("framework", "backend", "gpus", "seed", "status")


def run_problem(run: object) -> str:
    """Why a parsed run.json cannot be read as a cell's record ('' if it can): not an object, or
    without the fields every version wrote (a record of a version too old to read)."""
    if not isinstance(run, dict):
        return "run.json is not a JSON object"
    absent = [name for name in RUN_IDENTITY if name not in run]
    if absent:
        return f"run.json has no {', '.join(absent)}: written by a version too old to read"
    return ""


def read_metrics(path: str | Path) -> tuple[list[dict], bool]:
    """The records of a metrics.jsonl, and whether every line was complete.

    A killed job can leave a truncated last line: everything before it is kept.
    """
    records, complete = [], True
    with open(path) as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                complete = False
                break
    return records, complete


def append_record(path: str | Path, record: dict) -> None:
    """One line more of metrics.jsonl, the file rewritten whole and kept (records/store.py)."""
    store.append_record(path, record)


def final_record(
    status: str, setup_s: float, train_time_s: float, epochs_completed: int, stopped_at_target: bool = False
) -> dict:
    """The final record; evaluation fills test_loss, iou and test_time_s (the test pairs) when the
    run is ok, the loop the cost (train_gpu_hours, energy_j, energy_source, energy_reason: COST_FIELDS).
    stopped_at_target: training ended early, after epoch epochs_completed, because its validation
    IOU reached training.target_iou (training.stop_at_target)."""
    return {
        "type": "final",
        "status": status,
        "setup_s": setup_s,
        "train_time_s": train_time_s,
        "epochs_completed": epochs_completed,
        "stopped_at_target": stopped_at_target,
        "test_loss": None,
        "iou": None,
        "test_time_s": None,
    }


# The epochs' cost, in the final record and run.json: train_gpu_hours = GPUs x train_time_s (the
# epochs' summed time; what the cell's job held is launch.py's job_s); energy_j over the same
# epochs, None with energy_reason where unmeasured.
COST_FIELDS = ("train_gpu_hours", "energy_j", "energy_source", "energy_reason")


# A rank's rest_s (its epoch less its measured parts) may fall below zero by this much: 1% of the
# epoch plus 2 ms (on a GPU the device's marks and the host's clock are two timelines; on a CPU rest
# is never negative but for rounding)
REST_TOLERANCE_SHARE = 0.01
REST_TOLERANCE_S = 0.002

# The epoch record's step split, each field and its meaning (records/definitions.py defines it;
# docs/step-split.md lists the same: a test keeps both equal).
STEP_SPLIT_FIELDS = {field.name: field.meaning for field in definitions.STEP_SPLIT}
