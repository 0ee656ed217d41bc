"""An interrupted cell resumes from its checkpoint to the results of an uninterrupted one, for
every backend; a rank that cannot load rank 0's checkpoint fails the cell at once (train/resume.py).

Each cell runs as the train rule runs it (launch.py and the backend's launcher). The first attempt
stops for good at the start of its last epoch (SCALEBENCH_FAULT=stall), after the checkpoint
before it, and is interrupted as SLURM does at a time limit (SIGTERM to the launcher, which passes
it on to the ranks), so it cannot finish first however fast the machine is. FSDP's resume (whole
tensors in its checkpoint) is in test_torch_backends.py, MultiWorkerMirrored's after a hard kill
of one worker (the other failing on its own) in test_tf_training.py.

The uninterrupted reference of each cell is the one test_data_placement trains anyway (its
device cell, paired_cells.placed: two epochs with a checkpoint after each, as here), read once per
test run (paired_cells.trained_once); the PyTorch DDP cell, which writes curves and never times out a
collective, trains its own, which test_tensorboard.py and test_steps_per_epoch.py read too.
test_framework_isolation.py reads both attempts of the resumed cell (each in its framework's own
environment): the isolation check costs no training of its own. The agreement test takes on attempts made
for other tests: the DDP cell's first attempt, and test_tf_training.py's MultiWorkerMirrored attempt
whose worker was killed after a checkpoint. The cells and their trainings are in paired_cells.py,
where those modules find them.
"""

from __future__ import annotations

import json

import pytest
from conftest import assert_curves_equal_records, checkpoint_epoch, launch_cell, rank_pids, read_records, wait_for
from paired_cells import (
    EPOCHS,
    KILLED_AFTER,
    NEVER,
    RESUMED_CELLS,
    RESUMED_IDS,
    first_attempt,
    killed_worker_attempt,
    multiworker_settings,
    resumable_settings,
    resumed_run,
    uninterrupted_run,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("framework", "backend", "gpus", "extra"), RESUMED_CELLS, ids=RESUMED_IDS)
def test_interrupted_run_resumes_to_identical_results(prepared_data, tmp_path_factory, framework, backend, gpus, extra):
    reference = uninterrupted_run(tmp_path_factory, prepared_data, (framework, backend, gpus, extra))
    out = resumed_run(tmp_path_factory, prepared_data, (framework, backend, gpus, extra))
    assert f"resuming from checkpoint after epoch {EPOCHS - 1}" in (out.parent / "launch.txt").read_text()
    epochs_ref, final_ref, _ = read_records(reference)
    epochs_res, final_res, run_res = read_records(out)
    assert run_res["status"] == "ok" and run_res["resumed_from_epoch"] == EPOCHS - 1
    # what the cell held: both attempts' job walls, the first's as its launch.py recorded it when stopped
    assert run_res["job_attempts"] == 2 and run_res["job_s_reason"] is None
    assert [e["epoch"] for e in epochs_res] == list(range(1, EPOCHS + 1))
    # the record says where the run resumed: its first epoch after the checkpoint warmed up again
    assert [e["resumed"] for e in epochs_res] == [False] * (EPOCHS - 1) + [True]
    assert not any(e["resumed"] for e in epochs_ref)
    # the same model, optimizer, generators and sample order: the same numbers, to the bit
    assert [e["loss"] for e in epochs_res] == [e["loss"] for e in epochs_ref]
    assert (final_res["iou"], final_res["test_loss"]) == (final_ref["iou"], final_ref["test_loss"])
    assert checkpoint_epoch(out, framework) is None, "a finished cell keeps no checkpoint (a rerun starts fresh)"
    if extra and extra.get("tensorboard"):
        # the curves hold every epoch once, as metrics.jsonl does: the resumed run rewrote the
        # epochs before it into new event files in place of the interrupted run's
        assert len(list((out / "tensorboard").iterdir())) == 1
        assert_curves_equal_records(out / "tensorboard", epochs_res)


def interrupted_native_cell(tmp_path_factory, data, framework: str, out) -> tuple[dict, int]:
    """A copy in `out` of an attempt of the framework's two-rank native cell that ended after a
    checkpoint, made once per run for another test too, with the cell's settings and the epoch of
    that checkpoint: the DDP cell's first attempt (test_interrupted_run_resumes_to_identical_results
    resumes it), whose collective timeout (NEVER) leaves only the agreement check to end a rank left
    waiting; the MultiWorkerMirrored attempt whose worker was killed after the checkpoint of epoch 2
    (test_tf_training.py resumes it), whose 30 s timeout would end such a rank with a timeout error
    of its own, never the agreement's reason that the test reads."""
    if framework == "torch":
        cell = RESUMED_CELLS[0]
        first_attempt(tmp_path_factory, data, cell, out)
        settings = resumable_settings(*cell)
        assert settings["training"]["collective_timeout_s"] == NEVER["collective_timeout_s"]
        return settings, EPOCHS - 1
    killed_worker_attempt(tmp_path_factory, data, out)
    return multiworker_settings(), KILLED_AFTER


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_a_rank_that_cannot_load_rank_0s_checkpoint_fails_the_cell_at_once(
    prepared_data, tmp_path_factory, tmp_path, framework
):
    out = tmp_path / "cell"
    settings, epoch = interrupted_native_cell(tmp_path_factory, prepared_data, framework, out)
    # the next attempt: rank 1 does not see the cell's folder (a node-local folder on another node)
    result = launch_cell(settings, prepared_data, out, SCALEBENCH_FAULT="hide_checkpoint:1")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    reason = f"rank 0 resumes from its checkpoint after epoch {epoch}, but rank 1 found no usable checkpoint"
    assert reason in output, output[-3000:]
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed" and reason in run["error"]
    assert wait_for(lambda: not rank_pids(out), 10), "ranks left behind"
