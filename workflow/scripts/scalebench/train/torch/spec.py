"""PyTorch as a spec of builders (train/interfaces.py FrameworkSpec): what each one builds lives in
the module of its role, the same file names as TensorFlow's (train/tf/spec.py)."""

from __future__ import annotations

from pathlib import Path

from scalebench.train.interfaces import FrameworkSpec
from scalebench.train.summaries import EpochWriter
from scalebench.train.torch import checkpoint, data, model, profiler, runtime, step_timing
from scalebench.train.torch.steps import Steps


def open_summaries(folder: Path) -> EpochWriter:
    """torch.utils.tensorboard's writer, imported only where training.tensorboard is on: it needs
    the tensorboard package (without TensorFlow: summaries.py)."""
    from scalebench.train.torch.summaries import TorchEpochWriter

    return TorchEpochWriter(folder)


SPEC = FrameworkSpec(
    name="torch",
    build_device=runtime.build_device,
    build_numerics=runtime.build_numerics,
    build_model=model.build,
    build_order=data.build_order,
    restore=checkpoint.restore,
    build_marks=step_timing.build_marks,
    distribute=model.distribute,
    build_data=data.build_data,
    build_steps=Steps,
    build_checkpointer=checkpoint.Checkpointer,
    start_trace=profiler.start,
    open_summaries=open_summaries,
)
