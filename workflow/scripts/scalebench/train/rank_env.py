"""Where this rank sits, read from the launcher's environment (runs inside a rank).

torchrun sets RANK/LOCAL_RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT; horovodrun
sets HOROVOD_RANK/HOROVOD_SIZE/HOROVOD_LOCAL_RANK/HOROVOD_LOCAL_SIZE (and so
does adopt_srun_rank under horovod_srun.py); srun sets SLURM_PROCID/
SLURM_LOCALID/SLURM_NTASKS and the node list. Under srun the rendezvous address
and port come from MASTER_ADDR/MASTER_PORT when launch.py exported them (the
first node's address, the start of the job's port block), else from the first
host of the node list and the job id. One process with none of these is rank 0
of 1.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

from scalebench.cluster.ports import free_port, port_for_job
from scalebench.cluster.slurm import HOROVOD_PLAN, RENDEZVOUS, local_task_count, step_hosts, step_tasks_per_node


class LayoutMismatch(RuntimeError):
    """srun placed the ranks other than horovod_srun.py told Horovod's rendezvous; the message shows both."""


# The variable each launcher's process count is read from, for messages.
PROCESSES_SOURCES = {
    "torchrun": "WORLD_SIZE",
    "horovod": "HOROVOD_SIZE",
    "srun": "SLURM_NTASKS",
    "single": "the launcher",
}


@dataclass(frozen=True)
class RankInfo:
    rank: int
    local_rank: int
    processes: int
    local_processes: int
    master_addr: str
    master_port: int
    launcher: str

    @property
    def processes_source(self) -> str:
        """The variable the process count came from, e.g. SLURM_NTASKS."""
        return PROCESSES_SOURCES[self.launcher]


def detect(env: Mapping[str, str] | None = None) -> RankInfo:
    """This rank's place: torchrun's variables first, then Horovod's, then srun's, else rank 0 of 1."""
    env = dict(os.environ if env is None else env)
    if "RANK" in env and "WORLD_SIZE" in env:
        return RankInfo(
            rank=int(env["RANK"]),
            local_rank=int(env.get("LOCAL_RANK", 0)),
            processes=int(env["WORLD_SIZE"]),
            local_processes=int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])),
            master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
            master_port=int(env.get("MASTER_PORT", 29500)),
            launcher="torchrun",
        )
    if "HOROVOD_RANK" in env and "HOROVOD_SIZE" in env:
        return RankInfo(
            rank=int(env["HOROVOD_RANK"]),
            local_rank=int(env.get("HOROVOD_LOCAL_RANK", 0)),
            processes=int(env["HOROVOD_SIZE"]),
            local_processes=int(env.get("HOROVOD_LOCAL_SIZE", env["HOROVOD_SIZE"])),
            master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
            master_port=int(env.get("MASTER_PORT", 29500)),
            launcher="horovod",
        )
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env and "SLURM_STEP_ID" in env:
        hosts = step_hosts(env)
        return RankInfo(
            rank=int(env["SLURM_PROCID"]),
            local_rank=int(env.get("SLURM_LOCALID", 0)),
            processes=int(env["SLURM_NTASKS"]),
            local_processes=local_task_count(env, len(hosts)),
            master_addr=env.get("MASTER_ADDR") or hosts[0],
            master_port=int(env.get("MASTER_PORT") or port_for_job(env["SLURM_JOB_ID"])),
            launcher="srun",
        )
    return RankInfo(0, 0, 1, 1, "127.0.0.1", free_port(), "single")


def interface_for(host: str) -> str:
    """The network interface that holds the address `host` resolves to (Gloo binds to it)."""
    import psutil

    address = socket.gethostbyname(host)
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address == address for a in addresses):
            return name
    raise RuntimeError(f"no network interface holds {address} (the address of {host}); set HOROVOD_GLOO_IFACE")


def check_horovod_plan(env: Mapping[str, str], counts: list[int]) -> None:
    """Raise LayoutMismatch unless srun's tasks per node are the rendezvous plan of horovod_srun.py.

    SLURM's block distribution of an uneven cell differs between versions (4,4,2 or 4,3,3 for 10 tasks
    on three 4-task nodes); a wrong plan would make Horovod's rendezvous hang, so the ranks stop first.
    """
    plan = env.get(HOROVOD_PLAN)
    if not plan:
        return
    planned = [(host, int(slots)) for host, slots in (item.rsplit(":", 1) for item in plan.split(","))]
    has_nodelist = "SLURM_STEP_NODELIST" in env or "SLURM_JOB_NODELIST" in env
    hosts = step_hosts(env) if has_nodelist else [host for host, _ in planned]
    placed = list(zip(hosts, counts))
    if placed != planned:
        show = ",".join(f"{host}:{count}" for host, count in placed)
        raise LayoutMismatch(
            f"srun placed the ranks as {show} but horovod_srun.py told Horovod's rendezvous {plan}; "
            "this SLURM distributes an uneven cell differently: choose matrix.gpus that divide evenly over "
            "the nodes (cluster.allow_uneven: false refuses the others before submission)"
        )


def adopt_srun_rank(env: MutableMapping[str, str] | None = None) -> bool:
    """Set this rank's HOROVOD_* variables from srun's when started by horovod_srun.py; True if it did.

    Both Horovod backends call it before ``hvd.init()``; ranks started by horovodrun are left alone.
    """
    env = os.environ if env is None else env
    if "HOROVOD_RANK" in env or RENDEZVOUS not in env or "SLURM_PROCID" not in env:
        return False
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    counts = step_tasks_per_node(env, int(env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES") or 1))
    check_horovod_plan(env, counts)
    node_id, local_rank = int(env.get("SLURM_NODEID") or 0), int(env.get("SLURM_LOCALID") or 0)
    # Horovod's cross communicator of local rank r holds one rank per node that has a rank r.
    peers = [index for index, count in enumerate(counts) if count > local_rank]
    env.update(
        HOROVOD_HOSTNAME=node,
        HOROVOD_RANK=env["SLURM_PROCID"],
        HOROVOD_SIZE=env.get("SLURM_STEP_NUM_TASKS") or env["SLURM_NTASKS"],
        HOROVOD_LOCAL_RANK=str(local_rank),
        HOROVOD_LOCAL_SIZE=str(counts[node_id]),
        HOROVOD_CROSS_RANK=str(peers.index(node_id)),
        HOROVOD_CROSS_SIZE=str(len(peers)),
    )
    if "HOROVOD_GLOO_IFACE" not in env:  # a user's choice stands, and needs no lookup of the node's address
        env["HOROVOD_GLOO_IFACE"] = interface_for(node)
    return True
