"""Start the ranks of one cell with the launcher template from config.

Locally the templates use torchrun or horovodrun on this host (one rank of the
default torchrun template starts without it); inside a SLURM
job (SLURM_JOB_ID is set) they use srun or horovodrun over the allocation. A
backend that drives a node's devices from one process (dp, mirrored: see
scalebench/backends.py) gets one process, on one node.

Inside a SLURM job the command of a Snakemake job runs with a trimmed
environment: the SLURM jobstep plugin removes every SLURM_* variable except the
job id, so the node list, task geometry and CPUs per task are read back from
``scontrol show job`` here, and the launcher template passes them to srun
explicitly. The rendezvous address (the first node's NodeAddr) and the start
of the cell's port block (ports.py: the job id's under SLURM, or the next one
free on this node; a block held by this process locally) go to the ranks as MASTER_ADDR/MASTER_PORT.

Locally the cell holds its own GPU ids and cores while it runs (launch/binding.py), and under
SLURM srun binds each task to its cores; the ranks see only those (train/binding.py).

The resolved command goes to the top of the log. The ranks run in their own
process group, which is killed when the launcher returns or is signalled, so a
failed or cancelled cell leaves no process behind. After the ranks, run.json gets
what the cell's job held (job_s, from this process's start, before any framework's
import: launch/accounting.py) and what SLURM accounted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

from scalebench import backends, environments, outcome
from scalebench.cluster import cell_holder, network, stuck_jobs
from scalebench.cluster.ports import PortError, reserve_local_block, reserve_slurm_block
from scalebench.cluster.slurm import (
    NODE_ADDRESSES,
    Allocation,
    SlurmError,
    block_distribution,
    export_addresses,
    slurm_allocation,
)
from scalebench.launch import accounting, binding, held_cell
from scalebench.records import store
from scalebench.settings import ProcessFacts, RunSettings

TRAIN_SCRIPT = Path(__file__).resolve().parent.parent.parent / "train.py"
LAUNCH_SCRIPT = TRAIN_SCRIPT.with_name("launch.py")


# how long a signalled launcher may take to end its ranks: torchrun's agent gives them 30 s before
# its SIGKILL; past this the launcher's whole group is killed (launcher.run)
STOP_GRACE_S = 40.0
# how long srun may wait to start the ranks in the cell's own allocation (cluster.step_wait_s's default)
STEP_WAIT_S = 300.0


class LaunchError(RuntimeError):
    """The cell's ranks cannot be placed; the message says why."""


def executor(env: dict[str, str]) -> str:
    """The executor whose launcher templates apply: slurm inside a SLURM job, else local (SCALEBENCH_EXECUTOR wins)."""
    forced = env.get("SCALEBENCH_EXECUTOR")
    if forced:
        return forced
    return "slurm" if "SLURM_JOB_ID" in env else "local"


def local_allocation() -> Allocation:
    """This host only, with a port block that this process holds until it exits (ports.py)."""
    return Allocation("local", ["localhost"], "127.0.0.1", reserve_local_block(), 1)


def placeholders(
    ranks: int,
    allocation: Allocation,
    program: str,
    environment: environments.Environment,
    step_wait_s: float = STEP_WAIT_S,
) -> dict[str, object]:
    """Values for the launcher template of a cell with `ranks` ranks, whose framework runs in `environment`."""
    hosts = allocation.hosts
    if ranks < len(hosts):
        raise LaunchError(f"{ranks} ranks cannot use the {len(hosts)} nodes of the allocation ({', '.join(hosts)})")
    slots = block_distribution(ranks, len(hosts))
    if not all(slots):
        raise LaunchError(f"{ranks} ranks in blocks of {slots[0]} leave nodes of the allocation empty ({slots})")
    if allocation.executor == "slurm" and len(hosts) == 1:
        # launch.py runs on the only node: horovodrun then starts the ranks itself, without ssh
        hosts = ["localhost"]
    return {
        "ranks": ranks,
        "nodes": len(hosts),
        "ranks_per_node": slots[0],
        "hosts": ",".join(f"{host}:{slot}" for host, slot in zip(hosts, slots, strict=True)),
        "master_addr": allocation.master_addr,
        "port": allocation.port,
        "cpus_per_rank": allocation.cpus_per_rank,
        "python": shlex.quote(environment.python),
        "container": shlex.join(environment.container),
        "program": program,
        "scripts": shlex.quote(str(TRAIN_SCRIPT.parent)),
        "step_wait_s": step_wait(step_wait_s),
    }


