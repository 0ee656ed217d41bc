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
collective, trains its own, which test_tensorboard.py and test_steps_per_epoch.py read too. Both attempts of the interrupted
cell run with the other framework unimportable, and test_framework_isolation.py reads the resumed
cell: the isolation check costs no training of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
from conftest import (
    assert_curves_equal_records,
    cell_settings,
    checkpoint_epoch,
    launch_cell,
    made_once,
    rank_pids,
    read_records,
    start_cell,
    wait_for,
)
from paired_cells import placed, trained_once

pytestmark = pytest.mark.integration

# A collective timeout far beyond launch_cell's limit, for the cells whose next attempt has a rank
# that cannot load the checkpoint: a rank left waiting would hang the test past that limit instead
# of failing it by timeout, so only the agreement check can end it.
NEVER = {"collective_timeout_s": 3600}
# the PyTorch DDP cell writes curves with validation each epoch (test_tensorboard.py reads its
# reference), in ten steps per epoch, more than a pass over a rank's shard of 14 pairs (test_steps_per_epoch.py)
CURVES = {"tensorboard": True, "eval_every": 1, "steps_per_epoch": 10, **NEVER}
# (framework, backend, gpus, extra training settings): the smallest cell of each backend that
# has several ranks or replicas where the CPU allows (dp drives one device without GPUs); extra
# None: test_data_placement's device cell (paired_cells.placed), whose reference it trains anyway
CELLS = [
    # the resumed run rewrites the curves too; its first attempt serves the agreement test as well
    ("torch", "native", 2, CURVES),
    ("torch", "horovod", 2, None),
    ("torch", "dp", 1, None),
    ("tensorflow", "horovod", 2, None),
    ("tensorflow", "mirrored", 2, None),
]
CELL_IDS = [f"{f}-{b}" for f, b, _, _ in CELLS]
# the cells whose next attempt has a rank that cannot see rank 0's checkpoint: each framework's native
AGREEMENT_CELLS = {"torch": CELLS[0], "tensorflow": ("tensorflow", "native", 2, NEVER)}
EPOCHS = 2
OTHER_FRAMEWORK = {"torch": ["tensorflow", "tf_keras"], "tensorflow": ["torch"]}


def resumable_settings(framework: str, backend: str, gpus: int, extra: dict | None) -> dict:
    """EPOCHS epochs with a checkpoint after each (placed's cells: two, and the default checkpoint_every)."""
    if extra is None:
        settings = placed(framework, backend, gpus, "device")
    else:
        settings = cell_settings(framework, backend, gpus, epochs=EPOCHS, checkpoint_every=1, **extra)
    assert (settings["training"]["epochs"], settings["training"]["checkpoint_every"]) == (EPOCHS, 1)
    return settings


def blocked_path(folder: Path, framework: str) -> str:
    """A folder that shadows the other framework's packages with ones that refuse to import."""
    for package in OTHER_FRAMEWORK[framework]:
        (folder / package).mkdir(parents=True)
        (folder / package / "__init__.py").write_text(f"raise ImportError('{package} is blocked for this test')\n")
    return str(folder)


def stale_curves(out: Path) -> Path:
    """An earlier run's event file in the folder of a cell about to train (a retrained cell starts fresh)."""
    stale = out / "tensorboard" / "events.out.tfevents.1.an-earlier-run"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"")
    return stale


def uninterrupted_run(tmp_path_factory, data: Path, cell: tuple) -> Path:
    """The cell of CELLS trained to its end without interruption, once per test run for every test
    that asks: test_data_placement's cell where it is one, else this module's own, trained over an
    earlier run's curves (test_tensorboard.py reads that they are gone)."""
    framework, backend, gpus, extra = cell
    settings = resumable_settings(*cell)
    if extra is None:
        return trained_once(tmp_path_factory, settings, data)

    def make(folder: Path) -> None:
        stale_curves(folder / "cell")
        result = launch_cell(settings, data, folder / "cell")
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    return made_once(tmp_path_factory, f"uninterrupted-{framework}-{backend}-{gpus}", make) / "cell"


def isolated(framework: str, backend: str) -> bool:
    """Whether the cell's launcher runs with the other framework unimportable (TensorFlow's native
    launcher is torchrun, which is torch itself)."""
    return (framework, backend) != ("tensorflow", "native")


