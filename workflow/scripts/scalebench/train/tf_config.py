"""TF_CONFIG for MultiWorkerMirroredStrategy, built from the launcher's environment.

Every rank is one TensorFlow worker. The i-th worker on an address listens at
``worker_port(master_port, i)``, inside the cell's port block (ports.py), so two
cells on one node never collide. On SLURM the step's tasks per node give each
rank's host; node names that share an address (launch.py exports them) count
as one address. With cluster.network_interface workers are named by their
node's address on it, which launch.py gathers from every node (network.py).
A TF_CONFIG already in the environment is used as it is, after checking it
against the launcher's rank and processes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping

from scalebench.cluster import network
from scalebench.cluster.ports import PortError, worker_port
from scalebench.cluster.slurm import SlurmError, node_addresses, step_hosts, step_tasks_per_node
from scalebench.train.rank_env import RankInfo


class ClusterMismatch(RuntimeError):
    """The launcher's environment disagrees with itself."""


def rank_hosts(info: RankInfo, env: Mapping[str, str]) -> list[str]:
    """The host of every rank, in rank order."""
    if info.launcher == "srun":
        hosts = step_hosts(env)
        try:
            counts = step_tasks_per_node(env, len(hosts))
        except SlurmError as error:
            raise ClusterMismatch(f"{error} ({hosts})") from error
        placed = [host for host, count in zip(hosts, counts) for _ in range(count)]
        if len(placed) != info.processes:
            raise ClusterMismatch(
                f"SLURM_NTASKS = {info.processes} but the tasks per node {counts} over {hosts} give {len(placed)}"
            )
        return placed
    if info.processes != info.local_processes:
        raise ClusterMismatch(
            f"{info.launcher} started {info.processes} ranks on several nodes ({info.local_processes} on this "
            "one); the other hosts are unknown: start TensorFlow workers with srun, or set TF_CONFIG for every rank"
        )
    return [info.master_addr] * info.processes


def worker_names(hosts: list[str], env: Mapping[str, str], own: str | None) -> dict[str, str]:
    """What each host's workers are named by: its address on cluster.network_interface where one
    is chosen (`own`: this node's; on several nodes, those launch.py gathered and exported),
    else the host's name."""
    if own is None:
        return {host: host for host in hosts}
    if len(set(hosts)) == 1:
        return {hosts[0]: own}
    gathered = node_addresses(env, network.ADDRESSES)
    missing = sorted(set(hosts) - set(gathered))
    if missing:
        raise ClusterMismatch(
            f"{network.KEY} is set but no address of it was exported for {', '.join(missing)} "
            f"({network.ADDRESSES}): start TensorFlow cells on several nodes through launch.py"
        )
    return {host: gathered[host] for host in hosts}


def build_tf_config(info: RankInfo, env: Mapping[str, str]) -> dict:
    """TF_CONFIG for this rank: one worker per rank, each on its own port of the cell's block.

    With cluster.network_interface every worker is named by its node's address on that interface
    (worker_names). Workers that share an address (several slurmd on one host) take distinct ports.
    """
    addresses = node_addresses(env)
    hosts = rank_hosts(info, env)
    own = network.check_node(env)  # also refuses a node without the interface
    names = worker_names(hosts, env, own)
    on_address: Counter[str] = Counter()
    workers = []
    for host in hosts:
        address = names[host] if own else addresses.get(host, host)
        try:
            workers.append(f"{names[host]}:{worker_port(info.master_port, on_address[address])}")
        except PortError as error:
            raise ClusterMismatch(f"{error} ({address})") from error
        on_address[address] += 1
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
    if len(workers) != info.processes:
        raise ClusterMismatch(
            f"TF_CONFIG lists {len(workers)} workers but {info.launcher} started {info.processes} ranks"
        )
    if index != info.rank:
        raise ClusterMismatch(f"TF_CONFIG task.index = {index} but this is rank {info.rank} ({info.launcher})")


def resolve_tf_config(info: RankInfo, env: Mapping[str, str]) -> dict | None:
    """The TF_CONFIG this rank should use (None for a single worker), after the consistency checks.

    The processes against the cell are checked by the training loop, not here.
    """
    if not 0 <= info.rank < info.processes:
        raise ClusterMismatch(f"rank {info.rank} is outside a world of {info.processes}")
    if env.get("TF_CONFIG"):
        try:
            config = json.loads(env["TF_CONFIG"])
        except json.JSONDecodeError as error:
            raise ClusterMismatch(f"TF_CONFIG is not valid JSON ({error})") from error
        check_tf_config(config, info)
        return config
    if info.processes == 1:
        return None
    return build_tf_config(info, env)
