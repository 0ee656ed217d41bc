"""training.compile: compiled steps train like eager ones, report what was compiled, and are
left out where a backend cannot compile.

Each cell runs as the train rule runs it (workflow/scripts/launch.py), on CPU ranks: PyTorch DDP
with torch.compile (inductor: the first epoch compiles for a minute or more here), TensorFlow's
MultiWorkerMirrored and Mirrored with XLA.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import cell_settings, launch_cell, read_records
from paired_cells import SCHEDULE, UNMEASURED, placed, trained_once

pytestmark = pytest.mark.integration

CELLS = [("torch", "native", 1), ("tensorflow", "native", 2), ("tensorflow", "mirrored", 2)]


def trained(framework: str, backend: str, gpus: int, data, tmp_path_factory, compile_steps: bool):
    """A cell of two epochs, eager or compiled, trained once per run (paired_cells.py). PyTorch's eager
    one is the one-rank cell of SCHEDULE that test_observed_steps and test_data_placement read too;
    TensorFlow's is test_data_placement's device cell (deterministic, as an eager CPU cell is by
    default), and its compiled twin differs in compiling and in op determinism alone, which XLA
    lacks (no deterministic max-pooling gradient: compiled with determinism, the cell is refused), and
    in the collective benchmark, which test_collectives reads of the eager cell only."""
    if framework == "torch":
        settings = cell_settings(framework, backend, gpus, **SCHEDULE, compile=compile_steps)
    elif compile_steps:
        settings = placed(framework, backend, gpus, "device", UNMEASURED, compile=True, deterministic=False)
    else:
        settings = placed(framework, backend, gpus, "device")
    epochs, final, run = read_records(trained_once(tmp_path_factory, settings, data, timeout=1200))
    assert run["status"] == "ok", run.get("reason")  # compile asked and nothing compiled: refused
    return epochs, final, run


@pytest.mark.parametrize(("framework", "backend", "gpus"), CELLS, ids=[f"{f}-{b}" for f, b, _ in CELLS])
def test_compiled_steps_train_like_eager_ones_and_say_what_was_compiled(
    prepared_data, tmp_path_factory, framework, backend, gpus
):
    eager_epochs, eager_final, eager_run = trained(framework, backend, gpus, prepared_data, tmp_path_factory, False)
    epochs, final, run = trained(framework, backend, gpus, prepared_data, tmp_path_factory, True)
    assert run["training"]["compile"] is True and eager_run["training"]["compile"] is False
    # what the framework's compiler built, read from it (Dynamo's counters, the XLA traces of the step)
    compiler = "torch.compile (inductor)" if framework == "torch" else "XLA (jit_compile)"
    assert run["compiled"]["compiler"] == eager_run["compiled"]["compiler"] == compiler
    assert run["compiled"]["graphs"] >= 1 and eager_run["compiled"]["graphs"] == 0
    assert run["compiled"]["recompiles"] == 0, run["compiled"]  # the same shapes every step
    # other kernels, the same arithmetic: the losses agree to float32 rounding, not to the bit
    np.testing.assert_allclose(
        [e["loss"] for e in epochs] + [final["test_loss"]],
        [e["loss"] for e in eager_epochs] + [eager_final["test_loss"]],
        rtol=2e-3,
    )
    assert final["status"] == "ok" and len(epochs) == 2


def test_a_compiled_tensorflow_cell_that_must_be_deterministic_is_refused_before_building(prepared_data, tmp_path):
    settings = cell_settings("tensorflow", "native", 1, epochs=1, compile=True)  # deterministic null: on, on CPUs
    result = launch_cell(settings, prepared_data, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]  # refused: an outcome, no retry would change it
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["status"] == "refused" and "training.compile: XLA has no deterministic implementation" in run["reason"]
    assert "epochs_completed" not in run or not run["epochs_completed"]
