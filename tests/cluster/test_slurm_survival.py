"""A study survives its cluster and its user's session, on a real one-node SLURM cluster: a busy
controller, a Snakemake killed and started again while its job trains, a job SLURM requeues, a full
disk. Each test checks the cell's records, not only the exit code. (A node lost under a 2-node
cell: test_slurm_lost_node.py.)"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess

import pytest
from conftest import checkpoint_epoch, kill_if_running, wait_for
from scalebench import records

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

pytestmark = pytest.mark.cluster

CELL = "results/runs/torch/native/g1/s1"
TARGET = f"{CELL}/run.json"  # the cell only: these tests are about its train job, not the analysis


@pytest.fixture
def data(slurm, tmp_path_factory):
    return cluster_data(slurm, tmp_path_factory)


BUSY_SBATCH = """#!/bin/sh
# a controller too busy to answer the first {answers} asks of each kind (the pre-flight's sbatch
# --test-only, a submission); then the real sbatch
dir=$(dirname "$0")
case "$*" in *--test-only*) kind=test-only ;; *) kind=submit ;; esac
exec 9>>"$dir/lock"
flock 9
count=$(cat "$dir/$kind" 2>/dev/null || echo 0)
echo $((count + 1)) > "$dir/$kind"
flock -u 9
if [ "$count" -lt {answers} ]; then
  echo "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation" >&2
  exit 1
