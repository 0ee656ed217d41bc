"""run.json and the epoch records say what the steps did, read from the framework: the rate the
optimizer held, what was compiled; a cell whose steps did otherwise than it asked ends refused at
its first step, naming both (train/observed.py). Each cell runs as the train rule runs it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import assert_refused, cell_settings, launch_cell, made_once, read_records
from paired_cells import SCHEDULE, trained_once

pytestmark = pytest.mark.integration

FRAMEWORKS = ["torch", "tensorflow"]
# SCHEDULE: a rate that changes between epochs, so that an optimizer left at any one epoch's rate (or
# at base_lr, where it starts) holds another than the schedule's in some epoch
SCHEDULED = [0.001, 0.0005]
# The first step's faults: the optimizer handed twice the rate (lr:1:2), the steps run without autocast
# or the Keras policy (precision_off), and for PyTorch a compile that Dynamo skips (TORCHDYNAMO_DISABLE)
FIRST_STEP_FAULTS = {"SCALEBENCH_FAULT": "lr:1:2,precision_off"}
FIRST_STEP_FAULTS_TORCH = {**FIRST_STEP_FAULTS, "TORCHDYNAMO_DISABLE": "1"}


def refused_at_its_first_step(tmp_path_factory, data: Path, framework: str) -> tuple[subprocess.CompletedProcess, Path]:
    """(launch.py's outcome, folder) of the framework's one-rank bf16 cell of SCHEDULE (PyTorch's
    compiled) whose first step does otherwise than asked in every way the check reads, with
    FIRST_STEP_FAULTS: the check names each problem it finds in the one refusal (observed.check), so
    the tests of each fault read this cell, made once per run, and each finds its own words."""
    torch = framework == "torch"
    settings = cell_settings(
        framework, "native", 1, **SCHEDULE, precision="bf16", **({"compile": True} if torch else {})
    )

    def make(folder: Path) -> None:
        result = launch_cell(
            settings, data, folder / "cell", **(FIRST_STEP_FAULTS_TORCH if torch else FIRST_STEP_FAULTS)
        )
        outcome = {"returncode": result.returncode, "stdout": result.stdout, "stderr": result.stderr}
        (folder / "outcome.json").write_text(json.dumps(outcome))

    folder = made_once(tmp_path_factory, f"observed-first-step-faults-{framework}", make)
    outcome = json.loads((folder / "outcome.json").read_text())
    return subprocess.CompletedProcess(args=[], **outcome), folder / "cell"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_each_epoch_records_the_rate_its_optimizer_held_beside_the_schedules(
    prepared_data, tmp_path_factory, framework
):
    # the eager cell test_compiled_steps compares with (PyTorch's), trained once per run (paired_cells.py)
    out = trained_once(tmp_path_factory, cell_settings(framework, "native", 1, **SCHEDULE), prepared_data)
    epochs, final, run = read_records(out)
    assert final["status"] == "ok", run.get("reason")  # the optimizer held another rate: refused
    assert [e["scheduled_lr"] for e in epochs] == SCHEDULED
    # TensorFlow's rate lives in a float32 variable: read back, it is the float32 nearest
    assert [e["lr"] for e in epochs] == pytest.approx(SCHEDULED, rel=1e-7)
    assert run["compute_dtype"] == "float32" and run["compiled"]["graphs"] == 0


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize(("epoch", "when"), [(1, "after the first step"), (2, "after the epoch's steps")])
def test_an_optimizer_handed_another_rate_than_the_schedules_refuses_the_cell(
    prepared_data, tmp_path, tmp_path_factory, framework, epoch, when
):
    # SCALEBENCH_FAULT=lr:EPOCH:2 hands the optimizer twice the schedule's rate in that epoch, as a
    # broken wiring would: the rate read back after the run's first step, or after each epoch's
    # steps, is not the schedule's. Epoch 1's is the cell of every first-step fault.
    if epoch == 1:
        result, out = refused_at_its_first_step(tmp_path_factory, prepared_data, framework)
    else:
        settings = cell_settings(framework, "native", 1, **SCHEDULE)
        result, out = launch_cell(settings, prepared_data, tmp_path, SCALEBENCH_FAULT=f"lr:{epoch}:2"), tmp_path
    assert result.returncode == 0, result.stderr[-3000:]  # refused: a result, no retry would change it
    scheduled = SCHEDULED[epoch - 1]
    message = f"sets {scheduled:g} in epoch {epoch}, but the optimizer held {2 * scheduled:g} {when}"
    epochs, final, run = read_records(out)
    assert (run["status"], final["status"]) == ("refused", "refused"), run["status"]
    assert message in run["reason"], run["reason"]
    assert [e["epoch"] for e in epochs] == list(range(1, epoch))  # the epochs before it stand


def test_compile_asked_but_nothing_compiled_refuses_the_cell_at_its_first_step(prepared_data, tmp_path_factory):
    # TORCHDYNAMO_DISABLE=1 makes torch.compile hand the model back as it is, without a word: the
    # steps would run eagerly under a cell that says compiled (the cell of every first-step fault)
    result, out = refused_at_its_first_step(tmp_path_factory, prepared_data, "torch")
    assert result.returncode == 0, result.stderr[-3000:]
    assert_refused(result, out, "training.compile is true, but torch.compile (inductor) compiled no graph")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_steps_without_autocast_or_the_keras_policy_refuse_a_bf16_cell(prepared_data, tmp_path_factory, framework):
    # SCALEBENCH_FAULT=precision_off: the steps run without autocast (PyTorch) or the mixed policy
    # (TensorFlow), as a broken wiring would; the dtype read from the first step is float32, so the
    # cell is refused rather than reported as bf16 (the cell of every first-step fault)
    result, out = refused_at_its_first_step(tmp_path_factory, prepared_data, framework)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_refused(
        result, out, "training.precision is bf16 (bfloat16), but the model computed in float32 in its first step"
    )
