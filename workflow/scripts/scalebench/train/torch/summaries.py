"""PyTorch's writer of a cell's TensorBoard curves (summaries.py): torch.utils.tensorboard."""

from __future__ import annotations

from pathlib import Path

from torch.utils.tensorboard import SummaryWriter


class TorchEpochWriter:
    def __init__(self, folder: Path) -> None:
        self.writer = SummaryWriter(log_dir=str(folder))

    def write(self, scalars: dict[str, float], step: int) -> None:
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
