"""How a cell becomes a SLURM job: nodes, tasks, GPUs, CPUs, memory and time.

One task per rank; a backend that drives a node's devices from one process (dp,
mirrored) is one task on one node with all the cell's GPUs and the CPUs and
memory of as many ranks.

The values are Snakemake resources that snakemake-executor-plugin-slurm (2.x)
turns into sbatch options. Every training job carries the plugin's ``mpi``
resource, so the jobstep plugin runs the rule's command once in the allocation
(no ``srun -n1`` wrapper) and launch.py starts the ranks itself with srun.

Plugin rules this mapping works around (submit_string.get_submit_command):

- ``tasks`` next to a GPU request becomes ``--ntasks-per-gpu``: never set it on
  GPU clusters; tasks are given per node.
- A truthy ``mpi`` demands ``tasks_per_node > 1`` or ``tasks > 1``. A cell with
  one rank per node therefore gets ``mpi: ""`` (falsy, but the key is present,
  which is all the jobstep plugin looks at) and ``--ntasks-per-node=1``.
- Without a truthy ``mpi`` and without a GPU the plugin adds ``--ntasks=<tasks or 1>``,
  so CPU cells with one rank per node set ``tasks`` to the node count.
- A resource that is ``None`` is dropped by Snakemake; an empty string is kept
  and would become e.g. ``--qos=''``. Unset options are therefore ``None``.
- The plugin has no per-task GPU resource, so ``cluster.gpu_binding: task`` asks for
  ``--gpus-per-task`` through ``slurm_extra`` (which the plugin allows; ``--gpus`` and
  ``--gres`` it forbids there) and no gres. The job is then no GPU job to the plugin:
  one rank per node sets ``tasks`` to the node count, as CPU cells do.
- A rule's resource replaces the one of ``--default-resources`` (a profile's
  ``default-resources``), even when its function returns ``None``. The account,
  partition, QoS and constraint are therefore declared only where the config
  sets them (``declared_names``), so a default given on the command line or in
  a profile reaches the training jobs too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from scalebench import backends, measures
from scalebench.cell import Cell
from scalebench.cluster.slurm import block_distribution

# The train rule's resources (rules/common.smk: train_resources), the keys of job_resources.
RESOURCE_NAMES = (
    "nodes",
    "tasks",
    "tasks_per_node",
    "mpi",
    "gres",
    "cpus_per_task",
    "mem_mb",
    "runtime",
    "slurm_partition",
    "slurm_account",
    "qos",
    "constraint",
    "slurm_extra",
)


# Resources that config leaves to Snakemake's defaults where it does not set them: cluster key -> resource.
OPTIONAL_RESOURCES = {
    "partition": "slurm_partition",
    "account": "slurm_account",
    "qos": "qos",
    "constraint": "constraint",
}


def declared_names(cluster: dict) -> tuple[str, ...]:
    """The train rule's resources: every name of RESOURCE_NAMES except the optional ones that the
    cluster section leaves unset (those come from --default-resources or a profile, if given)."""
    unset = {name for key, name in OPTIONAL_RESOURCES.items() if not cluster.get(key)}
    return tuple(name for name in RESOURCE_NAMES if name not in unset)


def training_minutes(config: dict, cell: Cell) -> float:
    """Minutes the cell's epochs are expected to take: per_epoch x epochs / gpus (a pass over the
    training set), or with training.steps_per_epoch per_step x its batches x epochs (the same at
    every GPU count); times the model's FLOPs over width 1's, which grow as the width squared."""
    time, training = config["cluster"]["time"], config["training"]
    width = dict(cell.axes).get("model_width", config["model"]["width"])
    if training["steps_per_epoch"] is None:
        minutes = time["per_epoch_min"] * training["epochs"] / cell.gpus
    else:
        known = backends.exists(cell.framework, cell.backend)
        passes = measures.backward_passes(cell.framework, cell.backend, training) if known else 1
        minutes = time["per_step_min"] * training["steps_per_epoch"] * passes * training["epochs"]
    return minutes * width**2


def runtime_minutes(config: dict, cell: Cell, attempt: int = 1, measured_min: float | None = None) -> int:
    """base + training_minutes (the formula), or base + `measured_min` where the bill predicts the
    cell from measured cells (config/bill.py: the prediction with its safety factor); at least
    floor; times retry_factor per retry.

    A cell killed at its time limit is retried by Snakemake with attempt + 1, so
    the next submission asks for a longer limit and resumes from its checkpoint.
    """
    time = config["cluster"]["time"]
    minutes = time["base_min"] + (training_minutes(config, cell) if measured_min is None else measured_min)
    minutes = max(time["floor_min"], minutes) * time["retry_factor"] ** (max(attempt, 1) - 1)
    return int(math.ceil(minutes))


def ranks_per_node_limit(cluster: dict) -> int:
    """The most ranks a node takes: its GPUs, or cluster.ranks_per_node on a CPU cluster."""
    return cluster["gpus_per_node"] or cluster["ranks_per_node"]


def node_layout(cluster: dict, gpus: int) -> list[int]:
    """Ranks on each node of a cell: as few nodes as hold `gpus` ranks, filled in blocks (the last may hold fewer)."""
    return block_distribution(gpus, math.ceil(gpus / ranks_per_node_limit(cluster)))


def task_layout(cluster: dict, cell: Cell) -> tuple[int, int, int]:
    """(nodes, tasks per node, devices per task) of a cell's job: one task per rank, as few nodes as
    hold them; one task on one node holding every device for a backend that drives a node from one
    process (dp, mirrored)."""
    if backends.exists(cell.framework, cell.backend) and backends.spec(cell.framework, cell.backend).one_process:
        return 1, 1, cell.gpus
    layout = node_layout(cluster, cell.gpus)
    return len(layout), layout[0], 1


def job_resources(
    config: dict, cell: Cell, attempt: int = 1, runtime: int | None = None, waiting: bool = False
) -> dict[str, object]:
    """Snakemake resources of the train job of `cell`; None means 'leave unset'. `runtime`: the time
    limit in minutes where the bill sets it (config/bill.py), else the formula's; `waiting`: the job
    of a cell that a live job holds, which waits for that job and adopts its outcome (waiting_resources)."""
    cluster = config["cluster"]
    runtime = runtime_minutes(config, cell, attempt) if runtime is None else runtime
    if waiting:
        return waiting_resources(cluster, runtime)
    nodes, ranks_per_node, per_task = task_layout(cluster, cell)
    uses_gpus = cluster["gpus_per_node"] > 0
    per_node_gres = uses_gpus and cluster["gpu_binding"] == "node"
    extra = [cluster["extra"]] if cluster["extra"] else []
    if cluster["exclusive"]:
        extra.append("--exclusive")
    if cluster.get("exclude"):  # nodes found slow (analysis/hosts.py), or any the user keeps cells off
        extra.append(f"--exclude={','.join(cluster['exclude'])}")
    if uses_gpus and not per_node_gres:  # SLURM binds each task to its own GPUs (train/devices.py)
        extra.append(f"--gpus-per-task={per_task}")
    resources: dict[str, object] = {
        "nodes": nodes,
        "tasks": None,
        "tasks_per_node": None,
        "mpi": "srun",
        "gres": cluster["gres"].format(n=ranks_per_node * per_task) if per_node_gres else None,
        "cpus_per_task": cluster["cpus_per_rank"] * per_task,
        "mem_mb": cluster["mem_mb_per_rank"] * ranks_per_node * per_task,
        "runtime": runtime,
        "slurm_partition": cluster["partition"] or None,
        "slurm_account": cluster["account"] or None,
        "qos": cluster["qos"] or None,
        "constraint": cluster["constraint"] or None,
    }
    if ranks_per_node > 1:
        resources["tasks_per_node"] = ranks_per_node
    else:
        resources["mpi"] = ""
        extra.append("--ntasks-per-node=1")
        if not per_node_gres:
            resources["tasks"] = nodes
    resources["slurm_extra"] = " ".join(extra) or None
    return resources


# A waiting job's memory: its own Snakemake and launch.py, which wait and then adopt an outcome.
WAITING_MEM_MB = 1000


def waiting_resources(cluster: dict, runtime: int) -> dict[str, object]:
    """The job of a cell held by a live job (its SLURM job pending or running, or a process holding
    its lock): launch.py waits for that job and adopts its outcome, so it asks for one task of one CPU
    on one node, no GPU and little memory, for the cell's time limit (the holder may train that long),
    in the cell's partition and account. It never trains: where the holder ends without finishing,
    launch.py ends this job failed, and Snakemake's retry asks for the cell's full allocation."""
    extra = [cluster["extra"]] if cluster["extra"] else []
    if cluster.get("exclude"):
        extra.append(f"--exclude={','.join(cluster['exclude'])}")
    return {
        "nodes": 1,
        "tasks": 1,
        "tasks_per_node": None,
        "mpi": "",  # present, so the jobstep runs launch.py once, as for every cell
        "gres": None,
        "cpus_per_task": 1,
        "mem_mb": min(WAITING_MEM_MB, cluster["mem_mb_per_rank"]),
        "runtime": runtime,
        "slurm_partition": cluster["partition"] or None,
        "slurm_account": cluster["account"] or None,
        "qos": cluster["qos"] or None,
        "constraint": cluster["constraint"] or None,
        "slurm_extra": " ".join(extra) or None,
    }


def request(resources: Mapping[str, object]) -> dict[str, int]:
    """What a train job's resources ask SLURM for, in the terms launch.py can read back from its
    allocation (cluster/slurm.py: shortfall): its tasks, CPUs per task and GPUs in all."""
    nodes = int(resources.get("nodes") or 1)
    tasks = resources.get("tasks") or (int(resources.get("tasks_per_node") or 1) * nodes)
    per_node = re.fullmatch(r"gpu(?::[^:]+)?:(\d+)", str(resources.get("gres") or ""))  # cluster.gres: gpu:a100:4
    gpus = int(per_node.group(1)) * nodes if per_node else 0
    per_task = re.search(r"--gpus-per-task[= ](\d+)", str(resources.get("slurm_extra") or ""))
    if per_task:
        gpus = int(per_task.group(1)) * int(tasks)
    return {"tasks": int(tasks), "cpus_per_task": int(resources.get("cpus_per_task") or 1), "gpus": gpus}
