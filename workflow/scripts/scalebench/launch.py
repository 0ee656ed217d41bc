"""Start the ranks of one cell with the launcher template from config.

Locally the templates use torchrun or horovodrun on this host; inside a SLURM
job (SLURM_JOB_ID is set) they use srun or horovodrun over the allocation.

Inside a SLURM job the command of a Snakemake job runs with a trimmed
environment: the SLURM jobstep plugin removes every SLURM_* variable except the
job id, so the node list, task geometry and CPUs per task are read back from
``scontrol show job`` here, and the launcher template passes them to srun
explicitly. The rendezvous address (the first node's NodeAddr) and a port
derived from the job id go to the ranks as MASTER_ADDR/MASTER_PORT.

The resolved command goes to the top of the log. The ranks run in their own
process group, which is killed when the launcher returns or is signalled, so a
failed or cancelled cell leaves no process behind.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import distenv

TRAIN_SCRIPT = Path(__file__).resolve().parent.parent / "train.py"
LAUNCH_SCRIPT = TRAIN_SCRIPT.with_name("launch.py")


class LaunchError(RuntimeError):
    """The cell's ranks cannot be placed; the message says why."""


@dataclass(frozen=True)
class Allocation:
    """Where a cell's ranks may run: hosts (in order), the rendezvous address, a port, CPUs per rank."""

    executor: str
    hosts: list[str]
    master_addr: str
    port: int
    cpus_per_rank: int


def executor(env: dict[str, str]) -> str:
    forced = env.get("SCALEBENCH_EXECUTOR")
    if forced:
        return forced
    return "slurm" if "SLURM_JOB_ID" in env else "local"


def _scontrol(*args: str) -> str:
    try:
        result = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise LaunchError(f"scontrol {' '.join(args)} failed: {error}") from error
    if result.returncode:
        raise LaunchError(f"scontrol {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def _fields(oneliner: str) -> dict[str, str]:
    """KEY=VALUE pairs of `scontrol show ... --oneliner` output."""
    return dict(re.findall(r"(\S+?)=(\S*)", oneliner))


def slurm_allocation(job_id: str) -> Allocation:
    """The allocation of SLURM job `job_id`, read with scontrol (the job's own env is trimmed)."""
    job = _fields(_scontrol("show", "job", "--oneliner", job_id))
    hosts = _scontrol("show", "hostnames", job["NodeList"]).split()
    node = _fields(_scontrol("show", "node", "--oneliner", hosts[0]))
    cpus = job.get("CPUs/Task", "1")
    return Allocation(
        executor="slurm",
        hosts=hosts,
        master_addr=node.get("NodeAddr") or hosts[0],
        port=distenv.port_for_job(job_id),
        cpus_per_rank=int(cpus) if cpus.isdigit() else 1,
    )


def local_allocation() -> Allocation:
    return Allocation("local", ["localhost"], "127.0.0.1", distenv.free_port(), 1)


def placeholders(ranks: int, allocation: Allocation, program: str) -> dict[str, object]:
    """Values for the launcher template of a cell with `ranks` ranks."""
    hosts = allocation.hosts
    if ranks < len(hosts):
        raise LaunchError(f"{ranks} ranks cannot use the {len(hosts)} nodes of the allocation ({', '.join(hosts)})")
    per_node = -(-ranks // len(hosts))
    slots = [min(per_node, ranks - i * per_node) for i in range(len(hosts))]
    if allocation.executor == "slurm" and len(hosts) == 1:
        # launch.py runs on the only node: horovodrun then starts the ranks itself, without ssh
        hosts = ["localhost"]
    return {
        "ranks": ranks,
        "nodes": len(hosts),
        "ranks_per_node": per_node,
        "hosts": ",".join(f"{host}:{slot}" for host, slot in zip(hosts, slots, strict=True)),
        "master_addr": allocation.master_addr,
        "port": allocation.port,
        "cpus_per_rank": allocation.cpus_per_rank,
        "python": shlex.quote(sys.executable),
        "program": program,
        "scripts": shlex.quote(str(TRAIN_SCRIPT.parent)),
    }


def build_command(template: str, ranks: int, allocation: Allocation, train_args: list[str]) -> str:
    program = " ".join(shlex.quote(a) for a in [str(TRAIN_SCRIPT), *train_args])
    return template.format(**placeholders(ranks, allocation, program))


def rank_environment(threads: int, allocation: Allocation) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS=str(threads),
        TF_NUM_INTRAOP_THREADS=str(threads),
        TF_NUM_INTEROP_THREADS="1",
        TF_USE_LEGACY_KERAS="1",  # Horovod's TensorFlow API needs Keras 2 variables
        TF_CPP_MIN_LOG_LEVEL=env.get("TF_CPP_MIN_LOG_LEVEL", "1"),
        PYTHONUNBUFFERED="1",
    )
    # torchrun and horovodrun live beside this Python (.venv/bin), which need not be on PATH.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if allocation.executor == "slurm":
        # srun's ranks read these in distenv.detect(); torchrun sets its own.
        env.update(MASTER_ADDR=allocation.master_addr, MASTER_PORT=str(allocation.port))
    return env


def run(command: str, env: dict[str, str]) -> int:
    """Run the launcher in its own process group; kill the whole group when done."""
    process = subprocess.Popen(shlex.split(command), env=env, start_new_session=True)

    def forward(signum, frame):
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    code = process.wait()
    try:  # ranks that outlived their launcher (orphans) go now
        os.killpg(process.pid, signal.SIGTERM)
        time.sleep(1)
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return code


def command_line(settings: dict, data: str | Path, out: str | Path, launchers: dict) -> list[str]:
    """The command that starts one cell's ranks through main(), as the train rule runs it."""
    return [
        sys.executable,
        str(LAUNCH_SCRIPT),
        "--settings",
        json.dumps(settings),
        "--data",
        str(data),
        "--out",
        str(out),
        "--launchers",
        json.dumps(launchers),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--settings", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--launchers", required=True, help="the config's launchers section as JSON")
    args = parser.parse_args(argv)
    settings = json.loads(args.settings)
    cell = settings["cell"]
    env = dict(os.environ)
    where = executor(env)
    template = json.loads(args.launchers)[where][f"{cell['framework']}_{cell['backend']}"]
    train_args = ["--settings", args.settings, "--data", args.data, "--out", args.out]
    try:
        allocation = slurm_allocation(env["SLURM_JOB_ID"]) if where == "slurm" else local_allocation()
        command = build_command(template, cell["gpus"], allocation, train_args)
    except LaunchError as error:
        print(f"launch ({where}): error: {error}", flush=True)
        return 1
    threads = settings["training"]["threads_per_rank"] or allocation.cpus_per_rank
    print(f"launch ({where}): {command}", flush=True)
    if where == "slurm":
        print(f"launch: SLURM job {env['SLURM_JOB_ID']} on {','.join(allocation.hosts)}", flush=True)
    started = time.time()
    code = run(command, rank_environment(threads, allocation))
    print(f"launch: exit code {code} after {time.time() - started:.1f} s", flush=True)
    return code
