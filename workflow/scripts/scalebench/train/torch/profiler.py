"""training.profile for PyTorch: torch.profiler's trace of a window of steps on this rank.

The trace is the Chrome trace format torch.profiler exports (rank<r>.pt.trace.json), which
Perfetto (ui.perfetto.dev) and TensorBoard's PyTorch profiler plugin open: operators, the
autograd engine's threads, the backend's collectives (c10d's record functions, Gloo's or NCCL's)
and, on a GPU, the CUDA kernels and memory copies.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.profiler import ProfilerActivity

from scalebench.train.interfaces import Backend
from scalebench.train.torch.runtime import Device


class Trace:
    """torch.profiler started at construction and stopped and exported by stop()."""

    def __init__(self, folder: Path, rank: int, device: torch.device) -> None:
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        self.path = Path(folder) / f"rank{rank}.pt.trace.json"
        self.profile = torch.profiler.profile(activities=activities)
        self.profile.start()

    def stop(self) -> None:
        """Stop tracing and write the trace; a failed write leaves no partial file and raises.
        Kineto logs a failed write (a full disk, a path it cannot replace) without raising, so the
        file is checked: it must be there, new and not empty."""
        self.profile.stop()
        partial = self.path.with_name(self.path.name + ".tmp")  # where kineto writes before renaming
        try:
            if self.path.is_file():
                self.path.unlink()
            self.profile.export_chrome_trace(str(self.path))
            if not self.path.is_file() or not self.path.stat().st_size:
                raise OSError(f"torch.profiler wrote no trace to {self.path} (its error is in train.log)")
        except BaseException:
            if self.path.is_file():
                self.path.unlink()
            partial.unlink(missing_ok=True)
            raise


def start(folder: Path, device: Device, backend: Backend) -> Trace:
    """This rank's trace of the window, started (every rank traces)."""
    return Trace(folder, backend.rank, device.device)
