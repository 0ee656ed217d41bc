"""Whether a rank trains on GPUs, decided the same way for both frameworks, or why it cannot.

A cell meant for GPUs (training.device cuda, or auto in a SLURM job of a cluster
with cluster.gpus_per_node > 0) never falls back to the CPU: a rank that sees no
GPU, or a node with more ranks than visible GPUs, fails before the first step
with a message that says what is missing. device cpu means the CPU everywhere.
"""

from __future__ import annotations

import os
import subprocess

from scalebench.train.refusal import Refused


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
) -> bool:
    """True to train on GPUs, False for the CPU; raises DeviceError where neither is right.

    visible: GPUs the framework sees in this process; ranks_on_node: processes of the cell on
    this node; per_process: GPUs each process drives (1, or all of a node's for one-process
    backends); library: the framework and its build, for the message; share: ranks may share
    a GPU (SCALEBENCH_SHARE_GPU=1, for a functional check of the multi-rank path on one GPU).
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
    if needed > visible and share and per_process == 1:
        print(
            f"warning: {ranks_on_node} ranks share {visible} GPU(s) (SCALEBENCH_SHARE_GPU=1): a functional check, "
            "not a scaling measurement",
            flush=True,
        )
        return True
    if needed > visible:
        raise DeviceError(
            f"{ranks_on_node} rank(s) on this node need {needed} GPUs but {library} sees {visible}: ranks would "
            "share a GPU; give each node as many GPUs as ranks (cluster.gpus_per_node, the gres template)"
        )
    return True


def gpu_index(local_rank: int, visible: int) -> int:
    """The GPU of a one-GPU rank: its local rank (ranks beyond the visible GPUs only when sharing)."""
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
        if device_type != "gpu":
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
        visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v]
        gpu = visible[index] if index < len(visible) else str(index)  # nvidia-smi counts every GPU
        query = ["nvidia-smi", f"--id={gpu}", "--query-gpu=memory.total", "--format=csv,noheader,nounits"]
        return float(subprocess.run(query, capture_output=True, text=True, timeout=10, check=True).stdout.split()[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None
