"""TensorFlow as a spec of builders (train/interfaces.py FrameworkSpec): what each one builds lives
in the module of its role, the same file names as PyTorch's (train/torch/spec.py)."""

from __future__ import annotations

from pathlib import Path

from scalebench.train.interfaces import FrameworkSpec
from scalebench.train.summaries import EpochWriter
from scalebench.train.tf import checkpoint, data, model, profiler, runtime, step_timing
from scalebench.train.tf.steps import Steps
from scalebench.train.tf.summaries import TensorFlowEpochWriter


def open_summaries(folder: Path) -> EpochWriter:
    """tf.summary's writer of the cell's curves (training.tensorboard)."""
    return TensorFlowEpochWriter(folder)


SPEC = FrameworkSpec(
    name="tensorflow",
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
