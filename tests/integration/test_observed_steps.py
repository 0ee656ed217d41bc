"""run.json and the epoch records say what the steps did, read from the framework: the rate the
optimizer held, what was compiled; a cell whose steps did otherwise than it asked ends refused at
its first step, naming both (train/observed.py). Each cell runs as the train rule runs it."""

from __future__ import annotations

import pytest
from conftest import assert_refused, cell_settings, launch_cell, read_records
from paired_cells import SCHEDULE, trained_once

pytestmark = pytest.mark.integration

FRAMEWORKS = ["torch", "tensorflow"]
# SCHEDULE: a rate that changes between epochs, so that an optimizer left at any one epoch's rate (or
# at base_lr, where it starts) holds another than the schedule's in some epoch
SCHEDULED = [0.001, 0.0005]


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
    prepared_data, tmp_path, framework, epoch, when
):
    # SCALEBENCH_FAULT=lr:EPOCH:2 hands the optimizer twice the schedule's rate in that epoch, as a
    # broken wiring would: the rate read back after the run's first step, or after each epoch's
    # steps, is not the schedule's
    settings = cell_settings(framework, "native", 1, **SCHEDULE)
    result = launch_cell(settings, prepared_data, tmp_path, SCALEBENCH_FAULT=f"lr:{epoch}:2")
    assert result.returncode == 0, result.stderr[-3000:]  # refused: a result, no retry would change it
    scheduled = SCHEDULED[epoch - 1]
    message = f"sets {scheduled:g} in epoch {epoch}, but the optimizer held {2 * scheduled:g} {when}"
    epochs, final, run = read_records(tmp_path)
    assert (run["status"], final["status"]) == ("refused", "refused"), run["status"]
    assert message in run["reason"], run["reason"]
    assert [e["epoch"] for e in epochs] == list(range(1, epoch))  # the epochs before it stand


def test_compile_asked_but_nothing_compiled_refuses_the_cell_at_its_first_step(prepared_data, tmp_path):
    # TORCHDYNAMO_DISABLE=1 makes torch.compile hand the model back as it is, without a word: the
    # steps would run eagerly under a cell that says compiled
    settings = cell_settings("torch", "native", 1, epochs=1, compile=True)
    result = launch_cell(settings, prepared_data, tmp_path, TORCHDYNAMO_DISABLE="1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert_refused(result, tmp_path, "training.compile is true, but torch.compile (inductor) compiled no graph")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_steps_without_autocast_or_the_keras_policy_refuse_a_bf16_cell(prepared_data, tmp_path, framework):
    # SCALEBENCH_FAULT=precision_off: the steps run without autocast (PyTorch) or the mixed policy
    # (TensorFlow), as a broken wiring would; the dtype read from the first step is float32, so the
    # cell is refused rather than reported as bf16
    settings = cell_settings(framework, "native", 1, epochs=1, precision="bf16")
    result = launch_cell(settings, prepared_data, tmp_path, SCALEBENCH_FAULT="precision_off")
    assert result.returncode == 0, result.stderr[-3000:]
    assert_refused(
        result, tmp_path, "training.precision is bf16 (bfloat16), but the model computed in float32 in its first step"
    )
