"""training.profile for TensorFlow: its profiler's trace of a window of steps on this rank.

tf.profiler writes rank<r>/plugins/profile/<run>/<host>.xplane.pb, which TensorBoard's profile
plugin (tensorboard-plugin-profile) shows: the trace viewer with TensorFlow's ops, the
collectives' ops and, on a GPU, the kernels and copies.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import tensorflow as tf

from scalebench.train.interfaces import Backend
from scalebench.train.profiling import NotTraced
from scalebench.train.tf.runtime import Device


class Trace:
    """TensorFlow's profiler started at construction and stopped, writing its trace, by stop()."""

    def __init__(self, folder: Path, rank: int) -> None:
        self.folder = Path(folder) / f"rank{rank}"  # ranks on one host would share the host's file name
        tf.profiler.experimental.start(str(self.folder))

    def stop(self) -> None:
        """Stop tracing and write the trace; a failed write leaves no partial folder and raises."""
        try:
            tf.profiler.experimental.stop()
            if not any(self.folder.rglob("*.xplane.pb")):
                raise OSError(f"TensorFlow's profiler wrote no trace into {self.folder}")
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise


def start(folder: Path, device: Device, backend: Backend) -> Trace:
    """This rank's trace of the window, started; NotTraced where only rank 0 may trace (its backend's
    untraced_ranks says why)."""
    if backend.untraced_ranks and backend.rank != 0:
        raise NotTraced(backend.untraced_ranks)
    return Trace(folder, backend.rank)
