"""One process per rank on this host, with torchrun's variables: the local launcher of TensorFlow's
MultiWorkerMirrored cells.

torchrun is part of torch, and TensorFlow's environment has no torch (scalebench/environments.py).
Its ranks need only what torchrun gives each process: RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (train/rank_env.py reads them, and the TensorFlow
rank builds its TF_CONFIG from them). As with torchrun, a rank that fails ends the others: the
first to end badly is waited for, the rest get SIGTERM, then SIGKILL after a grace, and its exit
code is the launcher's. SIGTERM and SIGINT (a time limit, scancel, Ctrl-C) go to every rank, once:
each rank runs in a session of its own, as torchrun's workers do.

    python local_ranks.py --ranks 2 --master-addr 127.0.0.1 --master-port 29500 python train.py ...

Only the standard library: it runs in the framework's environment or image, before any rank.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import time

GRACE_S = 10  # how long the other ranks get to end on SIGTERM before SIGKILL


def rank_variables(rank: int, ranks: int, master_addr: str, master_port: int) -> dict[str, str]:
    """What torchrun sets for each of its processes on one node."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "GROUP_RANK": "0",
        "WORLD_SIZE": str(ranks),
        "LOCAL_WORLD_SIZE": str(ranks),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
    }


def end(processes: list[subprocess.Popen]) -> None:
    """SIGTERM to the ranks still running, SIGKILL to those still there after the grace."""
    running = [p for p in processes if p.poll() is None]
    for process in running:
        process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    for process in running:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run(command: list[str], ranks: int, master_addr: str, master_port: int) -> int:
    """Start `ranks` copies of `command` and return 0 once all ended well, else the first bad exit code."""
    # each rank in a session of its own, as torchrun starts its workers: a signal to the launcher's
    # process group (launch.py's stop) reaches the ranks once, through forward(), not twice
    processes = [
        subprocess.Popen(
            command, env={**os.environ, **rank_variables(rank, ranks, master_addr, master_port)}, start_new_session=True
        )
        for rank in range(ranks)
    ]
    received: list[int] = []

    def forward(signum: int, frame: object) -> None:
        received.append(signum)
        for process in processes:
            if process.poll() is None:
                process.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    while True:
        codes = [process.poll() for process in processes]
        failed = [code for code in codes if code not in (None, 0)]
        if failed:
            end(processes)
            return 128 + received[0] if received else failed[0] if failed[0] > 0 else 128 - failed[0]
        if all(code == 0 for code in codes):
            return 128 + received[0] if received else 0
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--master-addr", required=True)
    parser.add_argument("--master-port", type=int, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the program each rank runs")
    args = parser.parse_args(argv)
    if not args.command:
        parser.error("the command each rank runs is missing")
    if args.ranks < 1:
        parser.error(f"--ranks {args.ranks}: at least one")
    return run(args.command, args.ranks, args.master_addr, args.master_port)
