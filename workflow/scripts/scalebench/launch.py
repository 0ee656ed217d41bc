"""Start the ranks of one cell with the launcher template from config.

Locally the templates use torchrun or horovodrun on this host; inside a SLURM
job (SLURM_JOB_ID is set) they use srun or horovodrun over the allocation.
The resolved command goes to the top of the log. The ranks run in their own
process group, which is killed when the launcher returns or is signalled, so a
failed or cancelled cell leaves no process behind.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import distenv

TRAIN_SCRIPT = Path(__file__).resolve().parent.parent / "train.py"


def executor(env: dict[str, str]) -> str:
    forced = env.get("SCALEBENCH_EXECUTOR")
    if forced:
        return forced
    return "slurm" if "SLURM_JOB_ID" in env else "local"


def placeholders(ranks: int, env: dict[str, str], program: str) -> dict[str, object]:
    """Values for the launcher template of a cell with `ranks` ranks."""
    if executor(env) == "slurm":
        hosts = distenv.expand_nodelist(env["SLURM_JOB_NODELIST"])
        per_node = ranks // len(hosts) if ranks % len(hosts) == 0 else -(-ranks // len(hosts))
        port = distenv.port_for_job(env["SLURM_JOB_ID"])
    else:
        hosts, per_node, port = ["localhost"], ranks, distenv.free_port()
    return {
        "ranks": ranks,
        "nodes": len(hosts),
        "ranks_per_node": per_node,
        "hosts": ",".join(f"{host}:{per_node}" for host in hosts),
        "master_addr": "127.0.0.1" if hosts == ["localhost"] else hosts[0],
        "port": port,
        "python": shlex.quote(sys.executable),
        "program": program,
    }


def build_command(template: str, ranks: int, env: dict[str, str], train_args: list[str]) -> str:
    program = " ".join(shlex.quote(a) for a in [str(TRAIN_SCRIPT), *train_args])
    return template.format(**placeholders(ranks, env, program))


def rank_environment(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS=str(threads),
        TF_NUM_INTRAOP_THREADS=str(threads),
        TF_NUM_INTEROP_THREADS="1",
        TF_USE_LEGACY_KERAS="1",  # Horovod's TensorFlow API needs Keras 2 variables
        TF_CPP_MIN_LOG_LEVEL=env.get("TF_CPP_MIN_LOG_LEVEL", "1"),
        PYTHONUNBUFFERED="1",
    )
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
    command = build_command(template, cell["gpus"], env, train_args)
    threads = settings["training"]["threads_per_rank"] or int(env.get("SLURM_CPUS_PER_TASK", 1))
    print(f"launch ({where}): {command}", flush=True)
    started = time.time()
    code = run(command, rank_environment(threads))
    print(f"launch: exit code {code} after {time.time() - started:.1f} s", flush=True)
    return code
