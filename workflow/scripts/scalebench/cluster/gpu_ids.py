"""The GPU ids a process started on this machine may use, and what is wrong with a given list.

CUDA_VISIBLE_DEVICES, where set, names them (indices, or UUIDs GPU-... and MIG-...); CUDA
stops reading it at the first entry that is no device (-1, NoDevFiles). Unset, every GPU
nvidia-smi lists is one, by its index. A local cell's ranks get some of these ids as their
CUDA_VISIBLE_DEVICES (launch/local_pool.py), with CUDA_DEVICE_ORDER=PCI_BUS_ID so that an
index means the same GPU to CUDA as to nvidia-smi.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from scalebench.cluster import nvidia_smi

VARIABLE = "CUDA_VISIBLE_DEVICES"
HELD = "SCALEBENCH_LOCAL_GPU_IDS"  # the ids launch.py holds for a local cell ('' for none), for run.json


def listed_ids(env: Mapping[str, str]) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES's ids as CUDA reads them (None where it is unset)."""
    if VARIABLE not in env:
        return None
    ids = [value.strip() for value in env[VARIABLE].split(",") if value.strip()]
    end = next((n for n, value in enumerate(ids) if value.startswith("-") or value == "NoDevFiles"), len(ids))
    return ids[:end]


def device_id(index: int, env: Mapping[str, str] | None = None) -> str:
    """The id nvidia-smi and NVML know the framework's GPU `index` by: the index-th entry of
    CUDA_VISIBLE_DEVICES (an index or a UUID; counted round, as a rank picks its GPU) where it
    names any, else the index itself (with CUDA_DEVICE_ORDER=PCI_BUS_ID, as a local cell's ranks
    run, CUDA's index is nvidia-smi's)."""
    listed = listed_ids(os.environ if env is None else env)
    return listed[index % len(listed)] if listed else str(index)


def machine_ids(env: Mapping[str, str] | None = None, listing: list[nvidia_smi.ListedGpu] | None = None) -> list[str]:
    """The GPU ids a process started here may use: CUDA_VISIBLE_DEVICES's where set, else the indices
    nvidia-smi lists (`listing`: its parsed `-L`, read here where not given)."""
    env = os.environ if env is None else env
    listed = listed_ids(env)
    if listed is not None:
        return listed
    if listing is None:
        text, _ = nvidia_smi.call("-L")
        listing = nvidia_smi.parse_list(text or "")
    return [str(gpu.index) for gpu in listing]


def problem(env: Mapping[str, str], listing: list[nvidia_smi.ListedGpu] | None) -> str | None:
    """Why CUDA_VISIBLE_DEVICES cannot be shared out among cells: an id named twice (two cells would
    share that GPU), or one this machine lacks (`listing`: nvidia-smi's; None where nvidia-smi is
    missing, then only duplicates are found)."""
    ids = listed_ids(env)
    if not ids:
        return None
    twice = sorted({value for value in ids if ids.count(value) > 1})
    if twice:
        return f"{VARIABLE}={env[VARIABLE]} names GPU {', '.join(twice)} more than once: two cells would share it"
    if listing is None:
        return None
    indices = {str(gpu.index) for gpu in listing}
    uuids = [uuid for gpu in listing for uuid in (gpu.uuid, *gpu.mig_uuids)]
    # CUDA takes a unique prefix of a UUID as the device
    lacking = [
        v
        for v in ids
        if v not in indices and not any(uuid.startswith(v) for uuid in uuids if v[:4] in ("GPU-", "MIG-"))
    ]
    if lacking:
        shown = ", ".join(f"{gpu.index} ({gpu.uuid})" for gpu in listing) or "none"
        return (
            f"{VARIABLE}={env[VARIABLE]} names GPU {', '.join(lacking)}, which this machine does not have "
            f"(nvidia-smi -L lists {shown})"
        )
    return None


def gpus_taken(device: str, gpus: int, machine_gpus: int) -> int:
    """GPUs a cell of `gpus` devices holds on this machine: none for CPU ranks (training.device cpu,
    or auto on a machine without GPUs), else one per device (dp and mirrored drive them from one process)."""
    if device == "cpu" or (device == "auto" and machine_gpus == 0):
        return 0
    return gpus
