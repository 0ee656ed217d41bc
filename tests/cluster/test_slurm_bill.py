"""The bill on a real one-node SLURM cluster (config/bill.py): a cell held by a live job costs no second
allocation, and cells after measured ones ask SLURM for limits from what was measured.

One study, three starts, so the cells trained serve both (the suite's time): a restarted Snakemake
finds its cell held by the job its killed predecessor left; that job is cancelled unfinished while
the new one waits in its one CPU; the waiting job trains nothing there and its retry trains the cell
with its whole allocation; then the study's second seed asks a limit from the first one's run."""

from __future__ import annotations

import csv
import re
import signal
import subprocess

import pytest
from conftest import kill_if_running, wait_for

from .conftest import (
    cluster_config,
    cluster_data,
    describe,
    read_run,
    run_slurm_snakemake,
    slurm_jobs,
    start_slurm_snakemake,
    with_data,
)
from .test_slurm_survival import epoch_records, squeue_and_log

pytestmark = pytest.mark.cluster

FIRST, SECOND = "results/runs/torch/native/g1/s1", "results/runs/torch/native/g1/s2"
# two CPUs per rank, so the cell's whole request (one task of 2 CPUs) differs from a waiting job's
# (one task of one CPU); the formula's limit: 5 + 10 x 3 epochs = 35 minutes
TIME = {"base_min": 5, "per_epoch_min": 10, "floor_min": 5, "retry_factor": 2}


@pytest.fixture
def data(slurm, tmp_path_factory):
    return cluster_data(slurm, tmp_path_factory)


def asked(cluster, job: str) -> dict[str, str]:
    """What SLURM holds of a job (scontrol show job: its CPUs, tasks, TRES and time limit)."""
    shown = subprocess.run(
        ["scontrol", "show", "job", "--oneliner", job], capture_output=True, text=True, env=cluster.env()
    )
    assert shown.returncode == 0, shown.stderr
    return dict(re.findall(r"(\S+?)=(\S*)", shown.stdout))


@pytest.mark.waits(80)
def test_a_held_cell_waits_in_one_cpu_and_the_cells_after_ask_limits_from_what_was_measured(
    single_node, tmp_path, data
):
    config = cluster_config(gpus=(1,), seeds=(1, 2), cpus_per_rank=2, time=TIME)
    with_data(tmp_path, data)
    gate = tmp_path / "gate"  # rank 0 of each run waits there before its first epoch until two arrived
    env = {"SCALEBENCH_FAULT": f"meet:{gate}:2"}
    first = start_slurm_snakemake(single_node, tmp_path, config, f"{FIRST}/run.json", env=env)
    second = None
    try:
        assert wait_for(lambda: gate.is_dir() and len(list(gate.iterdir())) == 1, 600), "the first job did not start"
        held_by = read_run(tmp_path, "torch/native/g1/s1")["slurm"]["job_id"]
        first.send_signal(signal.SIGKILL)  # as a dropped login session ends it; its SLURM job runs on
        started, _ = first.communicate(timeout=60)
        assert "runtime=35," in started  # nothing measured yet: the formula
        assert run_slurm_snakemake(single_node, tmp_path, config, "--unlock", env=env).returncode == 0
        second = start_slurm_snakemake(single_node, tmp_path, config, f"{FIRST}/run.json", env=env)
        log = tmp_path / FIRST / "train.log"
        waiting = f"the cell is held by SLURM job {held_by}"
        assert wait_for(lambda: log.exists() and waiting in log.read_text(), 600), squeue_and_log(single_node, log)
        subprocess.run(["scancel", held_by], check=True, env=single_node.env())  # it ends unfinished
        output, _ = second.communicate(timeout=900)
    finally:
        kill_if_running(first, second)
    assert second.returncode == 0, output[-6000:]
    assert f"torch/native/g1/s1 is being trained by SLURM job {held_by}" in output
    assert "1 held by a live job" in output  # the bill's line
    # the waiting job asked SLURM for one task of one CPU; its retry for the cell's whole allocation
    jobs = slurm_jobs(tmp_path)["torch_native_1_1"]
    assert len(jobs) == 3 and jobs[0] == held_by and output.count("Trying to restart") == 1, (jobs, output[-6000:])
    waited, retried = asked(single_node, jobs[1]), asked(single_node, jobs[2])
    assert (waited["NumTasks"], waited["CPUs/Task"], waited["TimeLimit"]) == ("1", "1", "00:35:00"), waited
    assert waited["TRES"].startswith("cpu=1,mem=1000M,node=1"), waited
    assert (retried["NumTasks"], retried["CPUs/Task"]) == ("1", "2"), retried
    # it trained nothing in the small allocation and said why, in its log (kept under its holder's name)
    said = (tmp_path / FIRST / ".holders" / "2.log").read_text()
    assert f"SLURM job {held_by} ended without finishing the cell" in said, said
    assert f"SLURM job {jobs[1]} holds less than the cell's job asks for (cpus_per_task: 1 of 2)" in said
    assert "launch (slurm): " not in said  # no rank started there
    run = read_run(tmp_path, "torch/native/g1/s1")
    assert (run["status"], run["slurm"]["job_id"]) == ("ok", jobs[2])
    epochs, finals = epoch_records(tmp_path, FIRST)
    assert [e["epoch"] for e in epochs] == [1, 2, 3] and len(finals) == 1

    # the second seed: its limit from the first seed's run (+ base_min, x safety_factor 1.5)
    result = run_slurm_snakemake(single_node, tmp_path, config, f"{SECOND}/run.json")
    assert result.returncode == 0, describe(result, tmp_path)
    with open(tmp_path / "results" / "plan" / "bill.csv", newline="") as handle:
        row = next(r for r in csv.DictReader(handle) if r["seed"] == "2")
    assert (row["source"], row["method"]) == ("this study", "measured at 1 GPUs (1 cell(s))")
    limit = int(row["time_limit_min"])
    (job,) = slurm_jobs(tmp_path)["torch_native_1_2"]
    assert limit < 35 and asked(single_node, job)["TimeLimit"] == f"00:{limit:02d}:00"
    assert "Trying to restart" not in result.stdout + result.stderr  # no time-out
    assert read_run(tmp_path, "torch/native/g1/s2")["status"] == "ok"
    slurm_log = next((tmp_path / ".snakemake" / "slurm_logs" / "rule_train").glob(f"*/{job}.log")).read_text()
    assert "DUE TO TIME LIMIT" not in slurm_log
