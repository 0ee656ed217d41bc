"""Start Horovod ranks with srun instead of horovodrun, so no ssh between nodes is needed.

horovodrun starts the ranks on other nodes over ssh, which many clusters forbid.
Horovod's Gloo controller needs only a rendezvous server and a few HOROVOD_*
variables per rank. This runs Horovod's own rendezvous server in the job's
batch step, on the first port of the cell's block (MASTER_PORT, see ports.py;
Horovod alone would take a random port, maybe one of another cell's block),
then the srun command given after ``--``; each rank turns srun's
SLURM_* variables into HOROVOD_* ones (``rank_env.adopt_srun_rank``, called by
both Horovod backends before ``hvd.init()``). This module runs in the batch step
only; nothing here is imported by a rank.

    python horovod_srun.py --ranks 4 -- srun --ntasks=4 ... python train.py ...
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess

from scalebench.cluster.slurm import HOROVOD_PLAN, RENDEZVOUS, block_distribution, slurm_allocation


def start_rendezvous(port: int):
    """Horovod's rendezvous server listening on `port` (RendezvousServer.start would pick a random one)."""
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer, RendezvousServer
    from horovod.runner.util.threads import in_thread

    server = RendezvousServer()
    server._httpd = RendezvousHTTPServer(("", port), RendezvousHandler, 0)  # what start() sets up, on our port
    server._listen_thread = in_thread(target=server._httpd.serve_forever)
    return server


def main(argv: list[str] | None = None) -> int:
    """Serve the rendezvous for `--ranks` ranks while the srun command after ``--`` runs; its exit code."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- srun ... (starts the ranks)")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    from horovod.runner.common.util.hosts import HostInfo, get_host_assignments

    allocation = slurm_allocation(os.environ["SLURM_JOB_ID"])
    blocks = [
        (host, n) for host, n in zip(allocation.hosts, block_distribution(args.ranks, len(allocation.hosts))) if n
    ]
    plan = get_host_assignments([HostInfo(host, n) for host, n in blocks], args.ranks)
    port = int(os.environ.get("MASTER_PORT") or allocation.port)
    server = start_rendezvous(port)
    server.init(plan)
    env = dict(os.environ)
    env.update(
        {
            # launch.py's MASTER_ADDR: the address of cluster.network_interface where set
            RENDEZVOUS: socket.gethostbyname(os.environ.get("MASTER_ADDR") or allocation.master_addr),
            HOROVOD_PLAN: ",".join(f"{host}:{n}" for host, n in blocks),  # each rank checks that srun agreed
        },
        HOROVOD_GLOO_RENDEZVOUS_PORT=str(port),
        HOROVOD_CONTROLLER="gloo",
        HOROVOD_CPU_OPERATIONS="gloo",
    )
    print(f"horovod_srun: rendezvous at {env[RENDEZVOUS]}:{port} for {args.ranks} ranks", flush=True)
    try:
        return subprocess.call(command, env=env)
    finally:
        server.stop()
