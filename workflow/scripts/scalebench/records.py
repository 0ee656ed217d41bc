"""The records of a cell's metrics.jsonl that both its ranks and launch.py write (the launcher
ends an out-of-memory or refused cell with its final record: outcome.py), and their timestamps.
The epoch records and the progress line are the ranks' own (train/metrics.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from scalebench.files import json_safe


def now_iso() -> str:
    """run.json's start and end: UTC, to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def append_record(path: str | Path, record: dict) -> None:
    """One line of metrics.jsonl."""
    with open(path, "a") as handle:
        handle.write(json.dumps(json_safe(record), sort_keys=True) + "\n")
        handle.flush()


def final_record(
    status: str, setup_s: float, train_time_s: float, epochs_completed: int, stopped_at_target: bool = False
) -> dict:
    """The final record; evaluation fills test_loss, iou and test_time_s (the test pairs) when the
    run is ok, the loop the cost (gpu_hours, energy_j, energy_source, energy_reason: COST_FIELDS).
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


# The cost of a cell, in the final record and run.json: GPU-hours = GPUs x train_time_s (the
# epochs' summed time); energy_j over the same epochs, None with energy_reason where unmeasured.
COST_FIELDS = ("gpu_hours", "energy_j", "energy_source", "energy_reason")
