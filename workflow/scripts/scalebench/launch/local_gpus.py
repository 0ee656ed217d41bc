"""The GPUs of this machine as a Snakemake resource, so a local run never puts two cells on one GPU.

The train rule declares RESOURCE: the GPUs a cell holds while it runs on this
machine. Snakemake's local scheduler starts a job only while the sum over the
running jobs stays within the machine's count: `--resources local_gpus=N` (on
the command line or in a profile), or, for a local run that gives none, the GPUs
this machine shows (CUDA_VISIBLE_DEVICES, else `nvidia-smi -L`). A cell that
needs more GPUs than that is left out before anything runs, with the reason.

The name is not `gpu` nor `gpus`: the SLURM plugin turns `gpu` into --gpus (and
then --ntasks-per-gpu) and its jobstep reads `gpus`; an unknown name changes no
sbatch line, and nothing limits it where no count is given (a SLURM run).
"""

from __future__ import annotations

import os
import subprocess

RESOURCE = "local_gpus"


def visible_gpus(env: dict[str, str] | None = None) -> int:
    """GPUs a process started here would see: CUDA_VISIBLE_DEVICES where set, else nvidia-smi's list."""
    env = os.environ if env is None else env
    if "CUDA_VISIBLE_DEVICES" in env:
        ids = [v.strip() for v in env["CUDA_VISIBLE_DEVICES"].split(",") if v.strip()]
        # CUDA stops at the first id that is not a device (-1, NoDevFiles)
        return len(ids[: next((n for n, v in enumerate(ids) if v.startswith("-") or v == "NoDevFiles"), len(ids))])
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in listed.splitlines() if line.startswith("GPU "))


def gpus_taken(device: str, gpus: int, machine_gpus: int) -> int:
    """GPUs a cell of `gpus` devices holds on this machine: none for CPU ranks (training.device cpu,
    or auto on a machine without GPUs), else one per device (dp and mirrored drive them from one process)."""
    if device == "cpu" or (device == "auto" and machine_gpus == 0):
        return 0
    return gpus


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
