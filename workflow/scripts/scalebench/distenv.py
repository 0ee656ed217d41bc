"""Where this rank sits, read from the launcher's environment.

torchrun sets RANK/LOCAL_RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT; srun sets
SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS and the node list. Under srun the
rendezvous address and port come from MASTER_ADDR/MASTER_PORT when launch.py
exported them (the first node's address, a port derived from the job id), else
from the first host of the node list and the job id. One process with none of
these is rank 0 of 1.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass

# Below Linux's ephemeral range (32768-60999), so a derived port never meets an outgoing connection's.
PORT_BASE = 12000
PORT_SPAN = 20000


@dataclass(frozen=True)
class RankInfo:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    master_addr: str
    master_port: int
    launcher: str


def expand_nodelist(nodelist: str) -> list[str]:
    """Expand a SLURM node list such as ``gpu[01-03,07],login1`` into host names."""
    hosts: list[str] = []
    for match in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist):
        prefix, ranges = match.group(1), match.group(2)
        if not ranges:
            hosts.append(prefix)
            continue
        for part in ranges.split(","):
            if "-" in part:
                start, end = part.split("-")
                hosts.extend(f"{prefix}{i:0{len(start)}d}" for i in range(int(start), int(end) + 1))
            else:
                hosts.append(f"{prefix}{part}")
    return hosts


def port_for_job(job_id: str | int, offset: int = 0) -> int:
    """A rendezvous port derived from the SLURM job id, so concurrent jobs on a node differ.

    Job ids are consecutive, and 7 is coprime to the span: 20000 consecutive jobs get distinct ports;
    `offset` separates several ports of one job (e.g. one per TensorFlow worker).
    """
    return PORT_BASE + (int(job_id) * 7 + offset) % PORT_SPAN


def free_port() -> int:
    """A port the OS reports free now (for local runs without a job id)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def detect(env: dict[str, str] | None = None) -> RankInfo:
    env = dict(os.environ if env is None else env)
    if "RANK" in env and "WORLD_SIZE" in env:
        return RankInfo(
            rank=int(env["RANK"]),
            local_rank=int(env.get("LOCAL_RANK", 0)),
            world_size=int(env["WORLD_SIZE"]),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])),
            master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
            master_port=int(env.get("MASTER_PORT", 29500)),
            launcher="torchrun",
        )
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env and "SLURM_STEP_ID" in env:
        hosts = expand_nodelist(env.get("SLURM_STEP_NODELIST") or env["SLURM_JOB_NODELIST"])
        per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE", "1")
        return RankInfo(
            rank=int(env["SLURM_PROCID"]),
            local_rank=int(env.get("SLURM_LOCALID", 0)),
            world_size=int(env["SLURM_NTASKS"]),
            local_world_size=int(re.match(r"\d+", per_node).group(0)),
            master_addr=env.get("MASTER_ADDR") or hosts[0],
            master_port=int(env.get("MASTER_PORT") or port_for_job(env["SLURM_JOB_ID"])),
            launcher="srun",
        )
    return RankInfo(0, 0, 1, 1, "127.0.0.1", free_port(), "single")
