"""TensorFlow's writer of a cell's TensorBoard curves (summaries.py): tf.summary."""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf


class TensorFlowEpochWriter:
    def __init__(self, folder: Path) -> None:
        self.writer = tf.summary.create_file_writer(str(folder))

    def write(self, scalars: dict[str, float], step: int) -> None:
        with self.writer.as_default():
            for tag, value in scalars.items():
                tf.summary.scalar(tag, value, step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
