"""The GPU ids and cores a local cell holds while it runs, so two running cells never share one.

Snakemake's local scheduler only counts the `local_gpus` resource (config/local_gpus.py): it
starts no more cells than the machine has GPUs, but names none. launch.py therefore takes
its cell's GPU ids from this machine's (cluster/gpu_ids.py) here, before the ranks start,
and gives them to its ranks as CUDA_VISIBLE_DEVICES; with cluster.cpu_binding: cores it
takes the cores its ranks will be bound to as well, nearest its GPUs where nvidia-smi's
topology names them. Each id and core is a lock file in one folder for the whole host
(every user's and every study's cells), held by launch.py until it exits (scalebench/locks.py):
a killed cell gives them back by itself.

A cell waits for GPU ids another cell holds (a second study on this machine, or the moment
between one cell's end and the next one's start); it never waits for cores: where too few
are free, its ranks run unbound and run.json says why.
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO

from scalebench import locks

POOL_DIR = Path(tempfile.gettempdir()) / "scalebench-local"
POOL_VARIABLE = "SCALEBENCH_LOCAL_POOL"  # another folder: a test's own pool, apart from the machine's
WAIT_POLL_S = 1.0


def pool_dir(env: Mapping[str, str]) -> Path:
    """The pool's folder: the host's, unless SCALEBENCH_LOCAL_POOL names another."""
    return Path(env.get(POOL_VARIABLE) or POOL_DIR)


def _name(kind: str, item: str) -> str:
    return f"{kind}-" + re.sub(r"[^A-Za-z0-9._-]", "_", item)


def _take(kind: str, items: Sequence[str], count: int, folder: Path) -> list[tuple[str, IO]]:
    """The first `count` of `items` no other process holds, locked; fewer (none held) where not enough are free."""
    taken: list[tuple[str, IO]] = []
    for item in items:
        if len(taken) == count:
            break
        handle = locks.try_lock(_name(kind, item), folder)
        if handle is not None:
            taken.append((item, handle))
    if len(taken) < count:
        for _, handle in taken:
            handle.close()
        return []
    return taken


def hold_gpus(count: int, ids: Sequence[str], folder: str | Path = POOL_DIR, poll_s: float = WAIT_POLL_S) -> list[str]:
    """`count` of this machine's GPU `ids` (in their order), held until this process exits; waits while
    other cells hold too many. A cell that needs more GPUs than the machine has gets all of them (its
    ranks then refuse to share, train/devices.py)."""
    count = min(count, len(ids))
    if count == 0:
        return []
    folder = locks.shared_folder(folder)
    said = False
    while True:
        taken = _take("gpu", ids, count, folder)
        if taken:
            for _, handle in taken:
                locks.keep(handle)
            return [item for item, _ in taken]
        if not said:
            print(
                f"launch: waiting for {count} of GPUs {','.join(ids)}: other cells hold them",
                file=sys.stderr,
                flush=True,
            )
            said = True
        time.sleep(poll_s)


def hold_cores(
    count: int, allowed: Sequence[int], near: Iterable[int] = (), folder: str | Path = POOL_DIR
) -> tuple[list[int] | None, str]:
    """(`count` of the `allowed` cores, nearest first, held until this process exits; '') or (None, why
    not): never waits."""
    if count > len(allowed):
        return None, f"the cell's ranks need {count} cores and this machine lets it use {len(allowed)}"
    preferred = set(near)
    order = [cpu for cpu in allowed if cpu in preferred] + [cpu for cpu in allowed if cpu not in preferred]
    taken = _take("cpu", [str(cpu) for cpu in order], count, locks.shared_folder(folder))
    if not taken:
        return None, f"fewer than the {count} cores the cell's ranks need are free (other local cells hold them)"
    for _, handle in taken:
        locks.keep(handle)
    return sorted(int(item) for item, _ in taken), ""