fi
exec {sbatch} "$@"
"""


def busy_sbatch(folder, answers: int) -> dict:
    """An sbatch first on PATH that answers like a busy controller `answers` times per kind."""
    folder.mkdir()
    wrapper = folder / "sbatch"
    wrapper.write_text(BUSY_SBATCH.format(answers=answers, sbatch=shutil.which("sbatch")))
    wrapper.chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def epoch_records(workdir, cell: str = CELL) -> tuple[list[dict], list[dict]]:
    lines, complete = records.read_metrics(workdir / cell / "metrics.jsonl")
    assert complete
    return [line for line in lines if line["type"] == "epoch"], [line for line in lines if line["type"] == "final"]


def test_a_busy_controller_is_asked_again_without_using_a_retry(single_node, tmp_path, data):
    env = busy_sbatch(tmp_path / "bin", answers=2)
    result = run_slurm_snakemake(single_node, with_data(tmp_path, data), cluster_config(gpus=(1,)), TARGET, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, describe(result, tmp_path)
    # the pre-flight asked three times, logging each new ask
    pre_flight = "slurm check: sbatch --test-only got no verdict (the controller did not answer in time: sbatch: error"
    assert output.count(pre_flight) == 2 and "accepted 1 of the 1 distinct request(s)" in output, output[-4000:]
    # the study's first submission (its cell's job) too, without a job error or a retry
    asked = [line for line in output.splitlines() if "sbatch got no verdict on rule train (" in line]
    assert len(asked) == 2, output[-4000:]
    assert "asking again in 2 s (ask 2," in asked[0] and "asking again in 4 s (ask 3," in asked[1]
    assert "Error in rule" not in output and "Trying to restart" not in output
    assert (tmp_path / "bin" / "submit").read_text().strip() == "3"  # 2 busy answers, then the job once
    run = read_run(tmp_path, "torch/native/g1/s1")
    assert run["status"] == "ok" and run["slurm"]["job_id"] in slurm_jobs(tmp_path)["torch_native_1_1"]
    epochs, finals = epoch_records(tmp_path)
    assert [e["epoch"] for e in epochs] == [1, 2, 3] and [f["status"] for f in finals] == ["ok"]


def test_a_restarted_snakemake_waits_for_the_job_its_killed_predecessor_left_and_adopts_its_outcome(
    single_node, tmp_path, data
):
    config = cluster_config(gpus=(1,))
    with_data(tmp_path, data)
    gate = tmp_path / "gate"  # the first job's rank 0 waits there before its first epoch (faults.meet)
    env = {"SCALEBENCH_FAULT": f"meet:{gate}:2"}
    first = start_slurm_snakemake(single_node, tmp_path, config, TARGET, env=env)
    second = None
    try:
        assert wait_for(lambda: gate.is_dir() and len(list(gate.iterdir())) == 1, 600), "the first job did not start"
        job = read_run(tmp_path, "torch/native/g1/s1")["slurm"]["job_id"]
        first.send_signal(signal.SIGKILL)  # as a dropped login session ends it; its SLURM job runs on
        first.communicate(timeout=60)
        unlocked = run_slurm_snakemake(single_node, tmp_path, config, "--unlock", env=env)
        assert unlocked.returncode == 0, describe(unlocked, tmp_path)
        second = start_slurm_snakemake(single_node, tmp_path, config, TARGET, env=env)
        log = tmp_path / CELL / "train.log"  # the second job's: its Snakemake removed the first one's name
        waiting = f"the cell is held by SLURM job {job} (its process holds the cell's lock): this job waits for it"
        assert wait_for(lambda: log.exists() and waiting in log.read_text(), 600), squeue_and_log(single_node, log)
        (gate / "open").touch()  # the first job trains on
        output, _ = second.communicate(timeout=600)
    finally:
        kill_if_running(first, second)
    assert second.returncode == 0, output[-5000:]
    assert f"torch/native/g1/s1 is being trained by SLURM job {job} (its job still runs)" in output, output[-5000:]
    own, _, kept = log.read_text().partition(f"launch: the log of SLURM job {job} (")
    assert f"SLURM job {job} finished the cell ok: its outcome is this job's, nothing retrained" in own, own
    assert "launch (slurm): " not in own and "launch (slurm): " in kept  # the second job started no ranks
    jobs = slurm_jobs(tmp_path)["torch_native_1_1"]
    assert len(jobs) == 2 and jobs[0] == job, jobs
    run = read_run(tmp_path, "torch/native/g1/s1")
    assert run["status"] == "ok" and run["slurm"]["job_id"] == job  # the first job's record, whole
    epochs, finals = epoch_records(tmp_path)
    assert [e["epoch"] for e in epochs] == [1, 2, 3] and [f["status"] for f in finals] == ["ok"]


def squeue_and_log(cluster, log) -> str:
    return f"{cluster.squeue()}\n{log.read_text()[-3000:] if log.exists() else 'no train.log'}"


def test_a_job_slurm_requeues_resumes_from_its_checkpoint_and_records_each_epoch_once(single_node, tmp_path, data):
    config = cluster_config(gpus=(1,))
    with_data(tmp_path, data)
    config["training"].update(epochs=4, checkpoint_every=1)
    # the run stops for good at the start of epoch 3, after epoch 2's checkpoint (only a run that
    # did not resume stalls), so SLURM requeues it mid-run however fast the machine is
    process = start_slurm_snakemake(single_node, tmp_path, config, TARGET, env={"SCALEBENCH_FAULT": "stall:3"})
    try:
        log = tmp_path / CELL / "train.log"
        stalled = lambda: log.exists() and "stalling at epoch 3" in log.read_text()  # noqa: E731
        assert wait_for(stalled, 600), squeue_and_log(single_node, log)
        assert checkpoint_epoch(tmp_path / CELL, "torch") == 2
        job = read_run(tmp_path, "torch/native/g1/s1")["slurm"]["job_id"]
        # the cluster does not requeue by default (JobRequeue=0): profiles/slurm submitted it requeueable
        shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, env=single_node.env())
        assert " Requeue=1 " in f" {shown.stdout.replace(chr(10), ' ')} ", shown.stdout
        requeued = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, env=single_node.env())
        assert requeued.returncode == 0, requeued.stderr
        # SLURM holds a requeued batch job back for about two minutes; the test lets it start now
        assert wait_for(lambda: start_now(single_node, job), 120), single_node.squeue()
        output, _ = process.communicate(timeout=600)
    finally:
        kill_if_running(process)
    said = describe(subprocess.CompletedProcess(process.args, process.returncode, output, ""), tmp_path)
    assert process.returncode == 0, said
    assert "Trying to restart" not in output, said  # SLURM ran it again, not Snakemake
    assert slurm_jobs(tmp_path)["torch_native_1_1"] == [job]  # one SLURM job id, run twice
    run = read_run(tmp_path, "torch/native/g1/s1")
    assert (run["status"], run["slurm"]["job_id"], run["resumed_from_epoch"]) == ("ok", job, 2), run
    assert f"launch: SLURM job {job} runs again (requeued): it goes on from the checkpoint" in log.read_text()
    epochs, finals = epoch_records(tmp_path)
    assert [e["epoch"] for e in epochs] == [1, 2, 3, 4] and len(finals) == 1  # each epoch once
    assert [e["resumed"] for e in epochs] == [False, False, True, False]  # where it resumed


def start_now(cluster, job: str) -> bool:
    """Whether the pending job `job` was made eligible to start at once (False while it is not pending yet)."""
    state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, env=cluster.env())
    if state.stdout.strip() != "PENDING":
        return False
    update = ["scontrol", "update", f"JobId={job}", "StartTime=now"]
    return subprocess.run(update, capture_output=True, env=cluster.env()).returncode == 0


def file_digests(folder, dates: bool = True) -> dict[str, tuple]:
    """Each file of `folder`: its content's digest and (with `dates`) its modification time."""
    return {
        str(path.relative_to(folder)): (hashlib.sha256(path.read_bytes()).hexdigest(),)
        + ((path.stat().st_mtime,) if dates else ())
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.mark.waits(140)
def test_a_full_disk_ends_the_cell_naming_the_file_and_leaves_other_cells_and_the_last_checkpoint(
    single_node, tmp_path, data
):
    training = {"epochs": 3, "checkpoint_every": 1}
    config = cluster_config(gpus=(1,))
    config["training"].update(training)
    first = run_slurm_snakemake(single_node, with_data(tmp_path, data), config, TARGET)
    assert first.returncode == 0, describe(first, tmp_path)
    before = file_digests(tmp_path / CELL)
    # now g2 too, whose rank 0 may write no file above 64 kB from epoch 2 on (SCALEBENCH_FAULT=disk_full:
    # RLIMIT_FSIZE, as a full quota), in its first run only: its retry has the space back
    config = cluster_config(gpus=(1, 2))
    config["training"].update(training)
    g2 = "results/runs/torch/native/g2/s1"
    env = {"SCALEBENCH_FAULT": "disk_full:2:64000"}
    result = run_slurm_snakemake(single_node, tmp_path, config, TARGET, f"{g2}/run.json", env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, describe(result, tmp_path)
    words = f"could not write {g2}/checkpoint.pt: [Errno 27] File too large"
    # the failed attempt said which file and why (its log, kept under its holder's name, and Snakemake's output)
    assert f"rank 0: failed: WriteFailed: {words}" in (tmp_path / g2 / ".holders" / "1.log").read_text()
    assert words in output and output.count("Trying to restart") == 1, output[-5000:]
    # epoch 1's checkpoint stood, readable: the retry resumed from it; each epoch recorded once
    run = read_run(tmp_path, "torch/native/g2/s1")
    assert (run["status"], run["resumed_from_epoch"]) == ("ok", 1), run
    epochs, finals = epoch_records(tmp_path, g2)
    assert [e["epoch"] for e in epochs] == [1, 2, 3] and [f["status"] for f in finals] == ["ok"]
    assert len(slurm_jobs(tmp_path)["torch_native_2_1"]) == 2
    # the other cell: not run again, not a byte or a date changed
    assert len(slurm_jobs(tmp_path)["torch_native_1_1"]) == 1 and file_digests(tmp_path / CELL) == before
    assert json.loads((tmp_path / CELL / "run.json").read_text())["status"] == "ok"
