"""TF_CONFIG for MultiWorkerMirroredStrategy, built from the launcher's environment.

Every rank is one TensorFlow worker. Worker ``r`` listens on its host at
``master_port + 1 + r``: the master port is derived per job (distenv), so two
cells on one node never collide. On SLURM the ranks are placed in blocks over
the step's nodes (SLURM's default distribution), which gives each rank's host.
A TF_CONFIG already in the environment is used as it is, after checking it
against the launcher's rank and world size.
"""

from __future__ import annotations

import json
import re

from .distenv import RankInfo, expand_nodelist


class ClusterMismatch(RuntimeError):
    """The launcher's environment disagrees with itself or with the cell."""


def tasks_per_node(spec: str) -> list[int]:
    """Expand SLURM's compressed task counts, e.g. ``2(x3),1`` -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for part in spec.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match:
            raise ClusterMismatch(f"cannot read the SLURM tasks per node '{spec}'")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def rank_hosts(info: RankInfo, env: dict[str, str]) -> list[str]:
    """The host of every rank, in rank order."""
    if info.launcher == "srun":
        hosts = expand_nodelist(env.get("SLURM_STEP_NODELIST") or env["SLURM_JOB_NODELIST"])
        spec = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE") or str(info.local_world_size)
        counts = tasks_per_node(spec)
        if len(counts) == 1 and len(hosts) > 1:
            counts = counts * len(hosts)
        if len(counts) != len(hosts):
            raise ClusterMismatch(f"SLURM lists {len(hosts)} nodes ({hosts}) but tasks per node '{spec}'")
        placed = [host for host, count in zip(hosts, counts) for _ in range(count)]
        if len(placed) != info.world_size:
            raise ClusterMismatch(
                f"SLURM_NTASKS = {info.world_size} but the tasks per node '{spec}' over {hosts} give {len(placed)}"
            )
        return placed
    if info.world_size != info.local_world_size:
        raise ClusterMismatch(
            f"torchrun started {info.world_size} ranks on several nodes (LOCAL_WORLD_SIZE = "
            f"{info.local_world_size}); the other hosts are unknown: start TensorFlow workers with srun, "
            "or set TF_CONFIG for every rank"
        )
    return [info.master_addr] * info.world_size


def build_tf_config(info: RankInfo, env: dict[str, str]) -> dict:
    """TF_CONFIG for this rank: one worker per rank, ports derived from the master port."""
    hosts = rank_hosts(info, env)
    workers = [f"{host}:{info.master_port + 1 + rank}" for rank, host in enumerate(hosts)]
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": info.rank}}


def check_tf_config(config: dict, info: RankInfo) -> None:
    """A TF_CONFIG given by the user must agree with the launcher."""
    try:
        workers = config["cluster"]["worker"]
        task_type, index = config["task"]["type"], int(config["task"]["index"])
    except (KeyError, TypeError, ValueError) as error:
        raise ClusterMismatch(f"TF_CONFIG needs cluster.worker and task.type/index ({error!r})") from error
    other_roles = sorted(set(config["cluster"]) - {"worker"})
    if other_roles or task_type != "worker":
        raise ClusterMismatch(f"TF_CONFIG: only 'worker' tasks are supported, found {other_roles or task_type}")
    if len(workers) != info.world_size:
        raise ClusterMismatch(
            f"TF_CONFIG lists {len(workers)} workers but {info.launcher} started {info.world_size} ranks"
        )
    if index != info.rank:
        raise ClusterMismatch(f"TF_CONFIG task.index = {index} but this is rank {info.rank} ({info.launcher})")


def resolve_tf_config(info: RankInfo, env: dict[str, str], cell_ranks: int) -> dict | None:
    """The TF_CONFIG this rank should use (None for a single worker), after every consistency check."""
    if info.world_size != cell_ranks:
        source = {"torchrun": "WORLD_SIZE", "srun": "SLURM_NTASKS"}.get(info.launcher, "the launcher")
        raise ClusterMismatch(f"{source} = {info.world_size} ranks, but the cell asks for {cell_ranks} GPUs")
    if not 0 <= info.rank < info.world_size:
        raise ClusterMismatch(f"rank {info.rank} is outside a world of {info.world_size}")
    if env.get("TF_CONFIG"):
        try:
            config = json.loads(env["TF_CONFIG"])
        except json.JSONDecodeError as error:
            raise ClusterMismatch(f"TF_CONFIG is not valid JSON ({error})") from error
        check_tf_config(config, info)
        return config
    if info.world_size == 1:
        return None
    return build_tf_config(info, env)
