"""A job trains its cell only in an allocation that holds what the cell's job asks for (launch/held_cell.py):
the waiting job of a held cell (one task of one CPU, no GPU: config/resources.py) never trains, and
a whole allocation always does. The request is the train rule's resources as the job's own Snakemake
evaluates them; the allocation is read from scontrol's format."""

from __future__ import annotations

from conftest import REPO, tiny_config
from scalebench.cell import Cell
from scalebench.cluster.slurm import oneliner_fields
from scalebench.config import load_schema, validate
from scalebench.config.resources import job_resources, request
from scalebench.launch import held_cell
from test_accounting import GPU_JOB

# the same two-node job's counts (scontrol show job -d --oneliner), and a waiting job's
WHOLE = oneliner_fields(f"{GPU_JOB} NumTasks=8 CPUs/Task=8")
WAITING = oneliner_fields(
    "JobId=4243 JobState=RUNNING NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 "
    "AllocTRES=cpu=1,mem=1000M,node=1,billing=1 JOB_GRES=(null)"
)


def config(**cluster) -> dict:
    """A study on nodes of 4 GPUs, 8 CPUs and 32 GB per rank."""
    study = tiny_config(matrix={"gpus": [1, 2, 8]}, training={"batch_per_gpu": 2})
    study["dataset"]["synthetic"]["count"] = 100
    study["cluster"] = {"gpus_per_node": 4, "cpus_per_rank": 8, "mem_mb_per_rank": 32000, **cluster}
    return validate(study, load_schema(REPO / "config" / "schema.yaml"))


def test_a_cells_request_counts_its_tasks_cpus_and_gpus_however_its_gpus_are_bound():
    cell = Cell("torch", "native", 8, 1)
    assert request(job_resources(config(), cell)) == {"tasks": 8, "cpus_per_task": 8, "gpus": 8}
    assert request(job_resources(config(gpu_binding="task"), cell)) == {"tasks": 8, "cpus_per_task": 8, "gpus": 8}
    one = request(job_resources(config(ranks_per_node=1, gpus_per_node=1), Cell("torch", "native", 2, 1)))
    assert one == {"tasks": 2, "cpus_per_task": 8, "gpus": 2}
    assert request(job_resources(config(), cell, waiting=True)) == {"tasks": 1, "cpus_per_task": 1, "gpus": 0}


def test_the_waiting_jobs_allocation_falls_short_of_the_cells_request_and_the_whole_one_does_not():
    whole = request(job_resources(config(), Cell("torch", "native", 8, 1)))
    assert held_cell.shortfall(whole, WHOLE) == []
    assert held_cell.shortfall(whole, WAITING) == ["tasks: 1 of 8", "cpus_per_task: 1 of 8", "gpus: 0 of 8"]
    # the waiting job's own request is what it holds: it may wait there, and adopt
    assert held_cell.shortfall({"tasks": 1, "cpus_per_task": 1, "gpus": 0}, WAITING) == []
