"""Failures that no retry can change, so a cell ends at its first attempt with status refused.

A rank that sees no GPU, ranks that would share one, a framework build the node's
driver or GPUs cannot run, a Horovod built without the operations the cell needs, a
launcher that started other ranks than the cell asks for, a setting a rank refuses:
the next attempt would meet the same machine and the same settings. Retrying them
re-queues an allocation for nothing (on SLURM at a longer time limit each time). Their
exceptions derive from Refused; entry.py marks the cell and outcome.py records it as
refused, with the reason, and the job ends successfully, as diverged and oom runs do.
The report lists it with the command that reruns it once the cause is fixed.
"""

from __future__ import annotations


class Refused(Exception):
    """This cell cannot run here as set up; the message says why and what to change."""


class SettingRefused(Refused, ValueError):
    """A setting of the cell that a rank cannot honour (fp16 without a GPU, a batch larger
    than its shard, a compression its backend does not have)."""


class HorovodBuildError(Refused, RuntimeError):
    """The installed Horovod lacks what the cell needs (a framework, Gloo or MPI, NCCL)."""


class GpuStackMismatch(Refused, RuntimeError):
    """The node's driver or GPUs cannot run the framework's build (scalebench/gpu_stack.py): the
    message names the driver, the GPU, the build and the install that fits."""
