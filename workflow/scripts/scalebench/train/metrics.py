"""The per-cell output contract: metrics.jsonl and the outcome in run.json.

metrics.jsonl holds one JSON object per line: an ``epoch`` record per epoch and
one ``final`` record, written by rank 0 only, after values are reduced across
ranks. Both frameworks write through this module (from loop.py).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Protocol

from scalebench.records import store
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
    """Writes records to metrics.jsonl (rank 0) and keeps them for checkpoints; with `curves`
    (training.tensorboard, summaries.py), each epoch record goes to TensorBoard too."""

    def __init__(
        self, path: str | Path, enabled: bool, previous: list[dict] | None = None, curves: RecordSink | None = None
    ):
        self.path = Path(path)
        self.enabled = enabled
        self.curves = curves
        self.records: list[dict] = list(previous or [])
        if enabled:  # a resumed run's file holds exactly its checkpoint's records: each epoch once
            store.write_metrics(self.path, self.records)
        if self.curves is not None:
            for record in self.records:
                self.curves.write(record)

    def write(self, record: dict) -> None:
        """The file rewritten whole with `record` last: a failed write leaves the last complete one."""
        self.records.append(record)
        if self.enabled:
            store.write_metrics(self.path, self.records)
        if self.curves is not None:
            self.curves.write(record)

    def close_curves(self) -> None:
        if self.curves is not None:
            self.curves.close()


def epoch_record(
    epoch: int,
    loss: float,
    rates: tuple[float, float],
    slowest: list[float],
    steps: int,
    batch: int,
    train_time_s: float,
    provenance: dict,
    optimizer_steps: int,
    energy_j: float | None = None,
    resumed: bool = False,
) -> dict:
    """The epoch record of the contract. `rates` = (the rate the optimizer held after the epoch's
    steps, the schedule's: observed.py); `slowest` = [epoch time, data wait, peak memory], each the
    maximum over ranks; `steps` = batches summed over replicas (images = steps x batch: the images
    the epoch saw, its shard cycled where training.steps_per_epoch asks for more);
    `optimizer_steps` = optimizer steps of each replica (fewer than its batches when gradients
    are accumulated); energy_j = the epoch's joules summed over ranks (None where not measured:
    energy.py); resumed: the first epoch after resuming from a checkpoint; throughput fields from
    the model FLOPs."""
    epoch_time_s, data_wait_s, peak_mem_mb = slowest
    lr, scheduled_lr = rates
    images_per_s = steps * batch / epoch_time_s
    return {
        "type": "epoch",
        "epoch": epoch,
        "loss": float(loss),
        "lr": lr,  # read back from the optimizer
        "scheduled_lr": scheduled_lr,  # lr_schedule.learning_rate
        "epoch_time_s": epoch_time_s,
        "images_per_s": images_per_s,
        "data_wait_s": data_wait_s,
        "peak_mem_mb": peak_mem_mb,
        "steps": int(steps),
        "images": int(steps) * batch,
        "optimizer_steps": int(optimizer_steps),
        "train_time_s": train_time_s,
        "energy_j": energy_j,
        "val_iou": None,  # the validation pairs, every training.eval_every epochs
        "val_loss": None,
        "resumed": resumed,
        **flops.throughput_fields(
            images_per_s, provenance["model_flops_per_image"], provenance["peak_tflops"], provenance["replicas"]
        ),
    }


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
    if record.get("comm_exposed_s") is not None and record["epoch_time_s"]:  # the step split (median rank)
        line += f"  exposed comm {100 * record['comm_exposed_s'] / record['epoch_time_s']:.1f}%"
    if record.get("val_iou") is not None:
        line += f"  val IOU {record['val_iou']:.3f}"
    return line
