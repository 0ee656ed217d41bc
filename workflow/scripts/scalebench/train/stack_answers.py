"""A framework build's answers to the GPU stack check, asked in that framework's environment by
`workflow/scripts/check_stack.py --build-answers FRAMEWORK` (scalebench/gpu_stack.py ask_build).

Horovod's binding for the framework is imported first, so that the NCCL files it maps are in the
process when the answers read them: two different libnccl files in one process is a problem the
check names. The rank asks only its runtime's build_answers, without Horovod (backend horovod's
ranks check its build themselves: horovod_common.check_build, check_gpu_reductions).
"""

from __future__ import annotations

from scalebench import gpu_stack
from scalebench.train import horovod_common


def build_answers(framework: str) -> gpu_stack.Build:
    """`framework`'s build as this environment holds it, with Horovod's GPU operations."""
    if framework == "torch":
        from scalebench.train.torch import runtime
        from scalebench.train.torch.horovod import HorovodTorchBackend as Horovod
    elif framework == "tensorflow":
        from scalebench.train.tf import runtime
        from scalebench.train.tf.horovod import HorovodTFBackend as Horovod
    else:
        raise ValueError(f"no framework {framework!r}: torch or tensorflow")
    horovod = horovod_common.gpu_operations(Horovod.library)
    return runtime.build_answers(runtime.visible_gpus(), horovod)
