"""The GPUs of this machine as a Snakemake resource, so a local run never puts two cells on one GPU.

The train rule declares RESOURCE: the GPUs a cell holds while it runs on this
machine. Snakemake's local scheduler starts a job only while the sum over the
running jobs stays within the machine's count: `--resources local_gpus=N` (on
the command line or in a profile), or, for a local run that gives none, the GPUs
this machine shows (CUDA_VISIBLE_DEVICES, else `nvidia-smi -L`). A cell that
needs more GPUs than that is left out before anything runs, with the reason. The
count only limits how many GPUs the running cells hold together; which ones each
holds, launch.py takes from the machine's ids when its cell starts (launch/local_pool.py);
how many a cell holds is cluster/gpu_ids.gpus_taken, the same number for both.

The name is not `gpu` nor `gpus`: the SLURM plugin turns `gpu` into --gpus (and
then --ntasks-per-gpu) and its jobstep reads `gpus`; an unknown name changes no
sbatch line, and nothing limits it where no count is given (a SLURM run).
"""

from __future__ import annotations

from scalebench.cluster import gpu_ids, nvidia_smi
from scalebench.cluster.gpu_ids import gpus_taken

RESOURCE = "local_gpus"


def visible_gpus(env: dict[str, str] | None = None) -> int:
    """GPUs a process started here would see: CUDA_VISIBLE_DEVICES where set, else nvidia-smi's list."""
    return len(gpu_ids.machine_ids(env))


def machine_problem(env: dict[str, str], declared: int | None) -> str | None:
    """Why this machine's GPUs cannot be shared out among local cells: CUDA_VISIBLE_DEVICES naming a
    GPU twice or one the machine lacks (cluster/gpu_ids.py), or `--resources local_gpus=N` declaring
    more GPUs than the machine shows (cells would wait for ids that do not exist, or share them)."""
    text, _ = nvidia_smi.call("-L")
    listing = nvidia_smi.parse_list(text) if text is not None else None
    wrong = gpu_ids.problem(env, listing)
    if wrong:
        return wrong
    shown = len(gpu_ids.machine_ids(env, listing or []))
    if declared is not None and declared > shown:
        where = "CUDA_VISIBLE_DEVICES" if gpu_ids.listed_ids(env) is not None else "nvidia-smi -L"
        return (
            f"--resources {RESOURCE}={declared} declares more GPUs than this machine shows: {shown} ({where}); "
            f"give at most {shown}"
        )
    return None


def problem(device: str, gpus: int, machine_gpus: int) -> str | None:
    """Why a cell cannot run on this machine, or None."""
    needed = gpus_taken(device, gpus, machine_gpus)
    if needed <= machine_gpus:
        return None
    if machine_gpus == 0:
        return (
            f"training.device is cuda and this machine has no GPU ({RESOURCE}=0): run it on a GPU machine "
            f"or on SLURM, or set training.device: auto or cpu"
        )
    return (
        f"needs {needed} GPUs and this machine has {machine_gpus} ({RESOURCE}={machine_gpus}): "
        f"ranks would share a GPU; run it on SLURM or on a machine with more GPUs"
    )