def build_command(
    template: str,
    ranks: int,
    allocation: Allocation,
    train_args: list[str],
    environment: environments.Environment,
    step_wait_s: float = STEP_WAIT_S,
) -> str:
    """The launcher template filled for `ranks` processes running train.py with `train_args` in `environment`."""
    program = " ".join(shlex.quote(a) for a in [str(TRAIN_SCRIPT), *train_args])
    return template.format(**placeholders(ranks, allocation, program, environment, step_wait_s)).strip()


def launch_processes(framework: str, backend: str, gpus: int, allocation: Allocation) -> int:
    """How many processes the launcher starts for the cell (one for dp and mirrored), or LaunchError."""
    if not backends.exists(framework, backend):
        raise LaunchError(f"{backend} is not a backend of {framework} ({backends.describe_registry()})")
    if backends.spec(framework, backend).one_process and len(allocation.hosts) > 1:
        raise LaunchError(
            f"{backend} drives the devices of one node from one process, but the allocation has "
            f"{len(allocation.hosts)} nodes ({', '.join(allocation.hosts)})"
        )
    return backends.processes(framework, backend, gpus)


def without_agent(template: str, where: str, processes: int) -> str:
    """The template that starts `processes` ranks: the default local torchrun for one process is an
    agent and a rendezvous for nobody (a second Python that imports torch, some 1.5 CPU-s and a second
    of the cell's start), so that one rank starts as dp's and mirrored's one process does, rank 0 of 1
    (train/rank_env.py); so does one of local_ranks.py. A template of one's own is used as written."""
    defaults = [backends.LAUNCH_TEMPLATES["local"][kind] for kind in (backends.PER_DEVICE, backends.PROCESSES)]
    if where == "local" and processes == 1 and template in defaults:
        return backends.LAUNCH_TEMPLATES["local"][backends.ONE_PROCESS]
    return template


def rank_environment(
    threads: int,
    allocation: Allocation,
    environment: environments.Environment,
    interface: str | None = None,
    gpus_per_task: int | None = None,
) -> dict[str, str]:
    """The launcher's environment: thread counts, unbuffered output, the rendezvous under SLURM, the
    network interface of cluster.network_interface for every library (network.py), under task
    binding the GPUs of each of srun's tasks, and the framework's environment first on PATH."""
    env = dict(os.environ)
    if interface:
        env.update(network.collective_environment(interface))
    env.update(
        OMP_NUM_THREADS=str(threads),
        TF_NUM_INTRAOP_THREADS=str(threads),
        TF_NUM_INTEROP_THREADS="1",
        TF_USE_LEGACY_KERAS="1",  # Horovod's TensorFlow API needs Keras 2 variables
        TF_CPP_MIN_LOG_LEVEL=env.get("TF_CPP_MIN_LOG_LEVEL", "1"),
        PYTHONUNBUFFERED="1",
        SCALEBENCH_EXECUTOR=allocation.executor,  # the ranks know a SLURM cell from a local one
    )
    # torchrun and horovodrun (a template of one's own may name them) live beside the framework's
    # Python (.venv/frameworks/<framework>/bin), which need not be on PATH; in an image, its own PATH
    if not environment.container:
        env["PATH"] = os.pathsep.join([str(Path(environment.python).parent), env.get("PATH", "")])
    if allocation.executor == "slurm":
        # srun's ranks read these in rank_env.detect(); torchrun sets its own.
        env.update(MASTER_ADDR=allocation.master_addr, MASTER_PORT=str(allocation.port))
        if allocation.addresses:
            env[NODE_ADDRESSES] = export_addresses(allocation.hosts, allocation.addresses)
        if allocation.interface_addresses:
            env[network.ADDRESSES] = export_addresses(allocation.hosts, allocation.interface_addresses)
        if gpus_per_task:
            # srun reads it as --gpus-per-task (which binds each task to its own GPUs); the jobstep
            # plugin removed the job's copy, and the templates need not name it
            env["SLURM_GPUS_PER_TASK"] = str(gpus_per_task)
    return env


