"""Where a cell's input samples live (training.loader.placement), decided once for all its ranks.

`device`: each process loads the samples it will use once, as uint8, onto each of its devices
(the rank's memory on a CPU), and every step gathers its batch there by index. `host`: a
loader reads the batches from the memory-mapped arrays each step and moves them as uint8.
Either way the conversion to float (scale, layout) happens on the device, in the same code.
`auto` is `device` where the samples fit in training.loader.device_memory_share of the free
memory of the device that has the least, else `host`; every rank of a cell takes the same
decision, from the reduced figures (preflight.place_data reduces them: local_figures, decide).

Framework-neutral: the frameworks measure their bytes and free memory, this module decides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scalebench.refusal import SettingRefused
from scalebench.train import energy

PLACEMENTS = ("auto", "device", "host")


class PlacementError(SettingRefused):
    """placement: device, and the samples do not fit the device; the message names the key and the bytes."""


@dataclass(frozen=True)
class DataPlacement:
    """The cell's placement: run.json records all three."""

    kind: str  # device or host
    device_bytes: int  # bytes of samples each device holds for the run (0 with host), the largest over ranks
    reason: str  # why, as the setting resolved it


def mib(count: float) -> str:
    return f"{count / 2**20:,.1f} MiB"


def sample_bytes(image_size: tuple[int, int]) -> int:
    """One sample as the device holds it: the uint8 image and the uint8 mask."""
    height, width = image_size
    return 2 * height * width


def busiest_device_bytes(
    per_replica: list[np.ndarray], eval_shards: list[list[int]], image_size: tuple[int, int]
) -> int:
    """The bytes of the process's busiest device with device placement: each replica's device
    holds that replica's training samples, the first also the evaluated ones."""
    evaluated = {index for shard in eval_shards for index in shard}
    per_device = [len(samples) for samples in per_replica]
    per_device[0] = len(set(per_replica[0].tolist()) | evaluated)
    return max(per_device) * sample_bytes(image_size)


def local_figures(needed: int, free: int | None) -> list[float]:
    """This process's contribution to the cell's decision, for one allreduce_max: the bytes its
    busiest device needs, whether its free memory is unknown, and minus its free memory (so the
    maximum over ranks is minus the smallest)."""
    return [float(needed), 0.0 if free is not None else 1.0, -float(free) if free is not None else -math.inf]


def decide(setting: str, reduced: list[float], share: float, device_type: str) -> DataPlacement:
    """The placement every rank uses, from local_figures reduced by max across the ranks."""
    needed, unknown, minus_free = reduced
    needed = int(needed)
    free = None if unknown else int(-minus_free)
    where = "GPU" if device_type == "cuda" else "process's share of the node's memory"
    if setting == "host":
        return DataPlacement("host", 0, "training.loader.placement: host")
    if setting == "device":
        if free is not None and needed > free:
            raise PlacementError(
                f"config key 'training.loader.placement': device needs {mib(needed)} ({needed} bytes) of "
                f"uint8 samples on each device, but the {where} with the least free memory has {mib(free)} "
                f"({free} bytes) free: use placement host (or auto), fewer images per rank "
                "(dataset.image_size, dataset_repeat does not count), or more ranks"
            )
        known = f" of {mib(free)} free" if free is not None else " (free memory unknown: not checked)"
        return DataPlacement("device", needed, f"training.loader.placement: device; {mib(needed)}{known}")
    if free is None:
        return DataPlacement(
            "host",
            0,
            f"auto: the {where}'s free memory is unknown (pynvml not installed), so the samples stay on the host",
        )
    limit = share * free
    if needed <= limit:
        return DataPlacement(
            "device", needed, f"auto: {mib(needed)} fit in {share:g} of the {mib(free)} free on the {where}"
        )
    return DataPlacement(
        "host",
        0,
        f"auto: {mib(needed)} exceed {share:g} of the {mib(free)} free on the {where} "
        "(training.loader.device_memory_share)",
    )


def host_free_bytes(ranks_on_node: int, meminfo: str = "/proc/meminfo") -> int | None:
    """A CPU rank's share of the node's available memory (its ranks share it), from /proc/meminfo."""
    try:
        with open(meminfo) as lines:
            for line in lines:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // max(ranks_on_node, 1)
    except OSError:
        return None
    return None


def nvml_free_bytes(indices: list[int]) -> int | None:
    """The smallest free memory of GPUs `indices` (the framework's numbering) from NVML, or None
    where NVML cannot tell (TensorFlow has no call for a GPU's free memory; PyTorch has its own)."""
    nvml = energy.import_nvml()
    if nvml is None:
        return None
    try:
        nvml.nvmlInit()
        handles = [energy.nvml_handle(nvml, index) for index in indices]
        return min(int(nvml.nvmlDeviceGetMemoryInfo(handle).free) for handle in handles)
    except Exception:  # NVMLError and its subclasses: unknown, auto keeps the samples on the host
        return None
