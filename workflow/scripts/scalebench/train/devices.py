"""Whether a rank trains on GPUs, decided the same way for both frameworks, or why it cannot.

A cell meant for GPUs (training.device cuda, or auto in a SLURM job of a cluster
with cluster.gpus_per_node > 0) never falls back to the CPU: a rank that sees no
GPU, or a node with more ranks than visible GPUs, fails before the first step
with a message that says what is missing. device cpu means the CPU everywhere.

cluster.gpu_binding says what a task sees. node: all its node's GPUs, and each
rank takes its local rank's. task: SLURM bound the task to its own GPUs
(--gpus-per-task), so a task that sees exactly its share uses it, GPU 0 up; SLURM
never gives two tasks the same one. A rank only knows what it sees, so a task
seeing one GPU under node binding (ranks would share it) and a task seeing some
GPUs but neither its share nor the node's under task binding (which are its own
cannot be told) are refused.

Before either, the GPU stack check (check_stack): where the cell is meant for GPUs or nvidia-smi
lists some, the node's driver and GPUs are held against the framework's build (scalebench/
gpu_stack.py), and a build they cannot run is refused naming the driver, the GPU and the install
that fits; that message replaces "sees none" where the framework sees none because of it.

A device that ran out of memory is described here too (out_of_memory_reason: its name and
memory beside the cell's batch and image size), for the cell's oom outcome.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

from scalebench import gpu_stack
from scalebench.cluster import gpu_ids, nvidia_smi
from scalebench.refusal import GpuStackMismatch, Refused
from scalebench.settings import TrainingSettings


class DeviceError(Refused, RuntimeError):
    """A cell meant for GPUs cannot have them; the message says why and what to do."""


def use_gpus(
    required: bool,
    setting: str,
    visible: int,
    ranks_on_node: int,
    per_process: int,
    library: str,
    share: bool = False,
    binding: str = "node",
) -> bool:
    """True to train on GPUs, False for the CPU; raises DeviceError where neither is right.

    visible: GPUs the framework sees in this process; ranks_on_node: processes of the cell on
    this node; per_process: GPUs each process drives (1, or all of a node's for one-process
    backends); library: the framework and its build, for the message; share: ranks may share
    a GPU (SCALEBENCH_SHARE_GPU=1, for a functional check of the multi-rank path on one GPU);
    binding: cluster.gpu_binding, node or task (the module's docstring).
    """
    if setting == "cpu":
        return False
    if visible == 0:
        if required:
            why = "training.device is cuda" if setting == "cuda" else "it runs on SLURM and cluster.gpus_per_node > 0"
            raise DeviceError(
                f"this cell is meant for GPUs ({why}) but {library} sees none on this node "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): load the cluster's "
                "CUDA module, install the framework's CUDA build (README, GPU install), or set training.device: cpu"
            )
        return False
    needed = ranks_on_node * per_process
    if binding == "task" and visible == per_process:
        return True  # this task's own GPUs (gpu_index: from 0)
    if binding == "task" and visible < needed:
        what = f"fewer than its {per_process}" if visible < per_process else f"not its own {per_process}"
        raise DeviceError(
            f"this task sees {visible} GPU(s) under cluster.gpu_binding: task, {what} nor the {needed} of the "
            f"{ranks_on_node} rank(s) on this node ({library}): which are this rank's cannot be told and ranks "
            "could share a GPU; check that SLURM binds GPUs to tasks (--gpus-per-task, --gpu-bind) or use node"
        )
    if needed > visible and share and per_process == 1:
        print(
            f"warning: {ranks_on_node} ranks share {visible} GPU(s) (SCALEBENCH_SHARE_GPU=1): a functional check, "
            "not a scaling measurement",
            flush=True,
        )
        return True
    if needed > visible:
        own = (
            " (or, where each task sees only its own GPU, cluster.gpu_binding: task)" if visible == per_process else ""
        )
        raise DeviceError(
            f"{ranks_on_node} rank(s) on this node need {needed} GPUs but {library} sees {visible}: ranks would "
            f"share a GPU; give each node as many GPUs as ranks (cluster.gpus_per_node, the gres template){own}"
        )
    return True


def check_stack(
    setting: str,
    required: bool,
    visible: int,
    read_build: Callable[[], gpu_stack.Build],
    read_node: Callable[[], gpu_stack.Node] = nvidia_smi.read_node,
) -> dict:
    """run.json's gpu_stack, after refusing (GpuStackMismatch) a framework build this node's driver or
    GPUs cannot run. Asked where the cell may use GPUs (not training.device cpu) and nvidia-smi lists
    some: the GPUs this process sees (CUDA_VISIBLE_DEVICES) against the build's answers
    (`read_build`, the runtime's). A rank that would train on GPUs (required, or seeing some) is
    refused on a problem; one of training.device auto that sees none trains on the CPU, said in its
    log and run.json. visible: the GPUs the framework sees."""
    if setting == "cpu":
        return gpu_stack.record(gpu_stack.Node(), None, "training.device is cpu")
    node = read_node()
    if not node.gpus:
        return gpu_stack.record(node, None)  # a node without GPUs: use_gpus decides, as before
    node = node.restricted(gpu_ids.listed_ids(os.environ))
    build = read_build()
    found = gpu_stack.problems(node, build)
    if found and (required or visible > 0):
        raise GpuStackMismatch(
            f"the GPU stack check refuses this cell before its first step: {' '.join(found)} "
            "(Or train on the CPU: training.device: cpu.)"
        )
    if found:
        print(f"warning: training.device auto: this rank trains on the CPU: {' '.join(found)}", flush=True)
    for note in gpu_stack.notes(node, build):
        print(f"gpu stack: {note}", flush=True)
    return gpu_stack.record(node, build, unheeded=found)


def process_gpus(local_rank: int, per_process: int, visible: int) -> list[int]:
    """The indices, among the GPUs this process sees (CUDA_VISIBLE_DEVICES's order, as the frameworks
    and NVML's mapping in energy.py count them), of the GPUs it drives: a one-GPU rank's own
    (gpu_index), or a one-process backend's first `per_process`. The runtimes choose their devices
    with it and the energy meter and the free-memory probe read the same GPUs."""
    if per_process == 1:
        return [gpu_index(local_rank, visible)]
    return list(range(per_process))


def gpu_index(local_rank: int, visible: int) -> int:
    """The GPU of a one-GPU rank: its local rank among the node's GPUs; 0 where the task sees only its own
    (task binding; ranks beyond the visible GPUs otherwise only when sharing)."""
    return local_rank % visible


def tf32_allowed_by_environment() -> bool:
    """False when NVIDIA_TF32_OVERRIDE=0: cuDNN and cuBLAS then never use TF32, whatever the framework asks."""
    return os.environ.get("NVIDIA_TF32_OVERRIDE") != "0"


def deterministic(setting: bool | None, on_gpu: bool) -> bool:
    """training.deterministic resolved: null means on for CPU ranks and off on GPUs."""
    return (not on_gpu) if setting is None else setting


def memory_total_mb(device_type: str, index: int) -> float | None:
    """The memory of a rank's device in MB, for an out-of-memory reason: the GPU's (nvidia-smi, either
    framework) or the host's; None where it cannot be read."""
    try:
        if device_type != "cuda":
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
        query = [
            "nvidia-smi",
            f"--id={gpu_ids.device_id(index)}",
            "--query-gpu=memory.total",
            "--format=csv,noheader,nounits",
        ]
        return float(subprocess.run(query, capture_output=True, text=True, timeout=10, check=True).stdout.split()[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def out_of_memory_reason(
    error: BaseException,
    device: str,
    device_type: str,
    local_rank: int,
    training: TrainingSettings,
    image_size: tuple[int, int],
) -> str:
    """What ran out: the framework's words (what it was allocating), the device (its name, as the
    framework reports it) and its memory, and the cell's batch and image size, so the reason alone
    says what to change."""
    height, width = image_size
    total = memory_total_mb(device_type, local_rank)
    memory = f"{total:.0f} MB" if total is not None else "memory unknown"
    return (
        f"{type(error).__name__}: {str(error).strip()} [device {device} with {memory}; "
        f"batch_per_gpu {training.batch_per_gpu}, images {height}x{width}, "
        f"precision {training.precision}]"
    )
