"""The per-cell output contract: metrics.jsonl and the outcome in run.json.

metrics.jsonl holds one JSON object per line: an ``epoch`` record per epoch and
one ``final`` record, written by rank 0 only, after values are reduced across
ranks. Both frameworks write through this module (from loop.py).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Protocol

from scalebench.files import json_safe
from scalebench.train import flops


class RecordSink(Protocol):
    """Where MetricsWriter also sends each record it writes (summaries.Curves: TensorBoard);
    a protocol here, so that metrics.py does not import the module that imports it."""

    def write(self, record: dict) -> None: ...

    def close(self) -> None: ...


def diverged(loss: float, max_loss: float) -> bool:
    """The run diverged: the epoch's mean loss is not finite or above training.max_loss."""
    return not math.isfinite(loss) or loss > max_loss


class MetricsWriter:
    """Appends records to metrics.jsonl (rank 0) and keeps them for checkpoints; with `curves`
    (training.tensorboard, summaries.py), each epoch record goes to TensorBoard too."""

    def __init__(
        self, path: str | Path, enabled: bool, previous: list[dict] | None = None, curves: RecordSink | None = None
    ):
        self.path = Path(path)
        self.enabled = enabled
        self.curves = curves
        self.records: list[dict] = []
        if enabled:
            self.path.write_text("")
        for record in previous or []:
            self.write(record)

    def write(self, record: dict) -> None:
        self.records.append(record)
        if self.enabled:
            append_record(self.path, record)
        if self.curves is not None:
            self.curves.write(record)

    def close_curves(self) -> None:
        if self.curves is not None:
            self.curves.close()


def append_record(path: str | Path, record: dict) -> None:
    """One line of metrics.jsonl."""
    with open(path, "a") as handle:
        handle.write(json.dumps(json_safe(record), sort_keys=True) + "\n")
        handle.flush()


def epoch_record(
    epoch: int,
    loss: float,
    lr: float,
    slowest: list[float],
    steps: int,
    batch: int,
    train_time_s: float,
    provenance: dict,
    optimizer_steps: int,
    energy_j: float | None = None,
) -> dict:
    """The epoch record of the contract. `slowest` = [epoch time, data wait, peak memory], each the
    maximum over ranks; `steps` = batches summed over replicas (images = steps x batch);
    `optimizer_steps` = optimizer steps of each replica (fewer than its batches when gradients
    are accumulated); energy_j = the epoch's joules summed over ranks (None where not measured:
    energy.py); throughput fields from the model FLOPs."""
    epoch_time_s, data_wait_s, peak_mem_mb = slowest
    images_per_s = steps * batch / epoch_time_s
    return {
        "type": "epoch",
        "epoch": epoch,
        "loss": float(loss),
        "lr": lr,
        "epoch_time_s": epoch_time_s,
        "images_per_s": images_per_s,
        "data_wait_s": data_wait_s,
        "peak_mem_mb": peak_mem_mb,
        "steps": int(steps),
        "optimizer_steps": int(optimizer_steps),
        "train_time_s": train_time_s,
        "energy_j": energy_j,
        "val_iou": None,  # the validation pairs, every training.eval_every epochs
        "val_loss": None,
        **flops.throughput_fields(
            images_per_s, provenance["model_flops_per_image"], provenance["peak_tflops"], provenance["world_size"]
        ),
    }


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


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def data_wait_share(record: dict) -> float:
    """The share of an epoch's time spent waiting for data (train.log, TensorBoard)."""
    return record["data_wait_s"] / record["epoch_time_s"] if record["epoch_time_s"] else 0.0


def progress_line(record: dict, epochs: int, remaining_s: float) -> str:
    """The line train.log gets per epoch."""
    wait_share = data_wait_share(record)
    line = (
        f"epoch {record['epoch']}/{epochs}  loss {record['loss']:.4f}  lr {record['lr']:.2e}  "
        f"{record['epoch_time_s']:.2f} s  {record['images_per_s']:.1f} img/s  "
        f"data-wait {100 * wait_share:.1f}%  left {format_duration(remaining_s)}"
    )
    if record.get("val_iou") is not None:
        line += f"  val IOU {record['val_iou']:.3f}"
    return line