def step_wait(step_wait_s: float) -> int:
    """srun's --immediate for cluster.step_wait_s: whole seconds, at least 1. Without it srun retries a
    step SLURM refuses for as long as it refuses, to the job's time limit (a requeued job whose node
    still holds its earlier step: "Requested nodes are busy"); with it srun fails ("Unable to create
    step"), the job fails, and the cell's next attempt is a new job. (SLURM 22.05's srun reads no
    SLURM_IMMEDIATE for a step: the option is spelled out.)"""
    return max(1, math.ceil(step_wait_s))


def run(command: str, env: dict[str, str], grace_s: float = STOP_GRACE_S) -> int:
    """Run the launcher in its own process group; kill the whole group when done. A run stopped by
    SIGTERM or SIGINT (SLURM's time limit, scancel, a requeue, Ctrl-C) exits 128 + the signal's
    number whatever the launcher said: horovodrun ends its ranks on SIGTERM and may exit 0, and a
    job that ends ok with its cell unfinished would be taken for a finished cell. A launcher still
    running `grace_s` after the signal is killed with its group: torchrun's agent can wedge in its own
    shutdown, and locally no SLURM KillWait would end it."""
    process = subprocess.Popen(shlex.split(command), env=env, start_new_session=True)
    received: list[tuple[int, float]] = []

    def forward(signum: int, frame: object) -> None:
        received.append((signum, time.monotonic()))
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    code, killed = None, False
    while code is None:
        try:
            code = process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            if received and not killed and time.monotonic() - received[0][1] > grace_s:
                killed = True
                print(
                    f"launch: the launcher had not ended {grace_s:.0f} s after signal {received[0][0]}: "
                    "killed with its ranks",
                    flush=True,
                )
                os.killpg(process.pid, signal.SIGKILL)
    try:  # ranks that outlived their launcher (orphans) go now
        os.killpg(process.pid, signal.SIGTERM)
        time.sleep(1)
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if received and code == 0:
        print(f"launch: stopped by signal {received[0][0]}; the launcher exited 0 all the same", flush=True)
    if received and code <= 0:  # ended quietly, or killed here
        return 128 + received[0][0]
    return code


def cell_arguments(settings: str | dict, data: str | Path, out: str | Path) -> list[str]:
    """The arguments that name a cell, the same for launch.py and for each rank's train.py."""
    text = settings if isinstance(settings, str) else json.dumps(settings)
    return ["--settings", text, "--data", str(data), "--out", str(out)]


def rank_command(settings: dict, data: str | Path, out: str | Path, sections: dict | None = None) -> list[str]:
    """One rank started directly, without a launcher (rank 0 of 1, or under a launcher of one's own),
    in its framework's environment (config key environments: `sections`; default the install's)."""
    framework = settings["cell"]["framework"]
    environment = environments.resolve(framework, (sections or {}).get(framework))
    return [*environment.command, str(TRAIN_SCRIPT), *cell_arguments(settings, data, out)]


def command_line(
    settings: dict, data: str | Path, out: str | Path, launchers: dict, sections: dict | None = None
) -> list[str]:
    """The command that starts one cell's ranks through main(), as the train rule runs it: in the
    pipeline's environment (the one whose frameworks/ this Python's is in, in a framework's test session)."""
    return [
        str(environments.install_root() / "bin" / "python"),
        str(LAUNCH_SCRIPT),
        *cell_arguments(settings, data, out),
        "--launchers",
        json.dumps(launchers),
        "--environments",
        json.dumps(sections or {}),
    ]


