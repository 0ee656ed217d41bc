"""Every backend's cells as SLURM jobs on a real two-node cluster, in one study that two tests read:
the demo's backends from their cells to the report, and every backend of one process per rank
with its 2-rank cell across both nodes (one rank per node). The study runs once per test run,
whichever test asks first (made_once); each test asserts its own part, and runs alone too. It starts
from the run's prepared dataset (with_data): the data jobs as SLURM jobs are
test_slurm_single_node.py's (the partition test runs them on SLURM), not two more jobs, one after
the other, ahead of this study's cells."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import made_once

from .conftest import (
    cluster_config,
    cluster_data,
    describe,
    hostlist,
    implemented_backends,
    partition,
    read_run,
    run_slurm_snakemake,
    slurm_jobs,
    slurm_rules,
    with_data,
)

pytestmark = pytest.mark.cluster

DEMO = implemented_backends(("native", "horovod"))  # the demo's backends (config/config.yaml)
# one process per rank: dp and mirrored drive one node from one process (left out across two nodes)
PER_RANK = implemented_backends(("native", "horovod", "fsdp"))


@dataclass
class Study:
    folder: Path
    nodes: list[str]  # the two nodes it ran on
    root: Path  # the cluster's folder (the slurmd logs)


@pytest.fixture
def every_backend_study(slurm, tmp_path_factory) -> Study:
    """torch and tensorflow x native, horovod and fsdp x 1 and 2 ranks, one rank per node on two
    nodes, from the run's prepared dataset; every cell runs as a SLURM job, then the report."""
    config = cluster_config(
        frameworks=sorted({f for f, _ in PER_RANK}), backends=sorted({b for _, b in PER_RANK}), ranks_per_node=1
    )
    config["training"]["epochs"] = 2  # a steady epoch after the first, as the report's tables need (tiny_study_config)

    def make(folder: Path) -> None:
        with_data(folder, cluster_data(slurm, tmp_path_factory))  # cluster_config()'s dataset: the same
        with partition(slurm, 2, "every backend's study") as nodes:
            result = run_slurm_snakemake(nodes, folder, config, timeout=1200)
            assert result.returncode == 0, describe(result, folder)
            report = run_slurm_snakemake(nodes, folder, config, "--report", str(folder / "report.html"))
            assert report.returncode == 0, describe(report, folder)
            (folder / "nodes.json").write_text(json.dumps(nodes.nodes))

    folder = made_once(tmp_path_factory, "every-backend-study", make)
    return Study(folder, json.loads((folder / "nodes.json").read_text()), slurm.root)


@pytest.mark.waits(220)
def test_demo_matrix_runs_as_slurm_jobs_to_the_report(every_backend_study):
    study = every_backend_study.folder
    # every cell ran as a SLURM job; the analysis rules (tables, every drawing group's plot rule) are
    # local rules: no queue wait for seconds of work (the data jobs as SLURM jobs: test_slurm_single_node.py's
    # test_a_partition_that_does_not_exist_..., which runs them on SLURM; here the prepared data was up to date)
    assert (study / "report.html").stat().st_size > 0
    jobs = slurm_jobs(study)
    assert slurm_rules(study) == ["train"], slurm_rules(study)
    for framework, backend in DEMO:
        for gpus in (1, 2):
            cell = f"{framework}/{backend}/g{gpus}/s1"
            run = read_run(study, cell)
            assert run["status"] == "ok" and run["replicas"] == gpus, run
            # the ranks ran inside the SLURM job the plugin submitted for this cell
            assert run["slurm"]["job_id"] in jobs[f"{framework}_{backend}_{gpus}_1"], (run["slurm"], jobs)
            log = (study / "results" / "runs" / cell / "train.log").read_text()
            # its first launch line (a line of ports.py may come first: the job id's port block was taken)
            launch = next((line for line in log.splitlines() if line.startswith("launch")), "")
            assert launch.startswith("launch (slurm): "), log[:500]
            # each rank on its cluster.cpus_per_rank (1) core, read back from the OS: this cluster's srun binds
            # nothing (TaskPlugin=task/none), so each rank took its local rank's share itself (two ranks
            # on one node take two cores: test_slurm_single_node.py's two cells at once)
            assert run["cpu_binding"] == "cores" and run["cpu_bound_by"] == "rank", run
            assert len(run["rank_cpus"]) == gpus and all(cpus.isdigit() for cpus in run["rank_cpus"]), run
            assert run["local_gpu_ids"] is None and "SLURM" in run["local_gpu_ids_reason"]


@pytest.mark.waits(220)
def test_two_rank_cell_of_each_backend_puts_one_rank_on_each_node(every_backend_study):
    study, nodes = every_backend_study.folder, every_backend_study.nodes
    for framework, backend in PER_RANK:
        run = read_run(study, f"{framework}/{backend}/g2/s1")
        assert run["status"] == "ok" and run["replicas"] == 2, run
        # each rank reports SLURM's node name (both nodes share this machine's hostname)
        assert run["hosts"] == nodes and run["nodes"] == 2, run
        slurm = run["slurm"]
        assert (slurm["step_nodelist"], slurm["step_tasks_per_node"]) == (hostlist(nodes), "1(x2)"), slurm
        # and each node's slurmd launched a task of that step
        step = f"StepId={slurm['job_id']}.0"
        for node in nodes:
            log = (every_backend_study.root / "log" / f"slurmd.{node}.log").read_text()
            assert f"launch task {step} " in log, (framework, backend, node)
