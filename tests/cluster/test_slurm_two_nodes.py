"""The workflow on two nodes of a real SLURM cluster (two slurmd on this host), and a cell's time-out
(on one node). Each study starts from the run's prepared dataset and builds only its cell (every
backend across two nodes: test_slurm_every_backend.py)."""

from __future__ import annotations

import subprocess

import pytest

from .conftest import cluster_config, cluster_data, describe, read_run, run_slurm_snakemake, slurm_jobs, with_data

pytestmark = pytest.mark.cluster

CELL = "results/runs/torch/native/g1/s1"


@pytest.fixture
def data(slurm, tmp_path_factory):
    return cluster_data(slurm, tmp_path_factory)


@pytest.mark.waits(100)
def test_cell_over_its_time_limit_is_retried_longer_and_resumes(single_node, tmp_path, data):
    # a 1-rank cell: one node is all it uses (a second would only keep another test waiting for nodes)
    # The first attempt stalls at epoch 3 (a test hook; only a run that did not resume stalls), so it
    # is killed at its 1-minute limit however fast the machine is; each retry doubles the limit and
    # resumes from the checkpoint of epoch 2, so the cell finishes however loaded the machine is.
    config = cluster_config(gpus=(1,), time={"base_min": 0, "per_epoch_min": 0, "floor_min": 1, "retry_factor": 2})
    config["training"].update(epochs=4, checkpoint_every=1)  # the retry trains epochs 3 and 4: it resumed
    with_data(tmp_path, data)
    result = run_slurm_snakemake(
        single_node,
        tmp_path,
        config,
        f"{CELL}/run.json",
        "--retries",
        "3",
        timeout=1200,
        env={"SCALEBENCH_FAULT": "stall:3"},
    )
    assert result.returncode == 0, describe(result, tmp_path)
    run = read_run(tmp_path, "torch/native/g1/s1")
    assert run["status"] == "ok"
    assert run["resumed_from_epoch"] == 2, run
    jobs = next(iter(slurm_jobs(tmp_path).values()))
    assert len(jobs) >= 2, jobs
    first_log = next((tmp_path / ".snakemake" / "slurm_logs" / "rule_train").glob(f"*/{jobs[0]}.log")).read_text()
    assert "DUE TO TIME LIMIT" in first_log, first_log[-2000:]
    output = result.stdout + result.stderr
    # Snakemake resubmitted it with the doubled runtime (minutes)
    assert "runtime=1," in output and "runtime=2," in output, output[-3000:]


@pytest.mark.waits(60)
def test_tensorflow_workers_use_the_chosen_interface_and_slurm_s_unaccounted_figures_stay_empty(
    two_nodes, tmp_path, data
):
    # cluster.network_interface on two nodes: launch.py gathers each node's address on it (one srun step)
    # and MultiWorkerMirrored's workers are named by those addresses. This cluster has no accounting
    # (accounting_storage/none) and no GPUs: the step's energy and the allocation's GPU-hours stay
    # empty with those reasons, never 0.
    config = cluster_config(frameworks=("tensorflow",), gpus=(2,), ranks_per_node=1, network_interface="lo")
    cell = "results/runs/tensorflow/native/g2/s1/run.json"
    result = run_slurm_snakemake(two_nodes, with_data(tmp_path, data), config, cell, timeout=900)
    assert result.returncode == 0, describe(result, tmp_path)
    run = read_run(tmp_path, "tensorflow/native/g2/s1")
    assert run["status"] == "ok" and run["hosts"] == two_nodes.nodes, run
    assert run["network_interface"] == "lo"
    log = (tmp_path / "results" / "runs" / "tensorflow" / "native" / "g2" / "s1" / "train.log").read_text()
    first, second = two_nodes.nodes
    assert f"launch: lo on each node: {first}=127.0.0.1,{second}=127.0.0.1" in log
    assert run["slurm"]["step_id"] == "1"  # step 0 gathered the addresses
    assert run["step_energy_j"] is None and run["step_energy_source"] is None
    assert run["step_energy_reason"].startswith("no accounting: AccountingStorageType is accounting_storage/none")
    assert run["alloc_gpu_hours"] is None and "holds no GPUs" in run["alloc_gpu_hours_reason"]
    assert run["train_gpu_hours"] > 0  # the epochs' own figure is still there
    # what the job held: SLURM's elapsed, not the launch process's clock
    assert run["job_s_source"] == "slurm elapsed" and run["job_s"] > 0 and run["job_attempts"] == 1
    # and sacct itself has nothing to say here: the reason is this cluster's, not a guess
    sacct = subprocess.run(
        ["sacct", "-j", f"{run['slurm']['job_id']}.1", "-n", "-P", "--format=ConsumedEnergyRaw"],
        capture_output=True,
        text=True,
        env=two_nodes.env(),
    )
    assert "accounting storage is disabled" in sacct.stderr, sacct