def first_attempt(tmp_path_factory, data: Path, cell: tuple, out: Path) -> None:
    """A copy in `out` of the cell's first attempt, interrupted at the start of its last epoch after
    the checkpoint before it, with the other framework unimportable (launchers and ranks inherit
    PYTHONPATH) where the launcher allows: made once per test run for every test that takes the
    cell on from there (the copy keeps the made one as it was); its output in launch.txt."""
    framework, backend, gpus, _ = cell

    def make(folder: Path) -> None:
        env = {"PYTHONPATH": blocked_path(folder / "blocked", framework)} if isolated(framework, backend) else {}
        output = interrupt_after_checkpoint(
            resumable_settings(*cell), data, folder / "cell", framework, EPOCHS - 1, **env
        )
        (folder / "launch.txt").write_text(output)

    made = made_once(tmp_path_factory, f"first-attempt-{framework}-{backend}-{gpus}", make)
    shutil.copytree(made / "cell", out, symlinks=True)
    shutil.copy(made / "launch.txt", out.parent / "first-attempt.txt")


def resumed_run(tmp_path_factory, data: Path, cell: tuple) -> Path:
    """The cell of CELLS taken on from its first attempt to its end, once per test run for every
    test that asks (this module's, test_framework_isolation.py's), with the other framework
    unimportable: the cell's folder, both attempts' output in first-attempt.txt and launch.txt."""
    framework, backend, gpus, _ = cell

    def make(folder: Path) -> None:
        first_attempt(tmp_path_factory, data, cell, folder / "cell")
        blocked = blocked_path(folder / "blocked", framework)
        result = launch_cell(resumable_settings(*cell), data, folder / "cell", PYTHONPATH=blocked)
        (folder / "launch.txt").write_text(result.stdout + result.stderr)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    return made_once(tmp_path_factory, f"resumed-{framework}-{backend}-{gpus}", make) / "cell"


def interrupt_after_checkpoint(settings: dict, data: Path, out: Path, framework: str, epoch: int, **env: str) -> str:
    """A first attempt that stops at the start of epoch `epoch` + 1, after `epoch`'s checkpoint,
    ended by SIGTERM to its launcher; no rank is left behind. Its output."""
    process = start_cell(settings, data, out, SCALEBENCH_FAULT=f"stall:{epoch + 1}", **env)
    try:  # (a cell that ends before its checkpoint ends the wait: its output says why)
        wait_for(lambda: checkpoint_epoch(out, framework) == epoch or process.poll() is not None, 300)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            output, _ = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert checkpoint_epoch(out, framework) == epoch, f"no checkpoint after epoch {epoch}:\n{output[-3000:]}"
    assert process.returncode != 0
    assert wait_for(lambda: not rank_pids(out), 30), "ranks left behind"
    return output


@pytest.mark.parametrize(("framework", "backend", "gpus", "extra"), CELLS, ids=CELL_IDS)
def test_interrupted_run_resumes_to_identical_results(prepared_data, tmp_path_factory, framework, backend, gpus, extra):
    reference = uninterrupted_run(tmp_path_factory, prepared_data, (framework, backend, gpus, extra))
    out = resumed_run(tmp_path_factory, prepared_data, (framework, backend, gpus, extra))
    assert f"resuming from checkpoint after epoch {EPOCHS - 1}" in (out.parent / "launch.txt").read_text()
    epochs_ref, final_ref, _ = read_records(reference)
    epochs_res, final_res, run_res = read_records(out)
    assert run_res["status"] == "ok" and run_res["resumed_from_epoch"] == EPOCHS - 1
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


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_a_rank_that_cannot_load_rank_0s_checkpoint_fails_the_cell_at_once(
    prepared_data, tmp_path_factory, tmp_path, framework
):
    cell = AGREEMENT_CELLS[framework]
    settings = resumable_settings(*cell)
    out = tmp_path / "cell"
    first_attempt(tmp_path_factory, prepared_data, cell, out)
    assert settings["training"]["collective_timeout_s"] == NEVER["collective_timeout_s"]
    # the next attempt: rank 1 does not see the cell's folder (a node-local folder on another node)
    result = launch_cell(settings, prepared_data, out, SCALEBENCH_FAULT="hide_checkpoint:1")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    reason = f"rank 0 resumes from its checkpoint after epoch {EPOCHS - 1}, but rank 1 found no usable checkpoint"
    assert reason in output, output[-3000:]
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed" and reason in run["error"]
    assert wait_for(lambda: not rank_pids(out), 10), "ranks left behind"
