"""Reading SLURM: node lists, tasks per node, srun's block distribution, the allocation.

Ranks read their step from srun's SLURM_* variables (stdlib only, nothing is
run). The batch step reads its allocation with ``scontrol`` (slurm_allocation),
because the Snakemake job's own environment is trimmed to the job id.
"""

from __future__ import annotations

import math
import re
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from scalebench.cluster import slurm_answers
from scalebench.cluster.ports import port_for_job

# launch.py tells the ranks which node names share an address (several slurmd on one host, as in a test
# cluster), so TensorFlow workers there take distinct ports: "name=address,...".
NODE_ADDRESSES = "SCALEBENCH_NODE_ADDRS"

# What horovod_srun.py (launch.py's Horovod rendezvous under srun) tells the ranks it starts: the
# rendezvous server's address, and the ranks per host it gave that server ("host:slots,..."), which
# must be where srun put them: the server clears a host's keys once as many ranks as it expects
# have read them.
RENDEZVOUS = "HOROVOD_GLOO_RENDEZVOUS_ADDR"
HOROVOD_PLAN = "SCALEBENCH_HOROVOD_PLAN"


class SlurmError(RuntimeError):
    """SLURM's variables or scontrol's answer cannot be read; the message says which."""


@dataclass(frozen=True)
class Allocation:
    """Where a cell's ranks may run: hosts (in order), the rendezvous address, its port block's start, CPUs per rank."""

    executor: str
    hosts: list[str]
    master_addr: str
    port: int
    cpus_per_rank: int
    addresses: tuple[str, ...] = ()  # each host's NodeAddr, in order (SLURM only)
    interface_addresses: tuple[str, ...] = ()  # each host's address on cluster.network_interface (network.py)


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


def tasks_per_node(spec: str) -> list[int]:
    """Expand SLURM's compressed task counts, e.g. ``2(x3),1`` -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for part in spec.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match:
            raise SlurmError(f"cannot read the SLURM tasks per node '{spec}'")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def step_hosts(env: Mapping[str, str]) -> list[str]:
    """The nodes of this job step in order (SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST)."""
    return expand_nodelist(env.get("SLURM_STEP_NODELIST") or env["SLURM_JOB_NODELIST"])


def step_tasks_per_node(env: Mapping[str, str], nodes: int) -> list[int]:
    """Tasks on each of the step's `nodes` nodes (SLURM_STEP_TASKS_PER_NODE, else the job's; 1 if unset)."""
    spec = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE") or "1"
    counts = tasks_per_node(spec)
    if len(counts) == 1:
        counts *= nodes
    if len(counts) != nodes:
        raise SlurmError(f"SLURM lists {nodes} nodes but tasks per node '{spec}'")
    return counts


def local_task_count(env: Mapping[str, str], nodes: int) -> int:
    """Tasks of this step on this rank's node (SLURM_NODEID indexes the step's tasks per node)."""
    return step_tasks_per_node(env, nodes)[int(env.get("SLURM_NODEID") or 0)]


def block_distribution(ranks: int, nodes: int) -> list[int]:
    """Ranks on each node in srun's block order: ceil(ranks / nodes) each until they run out (trailing 0s)."""
    per_node = math.ceil(ranks / nodes)
    return [max(0, min(per_node, ranks - i * per_node)) for i in range(nodes)]


# how long a job's own scontrol asks a controller that gives no verdict (busy, rate-limited, restarting)
PATIENCE_S = 300.0


def scontrol(*args: str, patience_s: float = PATIENCE_S, sleep: Callable[[float], None] = time.sleep) -> str:
    """scontrol's answer; a controller that gives no verdict (slurm_answers: busy) is asked again after
    a growing delay for `patience_s`, each new ask said on stdout (the cell's log): a busy controller
    costs a cell a delay, not its attempt. SlurmError on a refusal, or once the patience is used up."""
    command = " ".join(["scontrol", *args])
    waits = slurm_answers.delays(patience_s)
    while True:
        try:
            result = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=60)
            words = result.stderr.strip() if result.returncode else None
        except subprocess.TimeoutExpired as error:
            words = f"no answer in {error.timeout:g} s"
        except OSError as error:
            raise SlurmError(f"{command} failed: {error}") from error
        if words is None:
            return result.stdout
        answer = slurm_answers.classify(words)
        wait = next(waits, None) if answer.kind == slurm_answers.BUSY else None
        if wait is None:
            raise SlurmError(f"{command} failed: {words}")
        print(
            f"slurm: {command} got no verdict ({answer.means}: {words[-200:]}); asked again in {wait:g} s", flush=True
        )
        sleep(wait)


def oneliner_fields(oneliner: str) -> dict[str, str]:
    """KEY=VALUE pairs of `scontrol show ... --oneliner` output."""
    return dict(re.findall(r"(\S+?)=(\S*)", oneliner))


def slurm_allocation(job_id: str, port: int | None = None) -> Allocation:
    """The allocation of SLURM job `job_id`, read with scontrol (the job's own env is trimmed);
    `port`: the start of the block launch.py reserved (ports.reserve_slurm_block), else the job id's."""
    job = oneliner_fields(scontrol("show", "job", "--oneliner", job_id))
    hosts = scontrol("show", "hostnames", job["NodeList"]).split()
    addresses = tuple(
        oneliner_fields(scontrol("show", "node", "--oneliner", host)).get("NodeAddr") or host for host in hosts
    )
    cpus = job.get("CPUs/Task", "1")
    return Allocation(
        executor="slurm",
        hosts=hosts,
        master_addr=addresses[0],
        port=port if port is not None else port_for_job(job_id),
        cpus_per_rank=int(cpus) if cpus.isdigit() else 1,
        addresses=addresses,
    )


def export_addresses(hosts: list[str], addresses: tuple[str, ...]) -> str:
    """The value of NODE_ADDRESSES (or network.ADDRESSES): "name=address,..."."""
    return ",".join(f"{host}={address}" for host, address in zip(hosts, addresses, strict=True))


def node_addresses(env: Mapping[str, str], variable: str = NODE_ADDRESSES) -> dict[str, str]:
    """Node name -> address as launch.py exported them in `variable` (empty when it did not)."""
    pairs = [item.split("=", 1) for item in env.get(variable, "").split(",") if "=" in item]
    return {name: address for name, address in pairs}
