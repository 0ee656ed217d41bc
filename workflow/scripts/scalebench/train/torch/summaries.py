"""PyTorch's writer of a cell's TensorBoard curves (summaries.py): torch.utils.tensorboard."""

from __future__ import annotations

import sys
import types
from pathlib import Path

# TensorBoard's writer imports TensorFlow where it is installed (tensorboard.compat.tf) only for its
# file I/O; the module tensorboard.compat.notf, which TensorBoard's own no-TensorFlow build provides,
# makes it use its stub instead. A torch rank then never imports TensorFlow (train/entry.py): about
# 4 CPU-s less in rank 0, and none of TensorFlow's memory beside the model.
sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))

from torch.utils.tensorboard import SummaryWriter  # noqa: E402


class TorchEpochWriter:
    def __init__(self, folder: Path) -> None:
        self.writer = SummaryWriter(log_dir=str(folder))

    def write(self, scalars: dict[str, float], step: int) -> None:
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
