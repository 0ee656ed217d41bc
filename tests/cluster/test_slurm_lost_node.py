"""A node lost under a 2-node cell, on a real two-node SLURM cluster: the cell fails fast (its rank on
the other node fails on its peer's loss at once, not at the collective's timeout, and the job ends
when SLURM finds the node gone), it runs again under either requeue policy, resumes from its
checkpoint with each epoch recorded once, and the cell that ran on the other node is untouched.
slurm-no-requeue: Snakemake resubmits it. slurm-requeue (profiles/slurm's): SLURM runs the same job
id again; where the node came back still holding the job's earlier step (its slurmd killed, the node
not rebooted), that run's srun cannot start the ranks and gives up after cluster.step_wait_s, and
Snakemake's retry runs the cell as a new job. The test cluster requeues nothing by default
(JobRequeue=0)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import checkpoint_epoch, kill_if_running, wait_for
from scalebench import records

from .conftest import (
    cluster_config,
    cluster_data,
    profile_with,
    read_run,
    slurm_jobs,
    start_slurm_snakemake,
    with_data,
)
from .test_slurm_survival import file_digests, start_now

pytestmark = pytest.mark.cluster

RUNNING = ("RUNNING", "COMPLETING", "CONFIGURING")
ONE = "results/runs/torch/native/g1/s1"
TWO = "results/runs/torch/native/g2/s1"


@pytest.fixture
def data(slurm, tmp_path_factory):
    return cluster_data(slurm, tmp_path_factory)


def job_processes(node: str, job: str) -> list[int]:
    """The processes of SLURM job `job` on `node` (several slurmd share this host): its tasks, which
    carry the node's name in their environment, and the slurmstepd that started each."""
    found = []
    for folder in Path("/proc").iterdir():
        try:
            variables = set((folder / "environ").read_bytes().split(b"\0"))
            parent = int((folder / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if {f"SLURMD_NODENAME={node}".encode(), f"SLURM_JOB_ID={job}".encode()} <= variables:
            found.append(int(folder.name))
            if "slurmstepd" in Path(f"/proc/{parent}/cmdline").read_text(errors="replace"):
                found.append(parent)
    return sorted(set(found))


def job_state(cluster, job: str) -> str:
    result = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, env=cluster.env())
    return result.stdout.strip()


@pytest.mark.waits(80)
@pytest.mark.parametrize("policy", ["slurm-no-requeue", "slurm-requeue"])
def test_a_cell_that_loses_a_node_fails_fast_resumes_from_its_checkpoint_and_the_other_cell_is_untouched(
    two_nodes, tmp_path, data, policy
):
    # g2: a rank on each node; g1 on one node; srun gives up starting ranks after 20 s
    config = cluster_config(gpus=(1, 2), ranks_per_node=1, step_wait_s=20)
    # g2's rank 1 stops for good at the start of epoch 3, after epoch 2's checkpoint, in its first run
    # only (g1 has no rank 1), so the node is lost mid-run however fast the machine is; its rank 0
    # waits for it in a collective whose timeout (600 s) the cell must not need to reach
    config["training"].update(epochs=4, checkpoint_every=1, collective_timeout_s=600)
    env = {"SCALEBENCH_FAULT": "stall_rank:1:3"}
    with_data(tmp_path, data)
    targets = (f"{ONE}/run.json", f"{TWO}/run.json")
    # slurm-no-requeue: SLURM never runs the job again, Snakemake's retry does; slurm-requeue
    # (profiles/slurm's): SLURM runs it again under its id
    profile = None
    if policy == "slurm-no-requeue":
        profile = profile_with(tmp_path / "profile", {"slurm-requeue": "slurm-no-requeue: true"})
    process = start_slurm_snakemake(two_nodes, tmp_path, config, *targets, env=env, profile=profile)
    try:
        stalled = lambda: "stalling at epoch 3" in read_text(tmp_path / TWO / "train.log")  # noqa: E731
        assert wait_for(lambda: stalled() and job_done(two_nodes, tmp_path / ONE), 600), two_nodes.squeue()
        assert checkpoint_epoch(tmp_path / TWO, "torch") == 2
        job = read_run(tmp_path, "torch/native/g2/s1")["slurm"]["job_id"]
        first_node, second_node = read_run(tmp_path, "torch/native/g2/s1")["hosts"]
        assert read_run(tmp_path, "torch/native/g1/s1")["hosts"] == [first_node]  # the other node's cell
        # its contents: Snakemake touches a finished job's outputs once it notices, maybe only later
        untouched = file_digests(tmp_path / ONE, dates=False)
        # the second node dies: its slurmd and the cell's processes there, at once
        victims = job_processes(second_node, job)
        assert victims, f"no process of job {job} on {second_node}"
        two_nodes.kill_slurmd(second_node)
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        # until SLURM finds the node gone and ends the job (squeue then no longer lists it as running)
        assert wait_for(lambda: job_state(two_nodes, job) not in RUNNING, 300), two_nodes.squeue()
        two_nodes.start_slurmd(second_node)  # the node comes back, for the cell's next job
        if policy == "slurm-requeue":  # SLURM holds a requeued job back for a while; the test lets it start
            assert wait_for(lambda: start_now(two_nodes, job), 120), two_nodes.squeue()
        output, _ = process.communicate(timeout=900)
    finally:
        kill_if_running(process)
    assert process.returncode == 0, output[-5000:]
    # its rank 0 failed on the lost peer at once (not at the collective's 600 s timeout), and the job
    # ended when SLURM found the node gone (NODE_FAIL, the plugin's message)
    first_log = (tmp_path / TWO / ".holders" / "1.log").read_text()
    assert "rank 0: failed: RuntimeError" in first_log and "Connection closed by peer" in first_log, first_log[-3000:]
    assert f"Node failure on {second_node}" in first_log and "timed out" not in first_log.lower()
    jobs = slurm_jobs(tmp_path)["torch_native_2_1"]
    holder_logs = "".join(log.read_text() for log in sorted((tmp_path / TWO / ".holders").glob("*.log")))
    if policy == "slurm-no-requeue":
        assert f"SLURM-job '{job}' failed due to a node failure" in output, output[-5000:]
        assert len(jobs) == 2 and jobs[0] == job and output.count("Trying to restart") == 1, jobs
    elif jobs == [job]:  # SLURM's second run of the job trained the cell; Snakemake submitted nothing
        assert "Trying to restart" not in output, output[-5000:]
    else:  # SLURM's second run could not start its ranks beside the stale step: it failed, bounded
        assert f"Unable to create step for job {job}" in holder_logs, holder_logs[-5000:]
        assert len(jobs) == 2 and jobs[0] == job and output.count("Trying to restart") == 1, (jobs, output[-5000:])
    run = read_run(tmp_path, "torch/native/g2/s1")
    assert (run["status"], run["resumed_from_epoch"], run["hosts"]) == ("ok", 2, [first_node, second_node]), run
    lines, complete = records.read_metrics(tmp_path / TWO / "metrics.jsonl")
    epochs = [line for line in lines if line["type"] == "epoch"]
    assert complete and [e["epoch"] for e in epochs] == [1, 2, 3, 4]
    assert [e["resumed"] for e in epochs] == [False, False, True, False]
    # the cell on the other node: one job, not a byte changed
    assert len(slurm_jobs(tmp_path)["torch_native_1_1"]) == 1 and file_digests(tmp_path / ONE, dates=False) == untouched


def job_done(cluster, folder: Path) -> bool:
    """Whether the cell in `folder` finished ok and its SLURM job ended (its Snakemake has touched the outputs)."""
    text = read_text(folder / "run.json")
    if '"status": "ok"' not in text:
        return False
    return job_state(cluster, json.loads(text)["slurm"]["job_id"]) not in RUNNING


def read_text(path: Path) -> str:
    return path.read_text() if path.exists() else ""
