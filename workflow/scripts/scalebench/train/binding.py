"""This rank's cores (cluster.cpu_binding), bound before any framework starts its threads, and
what run.json records of where the cell's processes ran.

launch.py says how (cluster/cpu_binding.py's variables):

- a local cell: the cores launch.py holds for it (launch/local_pool.py), shared out among its
  ranks, nearest each rank's GPU where nvidia-smi's topology names them;
- under SLURM: srun binds each task to its share (--cpu-bind=cores, cluster.cpus_per_rank) and
  the rank keeps it; where srun bound nothing (TaskPlugin=task/none), the rank takes its local
  rank's share of the cores it sees, as a local rank would;
- none, or a rank started without launch.py: the OS places the threads.

Each rank reads its affinity back from the OS, and run.json records every rank's (`rank_cpus`),
who bound them (`cpu_bound_by`) or why nobody did (`cpu_binding_reason`), and the GPU ids a
local cell held (`local_gpu_ids`, or `local_gpu_ids_reason`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from scalebench.cluster import cpu_binding, gpu_ids, nvidia_smi
from scalebench.train import devices
from scalebench.train.rank_env import RankInfo


@dataclass(frozen=True)
class Binding:
    """How this rank's cores were chosen: the setting, who bound them, or why they are not bound."""

    setting: str | None  # cluster.cpu_binding as launch.py passed it; None without launch.py
    by: str | None  # launch.py (a local cell), srun, or the rank (srun bound nothing); None: unbound
    reason: str = ""


def near_cores(
    ranks: int, per_process: int, env: Mapping[str, str], topology: nvidia_smi.Topology | None
) -> list[set[int] | None]:
    """Each local rank's cores nearest its GPUs (the topology's CPU affinity of the GPUs it drives,
    devices.process_gpus), None where unknown. Only where every rank sees the same GPUs (node
    binding, a local cell): then every rank computes the same list."""
    if topology is None or not topology.cpu_affinity:
        return [None] * ranks
    ids = gpu_ids.listed_ids(env)
    visible = len(ids) if ids is not None else len([name for name in topology.cpu_affinity if name.startswith("GPU")])
    if visible == 0:
        return [None] * ranks
    near: list[set[int] | None] = []
    for local_rank in range(ranks):
        cores: set[int] = set()
        for index in devices.process_gpus(local_rank, per_process, visible):
            physical = ids[index] if ids is not None else str(index)
            text = topology.gpu_cpus(int(physical)) if physical.isdigit() else None
            cores |= set(cpu_binding.parse_cpus(text)) if text else set()
        near.append(cores or None)
    return near


def read_topology() -> nvidia_smi.Topology | None:
    text, _ = nvidia_smi.call("topo", "-m")
    return nvidia_smi.parse_topology(text) if text else None


def decide(
    place: RankInfo,
    per_process: int,
    gpu_binding: str,
    env: Mapping[str, str],
    mine: list[int],
    topology: Callable[[], nvidia_smi.Topology | None] = read_topology,
) -> tuple[Binding, list[int] | None]:
    """(how this rank is bound, the cores to bind it to or None to leave it): `mine` is its affinity now,
    gpu_binding cluster.gpu_binding."""
    setting = env.get(cpu_binding.BIND)
    if setting is None:
        return Binding(None, None, "started without launch.py: the OS places its threads"), None
    if setting == "none":
        return Binding(setting, None, "cluster.cpu_binding: none"), None
    if env.get(cpu_binding.UNBOUND):
        return Binding(setting, None, env[cpu_binding.UNBOUND]), None
    share = int(env[cpu_binding.SHARE])
    if cpu_binding.CELL_CPUS in env:
        allowed, by = cpu_binding.parse_cpus(env[cpu_binding.CELL_CPUS]), "launch.py"
    elif len(mine) <= share:
        return Binding(setting, "srun"), None  # srun bound this task to its share
    else:
        allowed, by = mine, "rank"  # srun bound nothing: take this local rank's share of what the task sees
    # under task binding each rank sees only its own GPU: the ranks could not agree on a plan from that
    same_view = by == "launch.py" or gpu_binding == "node"
    near = near_cores(place.local_processes, per_process, env, topology() if same_view else None)
    shares = cpu_binding.share(allowed, place.local_processes, share, near)
    if shares is None:
        return (
            Binding(
                setting,
                None,
                f"{place.local_processes} process(es) of {share} core(s) each do not fit the {len(allowed)} "
                f"core(s) {cpu_binding.format_cpus(allowed)}",
            ),
            None,
        )
    return Binding(setting, by), shares[place.local_rank]


def bind(place: RankInfo, per_process: int, gpu_binding: str, env: Mapping[str, str] | None = None) -> Binding:
    """Bind this process to its cores as launch.py asks (before the framework starts threads); how
    it was bound, which the rank's entry hands to run.json's writer (fields)."""
    env = os.environ if env is None else env
    applied, cores = decide(place, per_process, gpu_binding, env, cpu_binding.affinity())
    if cores is not None:
        try:
            cpu_binding.bind_process(cores)
        except OSError as error:  # cores this process may not use (a cgroup narrower than the plan)
            applied = Binding(applied.setting, None, f"binding to {cpu_binding.format_cpus(cores)} failed: {error}")
    return applied


def fields(
    gather: Callable[[str], list[str]], env: Mapping[str, str] | None = None, applied: Binding | None = None
) -> dict:
    """run.json's CPU binding fields: every rank's cores read back from the OS (gathered), how they were
    bound (`applied`: what bind() returned, None where it did not run), and the GPU ids a local cell held."""
    env = os.environ if env is None else env
    binding = applied or Binding(None, None, "not bound: train/binding.bind did not run in this process")
    record = {
        "cpu_binding": binding.setting,
        "cpu_bound_by": binding.by,
        "cpu_binding_reason": binding.reason or None,
        "rank_cpus": gather(cpu_binding.format_cpus(cpu_binding.affinity())),
    }
    record["local_gpu_ids"], record["local_gpu_ids_reason"] = local_gpu_ids(env)
    return record


def local_gpu_ids(env: Mapping[str, str]) -> tuple[list[str] | None, str | None]:
    """(the GPU ids a local cell held, as its ranks saw them in CUDA_VISIBLE_DEVICES, None) or (None, why none)."""
    held = env.get(gpu_ids.HELD)
    if held:
        return gpu_ids.listed_ids(env), None
    if held is not None:
        return None, "the cell held no GPU of this machine (CPU ranks)"
    if env.get("SCALEBENCH_EXECUTOR") == "slurm":
        return None, "a SLURM cell: its allocation gives its GPUs"
    return None, "started without launch.py"
