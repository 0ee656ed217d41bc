"""training.compile for PyTorch: torch.compile (inductor) of the model as its backend wrapped it.

DDP's wrapped model compiles with Dynamo's DDPOptimizer (graphs split at the gradient buckets, so
the allreduces still overlap the backward pass); FSDP2's sharded model with its hooks; Horovod's
plain model, whose parameters' gradient hooks start the allreduces. Evaluation uses the eager
model. The first epoch pays for the compilation (the tables report it apart from the steady epochs).
"""

from __future__ import annotations

import shutil

import torch

from scalebench.refusal import SettingRefused
from scalebench.train.observed import compiled_record

COMPILER = "torch.compile (inductor)"


def check_available(device: torch.device) -> None:
    """Fail before anything is built where torch.compile cannot work here, saying what is missing."""
    import torch._dynamo
    from torch.utils._triton import has_triton

    if not torch._dynamo.is_dynamo_supported():
        raise SettingRefused(
            f"training.compile: torch.compile is not supported by torch {torch.__version__} on this Python; "
            "set training.compile: false (or leave matrix.compile out)"
        )
    if device.type == "cuda" and not has_triton():
        raise SettingRefused(
            "training.compile: torch.compile needs Triton for CUDA kernels, and this torch has none: install "
            "the framework's CUDA build with its triton package, or set training.compile: false"
        )
    if device.type == "cpu":
        from torch._inductor import cpp_builder

        compiler = cpp_builder.get_cpp_compiler()
        if shutil.which(compiler) is None:
            raise SettingRefused(
                f"training.compile: torch.compile on the CPU needs a C++ compiler ({compiler} is not on PATH): "
                "load the cluster's compiler module, or set training.compile: false"
            )


def compile_model(model: torch.nn.Module) -> torch.nn.Module:
    return torch.compile(model)


def observed() -> dict:
    """What torch.compile built in this process so far, from Dynamo's own counters (a rank trains
    one cell, and only its training model is compiled): the graphs it captured and handed to
    inductor, and its recompiles with the guards that failed. None of it without a compile: 0
    graphs (also where Dynamo is disabled, TORCHDYNAMO_DISABLE=1, and torch.compile returns the
    model as it is)."""
    from torch._dynamo.utils import counters, guard_failures

    reasons = [reason for failures in guard_failures.values() for reason in failures]
    return compiled_record(COMPILER, counters["stats"]["unique_graphs"], len(reasons), reasons)