def main(argv: list[str] | None = None) -> int:
    """Start one cell's ranks (the arguments of command_line) and return their launcher's exit code."""
    parser = argparse.ArgumentParser(description=__doc__)
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument("--settings", help="the cell's settings as JSON")
    given.add_argument("--settings-file", help="a file holding them (the train rule's settings.json)")
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--launchers", required=True, help="the config's launchers section as JSON")
    parser.add_argument(
        "--environments", default="{}", help="the config's environments section as JSON (default: the install's)"
    )
    parser.add_argument(
        "--request", help="what the cell's job asks SLURM for (tasks, cpus_per_task, gpus) as JSON: the rule's"
    )
    parser.add_argument(
        "--step-wait-s",
        type=float,
        default=STEP_WAIT_S,
        help="how long srun may wait to start the ranks in the allocation (cluster.step_wait_s)",
    )
    args = parser.parse_args(argv)
    if args.settings_file:
        args.settings = json.dumps(json.loads(Path(args.settings_file).read_text()))
    env = dict(os.environ)
    run_settings = RunSettings.from_json(json.loads(args.settings), args.data, args.out)
    where = executor(env)
    # one copy of the cell at a time: wait for a live job that holds it (cluster/cell_holder.py)
    held = cell_holder.hold(
        args.out,
        env.get("SLURM_JOB_ID") if where == "slurm" else None,
        say=lambda line: print(f"launch: {line}", flush=True),
    )
    cell_holder.keep_log(held, Path(args.out) / "train.log")
    try:
        if held.waited_for is not None and held_cell.adopt(held, args.out, run_settings.source):
            return 0
        if where == "slurm" and args.request:
            missing = held_cell.allocation_shortfall(json.loads(args.request), env["SLURM_JOB_ID"])
            if missing:
                print(f"launch: {missing}", flush=True)
                return 1
        held_cell.say_previous(held)
        return start(args, run_settings, env, where)
    finally:
        store.restore(args.out)  # record names another job's Snakemake removed while this one wrote
        cell_holder.release(held)


def start(args: argparse.Namespace, run_settings: RunSettings, env: dict[str, str], where: str) -> int:
    """Start the cell's ranks (this job holds the cell) and record how they ended."""
    # run.json's cell and settings where a refusal comes before any rank wrote it
    cell = {**run_settings.cell.to_json(), "settings": run_settings.source}
    try:
        allocation, processes, command, environment = planned_launch(args, run_settings, env, where)
    except (LaunchError, network.InterfaceMissing) as error:
        # the cell's shape against its allocation: the next attempt gets the same (scalebench/refusal.py)
        print(f"launch ({where}): refused: {error}", flush=True)
        outcome.record(args.out, "refused", f"launch: {error}", cell)
        return 0
    except (SlurmError, PortError) as error:
        print(f"launch ({where}): error: {error}", flush=True)
        return 1
    ranks_env = placed_environment(run_settings, env, where, allocation, processes, environment)
    print(f"launch ({where}): {command}", flush=True)
    if where == "slurm":
        print(f"launch: SLURM job {env['SLURM_JOB_ID']} on {','.join(allocation.hosts)}", flush=True)
    started = time.time()
    # the attempt before (a resumed cell sums its job wall: launch/accounting.py), before the ranks rewrite it
    prior = store.read_run(Path(args.out) / "run.json")
    outcome.clear(args.out)  # marks of an earlier attempt
    stuck_jobs.clear_mark(args.out)  # an earlier job of the cell that the study ended: this one trains it
    code = run(command, ranks_env)
    print(f"launch: exit code {code} after {time.time() - started:.1f} s", flush=True)
    ended = outcome.finish(args.out, cell)
    record_accounting(args.out, env, where, prior)
    if ended:
        status, reason = ended
        print(f"launch: the cell ended {status} ({reason}): recorded as status {status}, not retried", flush=True)
        return 0
    return code


