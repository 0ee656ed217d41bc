"""One copy of a cell at a time (cluster/cell_holder.py): a job takes the cell or waits for the live job
that holds it; a local holder is a real process holding its lock, SLURM's answers come from squeue
and sacct (stand-in programs here; tests/cluster asks a real SLURM)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scalebench.cluster import cell_holder

HOLD_AND_SLEEP = """
import sys, time
from scalebench.cluster import cell_holder
held = cell_holder.hold(sys.argv[1], None, say=lambda line: None)
print(held.mine.generation, flush=True)
time.sleep(600)
"""


def start_holder(out: Path) -> subprocess.Popen:
    """Another process of this host that takes the cell and keeps it until it is killed."""
    env = {**os.environ, "PYTHONPATH": str(Path(cell_holder.__file__).parents[2])}
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD_AND_SLEEP, str(out)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert process.stdout.readline().strip() == "1"
    return process


def test_a_free_cell_is_taken_at_once_and_released_at_the_end(tmp_path):
    said = []
    held = cell_holder.hold(tmp_path, None, say=said.append, sleep=pytest.fail)
    assert (held.mine.generation, held.waited_for, held.previous, said) == (1, None, None, [])
    cell_holder.release(held)
    again = cell_holder.hold(tmp_path, None, say=said.append, sleep=pytest.fail)
    assert again.mine.generation == 2 and again.previous.released and again.waited_for is None


def test_a_live_local_holder_is_waited_for_and_its_end_frees_the_cell(tmp_path):
    other = start_holder(tmp_path)
    said, looks = [], []

    def sleep(seconds: float) -> None:
        looks.append(seconds)
        if len(looks) == 3:  # the other job ends (killed: it never released the cell)
            other.kill()
            other.wait()

    try:
        held = cell_holder.hold(tmp_path, None, say=said.append, sleep=sleep, poll_s=0.01)
    finally:
        other.kill()
    assert len(looks) == 3 and held.waited_for.pid == other.pid and held.mine.generation == 2
    assert said == [
        f"the cell is held by process {other.pid} on {held.mine.host} (its process holds the cell's lock): "
        "this job waits for it and trains nothing beside it, then adopts its outcome"
    ]


def slurm_holder(out: Path, job_id: str) -> None:
    folder = out / cell_holder.FOLDER
    folder.mkdir(parents=True)
    holder = cell_holder.Holder(1, job_id, "node9", 4242, "2030-01-01T00:00:00+00:00")
    cell_holder.holder_path(folder, 1).write_text(__import__("json").dumps(holder.__dict__))


def test_a_slurm_job_that_holds_the_cell_is_waited_for_while_slurm_says_it_runs(tmp_path):
    slurm_holder(tmp_path, "5")
    states = iter(["PENDING", "RUNNING", "RUNNING", "COMPLETING", "CANCELLED by 0"])
    said, looks = [], []
    held = cell_holder.hold(
        tmp_path, "11", say=said.append, sleep=looks.append, state_of=lambda job: next(states), poll_s=0.01
    )
    assert len(looks) == 4 and held.waited_for.slurm_job_id == "5" and held.mine.slurm_job_id == "11"
    assert said[0].startswith("the cell is held by SLURM job 5 (SLURM says PENDING): this job waits for it")


def test_a_job_slurm_no_longer_knows_is_not_waited_for_and_is_named(tmp_path):
    slurm_holder(tmp_path, "5")
    said = []
    held = cell_holder.hold(tmp_path, "11", say=said.append, sleep=pytest.fail, state_of=lambda job: None)
    assert held.waited_for is None and held.previous.slurm_job_id == "5"
    assert said == [
        "warning: the cell was held by SLURM job 5, which squeue and sacct no longer know (purged from "
        "accounting, or another cluster's): taken as not running"
    ]


def test_a_cell_without_holders_is_held_by_the_job_its_running_run_json_names(tmp_path):
    # a cell trained by a version before the holders, its job still running (an upgrade mid-study)
    (tmp_path / "run.json").write_text('{"status": "running", "slurm": {"job_id": "5"}, "hosts": ["n1"]}')
    states = iter(["RUNNING", "COMPLETED"])
    said, looks = [], []
    held = cell_holder.hold(tmp_path, "11", say=said.append, sleep=looks.append, state_of=lambda job: next(states))
    assert len(looks) == 1 and held.waited_for.slurm_job_id == "5" and held.mine.generation == 1
    assert said[0].startswith("the cell is held by SLURM job 5 (SLURM says RUNNING)")
    # one that SLURM no longer knows: not waited for, named
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "run.json").write_text('{"status": "running", "slurm": {"job_id": "7"}}')
    said.clear()
    held = cell_holder.hold(tmp_path / "other", "11", say=said.append, sleep=pytest.fail, state_of=lambda job: None)
    assert held.waited_for is None and said[0].startswith("warning: the cell was held by SLURM job 7, which squeue")
    # a cell that ended names no holder
    (tmp_path / "other" / "run.json").write_text('{"status": "ok", "slurm": {"job_id": "7"}}')
    assert cell_holder.recorded_holder(tmp_path / "other") is None


def test_a_requeued_job_follows_itself(tmp_path):
    slurm_holder(tmp_path, "5")
    held = cell_holder.hold(tmp_path, "5", say=pytest.fail, sleep=pytest.fail, state_of=pytest.fail)
    assert held.mine.generation == 2 and held.previous.slurm_job_id == "5" and held.waited_for is None


def test_only_one_job_takes_a_generation(tmp_path):
    folder = tmp_path / cell_holder.FOLDER
    folder.mkdir()
    first = cell_holder.create(folder, 1, "5")
    assert first is not None and cell_holder.create(folder, 1, "6") is None
    assert cell_holder.latest(folder).slurm_job_id == "5"
    assert cell_holder.locked(cell_holder.holder_path(folder, 1))  # by this process, until it closes the file
    first[1].close()
    assert not cell_holder.locked(cell_holder.holder_path(folder, 1))


def test_a_controller_that_does_not_answer_is_asked_again_then_taken_as_not_running(tmp_path, monkeypatch):
    slurm_holder(tmp_path, "5")
    monkeypatch.setattr(cell_holder, "PATIENCE_S", 0.05)

    def unanswered(job: str):
        raise cell_holder.SlurmUnanswered("squeue: error: Socket timed out on send/recv operation")

    said = []
    held = cell_holder.hold(tmp_path, "11", say=said.append, sleep=time.sleep, state_of=unanswered, poll_s=0.02)
    assert held.waited_for is None and held.mine.generation == 2
    assert said[0].startswith("the cell's holder SLURM job 5: SLURM gave no answer (squeue: error: Socket timed out")
    assert said[-1] == "warning: SLURM gave no answer about SLURM job 5 for 0 s: taken as not running"


def stand_in(folder: Path, name: str, script: str) -> None:
    program = folder / name
    program.write_text("#!/bin/sh\n" + script)
    program.chmod(0o755)


@pytest.mark.parametrize(
    ("squeue", "sacct", "state"),
    [
        ("echo RUNNING; exit 0", "exit 1", "RUNNING"),
        (
            'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1',
            'echo "sacct: error: Slurm accounting storage is disabled" >&2; exit 1',
            None,
        ),
        ("exit 0", 'printf "CANCELLED by 0\\n"', "CANCELLED"),
    ],
)
def test_slurm_s_state_of_a_job_is_squeue_s_else_sacct_s_else_unknown(tmp_path, monkeypatch, squeue, sacct, state):
    stand_in(tmp_path, "squeue", squeue)
    stand_in(tmp_path, "sacct", sacct)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    found = cell_holder.slurm_job_state("5")
    assert (found.split()[0] if found else None) == state


def test_a_busy_squeue_is_no_verdict(tmp_path, monkeypatch):
    stand_in(
        tmp_path, "squeue", 'echo "squeue: error: Unable to contact slurm controller (connect failure)" >&2; exit 1'
    )
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(cell_holder.SlurmUnanswered, match="Unable to contact slurm controller"):
        cell_holder.slurm_job_state("5")


def test_without_flocks_a_local_holder_lives_while_its_process_does(tmp_path, monkeypatch):
    # a file system that takes no flocks (Lustre mounted without them): the holder's process id on this host
    def no_flocks(handle, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(cell_holder.fcntl, "flock", no_flocks)
    folder = tmp_path / cell_holder.FOLDER
    folder.mkdir()
    mine, _ = cell_holder.create(folder, 1, None)
    assert cell_holder.locked(cell_holder.holder_path(folder, 1)) is None
    assert cell_holder.liveness(mine, folder, None) == (True, "its process runs")
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = cell_holder.Holder(1, None, mine.host, int(ended.stdout), mine.since)
    assert cell_holder.liveness(gone, folder, None) == (False, "")
