"""A study never waits for ever, on a real one-node SLURM cluster: a cell whose job is requeued and
held while it trains (scontrol requeuehold), and one whose job is suspended while it trains, are ended once they sat longer than cluster.stuck_after_min,
each listed with what happened and the command that reruns it, while a third cell trains to its end;
a cell preempted under PreemptMode=CANCEL is ended the same way, and one preempted under REQUEUE
runs again under its id and resumes (cluster/stuck_jobs.py, config/slurm_plugin.py). Without the
study's watch the SLURM plugin polls a held, suspended or cancel-preempted job for ever."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from conftest import kill_if_running, wait_for
from scalebench.analysis import collect, completeness
from scalebench.cluster import stuck_jobs
from scalebench.launch import launcher
from scalebench.rerun import Invocation

from .conftest import cluster_config, cluster_data, describe, read_run, slurm_jobs, start_slurm_snakemake, with_data

pytestmark = pytest.mark.cluster

CELLS = {seed: f"results/runs/torch/native/g1/s{seed}" for seed in (1, 2, 3)}


@pytest.fixture
def data(slurm, tmp_path_factory):
    return cluster_data(slurm, tmp_path_factory)


def job_of(cluster, seed: int) -> str | None:
    """The SLURM job of the cell of `seed`, pending or running, by the comment the plugin gives it (its
    log, which slurm_jobs reads, exists only once the job started)."""
    listed = subprocess.run(["squeue", "-h", "-o", "%i|%k"], capture_output=True, text=True, env=cluster.env())
    for line in listed.stdout.splitlines():
        job, _, comment = line.partition("|")
        if comment.strip() == f"rule_train_wildcards_torch_native_1_{seed}":
            return job.strip()
    return None


def state(cluster, job: str) -> str:
    result = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, env=cluster.env())
    return result.stdout.strip()


def scontrol(cluster, *args: str) -> None:
    result = subprocess.run(["scontrol", *args], capture_output=True, text=True, env=cluster.env())
    assert result.returncode == 0, f"scontrol {' '.join(args)}: {result.stderr}"


@pytest.mark.waits(120)
def test_a_held_and_a_suspended_job_are_ended_after_the_bound_and_the_study_goes_on(single_node, tmp_path, data):
    config = cluster_config(gpus=(1,), seeds=(1, 2, 3), stuck_after_min=0.1)  # 6 s
    config["training"].update(epochs=4)
    with_data(tmp_path, data)
    targets = [f"{cell}/run.json" for cell in CELLS.values()]
    process = start_slurm_snakemake(single_node, tmp_path, config, *targets)
    running = lambda seed: job_of(single_node, seed) and state(single_node, job_of(single_node, seed)) == "RUNNING"  # noqa: E731
    try:
        assert wait_for(lambda: running(1) and running(2), 300), single_node.squeue()
        held, suspended = job_of(single_node, 1), job_of(single_node, 2)
        scontrol(single_node, "requeuehold", held)  # requeued mid-run, and held: pending for ever
        scontrol(single_node, "suspend", suspended)
        output, _ = process.communicate(timeout=300)  # without the watch: for ever
    finally:
        kill_if_running(process)
    said = describe(subprocess.CompletedProcess(process.args, process.returncode, output, ""), tmp_path)
    assert process.returncode != 0, said  # two cells did not finish; Snakemake says so, after the third ended
    hold = "job requeued in held state"  # squeue's reason of a job requeued held
    for job, what in ((held, f"PENDING ({hold})"), (suspended, "SUSPENDED")):
        assert f"SLURM job {job} sat " in output and f"in state {what}, longer than cluster.stuck_after_min" in output
        assert state(single_node, job) in ("CANCELLED", ""), said  # ended in SLURM too, not left to run later
    jobs = slurm_jobs(tmp_path)  # the jobs that started (each writes its log)
    assert jobs["torch_native_1_1"] == [held] and jobs["torch_native_1_2"] == [suspended], jobs
    assert "Trying to restart" not in output, said  # neither is retried in this run
    assert read_run(tmp_path, "torch/native/g1/s3")["status"] == "ok"
    marks = {seed: stuck_jobs.read_mark(tmp_path / CELLS[seed]) for seed in (1, 2)}
    assert (marks[1].status, marks[1].reason, marks[2].status) == ("held", hold, "suspended")
    cells = [{"framework": "torch", "backend": "native", "gpus": 1, "seed": seed} for seed in (1, 2, 3)]
    runs, _ = collect.collect(tmp_path / "results" / "runs", cells)
    assert runs["status"].tolist() == ["held", "suspended", "ok"], runs[["status", "reason"]]
    listed = completeness.incomplete(runs, [], Invocation(("snakemake",), str(tmp_path), ("--executor", "slurm")))
    assert listed["status"].tolist()[:2] == ["held", "suspended"]
    assert f"{CELLS[1]}/metrics.jsonl" in listed["rerun"][0] and f"{CELLS[2]}/metrics.jsonl" in listed["rerun"][1]


@pytest.mark.waits(120)
@pytest.mark.parametrize("mode", ["CANCEL", "REQUEUE"])
def test_a_preempted_cell_is_ended_under_cancel_and_resumes_under_requeue(single_node, tmp_path, data, mode):
    # the study's partition yields to a partition of a higher tier on the same node, by `mode`
    scontrol(single_node, "update", f"PartitionName={single_node.name}", f"PreemptMode={mode}")
    high = f"{single_node.name}-high"
    scontrol(single_node, "create", f"PartitionName={high}", f"Nodes={single_node.nodes[0]}", "PriorityTier=10")
    config = cluster_config(gpus=(1,), stuck_after_min=0.1)
    config["training"].update(epochs=4, checkpoint_every=1)
    with_data(tmp_path, data)
    cell = CELLS[1]
    # the first run stops at the start of epoch 3, after epoch 2's checkpoint (a resumed run does not)
    process = start_slurm_snakemake(
        single_node, tmp_path, config, f"{cell}/run.json", env={"SCALEBENCH_FAULT": "stall:3"}
    )
    try:
        log = tmp_path / cell / "train.log"
        assert wait_for(lambda: log.exists() and "stalling at epoch 3" in log.read_text(), 300), single_node.squeue()
        job = job_of(single_node, 1)
        preempting = subprocess.run(
            ["sbatch", "--parsable", "-p", high, "-c", "4", "--mem", "1000", "-o", "/dev/null", "--wrap", "sleep 3"],
            capture_output=True,
            text=True,
            env=single_node.env(),
        )
        assert preempting.returncode == 0, preempting.stderr
        if mode == "REQUEUE":  # SLURM holds a requeued job back for a while; the test lets it start once it may
            assert wait_for(lambda: state(single_node, job) == "PENDING", 60), single_node.squeue()
            wait_for(lambda: not state(single_node, preempting.stdout.strip()).startswith(("RUNNING", "PENDING")), 60)
            scontrol(single_node, "update", f"JobId={job}", "StartTime=now")
        output, _ = process.communicate(timeout=300)  # under CANCEL, without the watch: for ever
    finally:
        kill_if_running(process)
        subprocess.run(["scontrol", "delete", f"PartitionName={high}"], capture_output=True, env=single_node.env())
    said = describe(subprocess.CompletedProcess(process.args, process.returncode, output, ""), tmp_path)
    cells = [{"framework": "torch", "backend": "native", "gpus": 1, "seed": 1}]
    runs, _ = collect.collect(tmp_path / "results" / "runs", cells)
    if mode == "CANCEL":  # final in SLURM, which the plugin polls for ever: ended, listed as preempted
        assert process.returncode != 0 and f"SLURM job {job} sat " in output and "in state PREEMPTED" in output, said
        assert runs["status"].tolist() == ["preempted"] and stuck_jobs.read_mark(tmp_path / cell).state == "PREEMPTED"
        return
    # requeued under its id (profiles/slurm's slurm-requeue): it resumed from epoch 2's checkpoint
    assert process.returncode == 0 and "Trying to restart" not in output, said
    run = read_run(tmp_path, "torch/native/g1/s1")
    assert (run["status"], run["slurm"]["job_id"], run["resumed_from_epoch"]) == ("ok", job, 2), run
    lines = [json.loads(line) for line in (tmp_path / cell / "metrics.jsonl").read_text().splitlines()]
    assert [line["epoch"] for line in lines if line["type"] == "epoch"] == [1, 2, 3, 4]  # each epoch once
    assert runs["status"].tolist() == ["ok"]


# In one allocation: a step that holds all of it, then (once it runs, however slow the machine) a
# second step that cannot start beside it, once without a bound (still waiting after 20 s) and once
# with launch.py's (cluster.step_wait_s)
BLOCKED_STEP = """#!/bin/bash
srun --ntasks=1 --cpus-per-task=2 bash -c 'touch "$0"; sleep 120' "$PWD/holding.$SLURM_JOB_ID" &
until [ -e "holding.$SLURM_JOB_ID" ]; do sleep 0.2; done
start=$(date +%s)
timeout 20 srun --ntasks=1 --cpus-per-task=1 true
echo "unbounded: rc=$? after $(( $(date +%s) - start )) s"
start=$(date +%s)
srun --immediate={step_wait} --ntasks=1 --cpus-per-task=1 true
echo "bounded: rc=$? after $(( $(date +%s) - start )) s"
kill %1
"""


def test_a_step_that_cannot_start_in_its_allocation_fails_within_the_bound_instead_of_waiting(single_node, tmp_path):
    """A job SLURM requeued after a node failure can find the node holding its earlier step; srun then
    waits to the job's time limit ("step creation still disabled, retrying (Requested nodes are busy)").
    launch.py bounds every srun of a cell by cluster.step_wait_s (launcher.step_wait: srun --immediate)."""
    script = tmp_path / "blocked.sh"
    script.write_text(BLOCKED_STEP.format(step_wait=launcher.step_wait(5)))
    output = tmp_path / "blocked.out"
    submitted = subprocess.run(
        ["sbatch", "--parsable", "-D", str(tmp_path), "-c", "2", "--mem", "1000", "-o", str(output), str(script)],
        capture_output=True,
        text=True,
        env=single_node.env(),
    )
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip()
    said = lambda: output.read_text() if output.exists() else ""  # noqa: E731
    assert wait_for(lambda: "\nbounded:" in said(), 180), single_node.squeue()
    text = output.read_text()
    unbounded = re.search(r"unbounded: rc=(\d+) after (\d+) s", text)
    bounded = re.search(r"\nbounded: rc=(\d+) after (\d+) s", text)
    assert unbounded and unbounded.group(1) == "124", text  # srun was still retrying when timeout ended it
    assert bounded and bounded.group(1) != "0" and int(bounded.group(2)) < 20, text
    assert f"Unable to create step for job {job}" in text, text
