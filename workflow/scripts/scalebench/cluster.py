"""How a cell becomes a SLURM job: nodes, tasks, GPUs, CPUs, memory and time.

The values are Snakemake resources that snakemake-executor-plugin-slurm turns
into sbatch options. Multi-rank cells use the plugin's ``mpi`` resource, so the
rule's command runs once in the allocation and starts its ranks itself.
"""

from __future__ import annotations

import math

from .config import Cell, ranks_per_node_limit


def runtime_minutes(config: dict, cell: Cell, attempt: int = 1) -> int:
    """base + per_epoch * epochs / gpus, at least floor; grows by retry_factor per retry."""
    time = config["cluster"]["time"]
    minutes = time["base_min"] + time["per_epoch_min"] * config["training"]["epochs"] / cell.gpus
    minutes = max(time["floor_min"], minutes) * time["retry_factor"] ** (attempt - 1)
    return int(math.ceil(minutes))


def job_resources(config: dict, cell: Cell, attempt: int = 1) -> dict:
    cluster = config["cluster"]
    per_node = ranks_per_node_limit(cluster)
    nodes = math.ceil(cell.gpus / per_node)
    ranks_per_node = math.ceil(cell.gpus / nodes)
    extra = [cluster["extra"]] if cluster["extra"] else []
    if cluster["exclusive"]:
        extra.append("--exclusive")
    resources = {
        "nodes": nodes,
        "cpus_per_task": cluster["cpus_per_rank"],
        "mem_mb": cluster["mem_mb_per_rank"] * ranks_per_node,
        "runtime": runtime_minutes(config, cell, attempt),
        "gres": cluster["gres"].format(n=ranks_per_node) if cluster["gpus_per_node"] else "",
        "slurm_partition": cluster["partition"] or "",
        "slurm_account": cluster["account"] or "",
        "qos": cluster["qos"] or "",
        "constraint": cluster["constraint"] or "",
        "tasks_per_node": 0,
        "mpi": "",
    }
    if cell.gpus > 1:
        # The plugin rejects tasks_per_node <= 1 for mpi jobs, and `tasks` next to a GPU
        # request becomes --ntasks-per-gpu; one rank per node goes through slurm_extra.
        resources["mpi"] = "srun"
        if ranks_per_node > 1:
            resources["tasks_per_node"] = ranks_per_node
        else:
            extra.append("--ntasks-per-node=1")
    resources["slurm_extra"] = " ".join(extra)
    return resources
