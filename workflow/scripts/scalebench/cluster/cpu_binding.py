"""Which cores each process of a cell runs on (cluster.cpu_binding: cores).

A node's processes share out the cores they may use in local-rank order, each taking
`per_process` of them: first among the cores nearest its GPU where the node's topology
names them (nvidia-smi topo -m's CPU Affinity), then the lowest free ones. Every process
of a node computes the same share from the same facts, so the shares never overlap; the
launcher of a local cell (its cores from launch/local_pool.py) and each rank
(train/binding.py) call the same function. A process binds all its threads, those a
library started before it (numpy's) included, and reads its affinity back from the OS.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

SETTINGS = ("cores", "none")
# What launch.py tells the ranks (train/binding.py)
BIND = "SCALEBENCH_CPU_BIND"  # cluster.cpu_binding
SHARE = "SCALEBENCH_CPU_SHARE"  # cores per process
CELL_CPUS = "SCALEBENCH_CPUS"  # a local cell's cores (launch/local_pool.py), shared out among its ranks
UNBOUND = "SCALEBENCH_CPU_UNBOUND"  # why launch.py could not hold cores for the ranks


def parse_cpus(text: str) -> list[int]:
    """A Linux CPU list ('0-3,8,10-11') as sorted CPU numbers."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return sorted(cpus)


def format_cpus(cpus: Iterable[int]) -> str:
    """CPU numbers as a Linux CPU list: [0, 1, 2, 3, 8] -> '0-3,8'."""
    ordered = sorted(set(cpus))
    ranges: list[str] = []
    start = previous = None
    for cpu in [*ordered, None]:
        if cpu is not None and previous is not None and cpu == previous + 1:
            previous = cpu
            continue
        if start is not None:
            ranges.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = cpu
    return ",".join(ranges)


def share(
    allowed: Sequence[int], processes: int, per_process: int, near: Sequence[Iterable[int] | None] = ()
) -> list[list[int]] | None:
    """Each process's cores: `per_process` of `allowed`, in local-rank order, first among its `near`
    cores (those nearest its GPUs; None or missing where unknown), then the lowest free ones.
    None where `allowed` holds fewer than processes x per_process."""
    if per_process < 1 or len(set(allowed)) < processes * per_process:
        return None
    free = sorted(set(allowed))
    shares = []
    for index in range(processes):
        preferred = set(near[index]) if index < len(near) and near[index] is not None else set()
        mine = [cpu for cpu in free if cpu in preferred][:per_process]
        mine += [cpu for cpu in free if cpu not in mine][: per_process - len(mine)]
        free = [cpu for cpu in free if cpu not in mine]
        shares.append(sorted(mine))
    return shares


def bind_process(cpus: Iterable[int]) -> None:
    """Bind every thread of this process to `cpus` (threads started later inherit it)."""
    cpus = set(cpus)
    for task in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(task), cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass


def affinity() -> list[int]:
    """The CPUs this process may run on, as the OS reports them."""
    return sorted(os.sched_getaffinity(0))
