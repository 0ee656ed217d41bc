"""Start Horovod ranks with srun instead of horovodrun, so no ssh between nodes is needed.

horovodrun starts the ranks on other nodes over ssh, which many clusters forbid.
Horovod's Gloo controller needs only a rendezvous server and a few HOROVOD_*
variables per rank. This runs Horovod's own rendezvous server in the job's
batch step, then the srun command given after ``--``; each rank turns srun's
SLURM_* variables into HOROVOD_* ones (``adopt_srun_rank``, called by both
Horovod backends before ``hvd.init()``).

    python horovod_srun.py --ranks 4 -- srun --ntasks=4 ... python train.py ...
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess

from .launch import slurm_allocation

RENDEZVOUS = "HOROVOD_GLOO_RENDEZVOUS_ADDR"


def host_plan(hosts: list[str], ranks: int) -> list[tuple[str, int]]:
    """Ranks per node in srun's block order: the first nodes take ceil(ranks / nodes)."""
    per_node = -(-ranks // len(hosts))
    return [(host, min(per_node, ranks - i * per_node)) for i, host in enumerate(hosts) if ranks > i * per_node]


def interface_for(host: str) -> str:
    """The network interface that holds the address `host` resolves to (Gloo binds to it)."""
    import psutil

    address = socket.gethostbyname(host)
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address == address for a in addresses):
            return name
    raise RuntimeError(f"no network interface holds {address} (the address of {host}); set HOROVOD_GLOO_IFACE")


def adopt_srun_rank(env: dict[str, str] | None = None) -> bool:
    """Set this rank's HOROVOD_* variables from srun's when started by horovod_srun; True if it did."""
    env = os.environ if env is None else env
    if "HOROVOD_RANK" in env or RENDEZVOUS not in env or "SLURM_PROCID" not in env:
        return False
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    tasks_per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE", "1")
    env.update(
        HOROVOD_HOSTNAME=node,
        HOROVOD_RANK=env["SLURM_PROCID"],
        HOROVOD_SIZE=env.get("SLURM_STEP_NUM_TASKS") or env["SLURM_NTASKS"],
        HOROVOD_LOCAL_RANK=env.get("SLURM_LOCALID", "0"),
        HOROVOD_LOCAL_SIZE=re.match(r"\d+", tasks_per_node).group(0),
        HOROVOD_CROSS_RANK=env.get("SLURM_NODEID", "0"),
        HOROVOD_CROSS_SIZE=env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES", "1"),
    )
    env.setdefault("HOROVOD_GLOO_IFACE", interface_for(node))
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- srun ... (starts the ranks)")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    from horovod.runner.common.util.hosts import HostInfo, get_host_assignments
    from horovod.runner.http.http_server import RendezvousServer

    allocation = slurm_allocation(os.environ["SLURM_JOB_ID"])
    plan = get_host_assignments([HostInfo(h, n) for h, n in host_plan(allocation.hosts, args.ranks)], args.ranks)
    server = RendezvousServer()
    port = server.start()
    server.init(plan)
    env = dict(os.environ)
    env.update(
        {RENDEZVOUS: socket.gethostbyname(allocation.master_addr)},
        HOROVOD_GLOO_RENDEZVOUS_PORT=str(port),
        HOROVOD_CONTROLLER="gloo",
        HOROVOD_CPU_OPERATIONS="gloo",
    )
    print(f"horovod_srun: rendezvous at {env[RENDEZVOUS]}:{port} for {args.ranks} ranks", flush=True)
    try:
        return subprocess.call(command, env=env)
    finally:
        server.stop()
