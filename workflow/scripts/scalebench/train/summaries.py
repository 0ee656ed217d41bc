"""Live curves: each epoch record as TensorBoard scalars (training.tensorboard).

Rank 0 writes them beside metrics.jsonl, under the cell's ``tensorboard/``
folder, through its framework's own summary writer (train/torch/summaries.py,
train/tf/summaries.py; its spec's open_summaries). The tags come from the
record's keys here, the same for both frameworks; the step is the epoch number.
The writer is fed by metrics.MetricsWriter, so the curves hold exactly the
epoch records of metrics.jsonl: a resumed run rewrites its earlier epochs
and goes on at the next one.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from scalebench.train.metrics import data_wait_share

FOLDER = "tensorboard"

# record key -> tag; the in-training evaluation is on the validation split (the test split is
# only for the final figures)
TAGS = {
    "loss": "loss/train",
    "val_loss": "loss/validation",
    "val_iou": "iou/validation",
    "lr": "learning_rate",
    "images_per_s": "throughput/images_per_s",
}
DATA_WAIT_TAG = "data_wait/share"  # data_wait_s / epoch_time_s, as train.log prints it


class EpochWriter(Protocol):
    """A framework's summary writer of one cell's curves (rank 0 only)."""

    def write(self, scalars: dict[str, float], step: int) -> None:
        """Write the scalars at `step` and flush, so a running cell's curves are on disk."""

    def close(self) -> None: ...


def scalars(record: dict) -> dict[str, float]:
    """The tags and values of an epoch record; fields it leaves empty (no evaluation) are left out."""
    values = {tag: float(record[key]) for key, tag in TAGS.items() if record.get(key) is not None}
    values[DATA_WAIT_TAG] = data_wait_share(record)
    return values


class Curves:
    """The epoch records of one run, written through a framework's EpochWriter."""

    def __init__(self, writer: EpochWriter) -> None:
        self.writer = writer
        self.closed = False

    def write(self, record: dict) -> None:
        if record["type"] == "epoch" and not self.closed:
            self.writer.write(scalars(record), record["epoch"])

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.writer.close()


def start(cell_folder: Path, enabled: bool, open_writer: Callable[[Path], EpochWriter]) -> Curves | None:
    """Rank 0 at the start of a run: the curves of an earlier run go (a retrained cell starts
    fresh, a resumed one rewrites its earlier epochs); new ones when training.tensorboard is on."""
    folder = cell_folder / FOLDER
    shutil.rmtree(folder, ignore_errors=True)
    return Curves(open_writer(folder)) if enabled else None