def planned_launch(
    args: argparse.Namespace, run_settings: RunSettings, env: dict[str, str], where: str
) -> tuple[Allocation, int, str, environments.Environment]:
    """The cell's allocation, its process count, the launcher's command (its template filled in) and
    the framework's environment. LaunchError or network.InterfaceMissing where the cell cannot be
    placed in its allocation; SlurmError or PortError where the allocation could not be read."""
    framework, backend, gpus = run_settings.cell.framework, run_settings.cell.backend, run_settings.cell.gpus
    template = json.loads(args.launchers)[where][f"{framework}_{backend}"]
    environment = environments.resolve(framework, json.loads(args.environments).get(framework))
    train_args = cell_arguments(args.settings, args.data, args.out)
    if where == "slurm":  # the job id's port block, or the next one free on this node (ports.py)
        allocation = slurm_allocation(env["SLURM_JOB_ID"], reserve_slurm_block(env["SLURM_JOB_ID"]))
    else:
        allocation = local_allocation()
    processes = launch_processes(framework, backend, gpus, allocation)
    template = without_agent(template, where, processes)
    command = build_command(template, processes, allocation, train_args, environment, args.step_wait_s)
    interface = run_settings.network_interface
    if interface:  # after the command's first build: a cell that cannot be placed asks no node for it
        allocation = on_interface(allocation, interface, where, args.step_wait_s)
        command = build_command(template, processes, allocation, train_args, environment, args.step_wait_s)
    return allocation, processes, command, environment


def on_interface(allocation: Allocation, interface: str, where: str, step_wait_s: float) -> Allocation:
    """`allocation` with the rendezvous on `interface`'s address of this (the first) node and, under
    SLURM on several nodes, every node's address of it, for TensorFlow's workers."""
    allocation = dataclasses.replace(allocation, master_addr=network.address_of(interface))
    if where == "slurm" and len(allocation.hosts) > 1:
        gathered = network.gather_addresses(interface, allocation.hosts, step_wait(step_wait_s))
        allocation = dataclasses.replace(allocation, interface_addresses=gathered)
        print(f"launch: {interface} on each node: {export_addresses(allocation.hosts, gathered)}", flush=True)
    return allocation


def placed_environment(
    run_settings: RunSettings,
    env: dict[str, str],
    where: str,
    allocation: Allocation,
    processes: int,
    environment: environments.Environment,
) -> dict[str, str]:
    """The ranks' environment (rank_environment) with the variables that place them: srun's binding,
    or locally the GPU ids and cores this cell now holds (waiting while other cells hold them)."""
    framework, backend, gpus = run_settings.cell.framework, run_settings.cell.backend, run_settings.cell.gpus
    # this process's own facts: under SLURM a task's CPUs are the allocation's (each rank resolves
    # the same from its SLURM_CPUS_PER_TASK: settings.ProcessFacts), locally there are none
    cpus_per_task = allocation.cpus_per_rank if where == "slurm" else None
    threads = ProcessFacts.resolve(run_settings, env, cpus_per_task).threads
    # a one-process backend's task holds the GPUs of all its devices under task binding (config/resources.py)
    per_process = backends.devices_per_process(framework, backend, gpus)
    gpus_per_task = per_process if run_settings.gpu_binding == "task" else None
    if where == "slurm":
        placed = binding.slurm_environment(run_settings.cpu_binding, allocation.cpus_per_rank)
    else:  # this cell's own GPU ids and cores: two running cells never share one (local_pool.py)
        placed, said = binding.local_environment(
            run_settings.cpu_binding, run_settings.training.device, gpus, processes, threads, env
        )
        for line in said:
            print(f"launch: {line}", flush=True)
    interface = run_settings.network_interface
    return {**rank_environment(threads, allocation, environment, interface, gpus_per_task), **placed}


def record_accounting(out: str, env: dict[str, str], where: str, prior: dict | None) -> None:
    """run.json's account of the cell's job after its ranks, beside the loop's figures (launch/accounting.py:
    the job's wall, summed over a resumed cell's attempts from `prior`, and what SLURM accounted: the
    step's energy, the allocation's GPU-hours), said in the log."""
    job_id = env.get("SLURM_JOB_ID") if where == "slurm" else None
    fields = accounting.record(Path(out) / "run.json", job_id, accounting.own_start(), prior)
    if fields and where == "slurm":
        print(f"launch: SLURM accounting: {json.dumps(fields)}", flush=True)
    elif fields:
        wall = fields["job_s"]
        said = f"{wall:.1f} s ({fields['job_s_source']})" if wall is not None else f"unknown: {fields['job_s_reason']}"
        print(f"launch: the job's wall {said}", flush=True)
