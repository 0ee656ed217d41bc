"""The figures both the ranks and the analysis compute, defined once (scalebench/measures.py)."""

from __future__ import annotations

import math

import pytest
from scalebench import backends, measures


def test_steady_state_epoch_time_is_the_median_after_the_first():
    assert measures.steady_median([10.0, 4.0, 6.0, 5.0]) == 5.0
    assert measures.steady_median([10.0, 4.0, 6.0]) == 5.0
    assert measures.steady_median([7.0]) == 7.0
    assert math.isnan(measures.steady_median([]))
    assert measures.steady_median([10.0, None, 3.0]) == 3.0
    assert measures.steady_median([10.0, math.nan, "n/a", 3.0, 5.0]) == 4.0


@pytest.mark.parametrize(
    ("framework", "backend", "passes"),
    [("torch", "native", 1), ("torch", "horovod", 3), ("tensorflow", "horovod", 3), ("tensorflow", "mirrored", 1)],
)
def test_only_a_backend_that_accumulates_takes_several_batches_per_step(framework, backend, passes):
    training = {"horovod": {"backward_passes_per_step": 3}}
    assert measures.backward_passes(framework, backend, training) == passes
    assert measures.images_per_step(8, 4, measures.backward_passes(framework, backend, training)) == 32 * passes


def test_fp16_needs_a_gpu_in_both_frameworks_and_bf16_does_not():
    assert backends.precision_problem("fp16", "cpu") == "fp16 needs a GPU; use bf16 on the CPU"
    assert backends.precision_problem("fp16", "cuda") is None
    assert backends.precision_problem("bf16", "cpu") is None


def test_cell_energy_and_gpu_hours():
    assert measures.cell_energy([1.0, 2.5], "") == (3.5, "")
    assert measures.cell_energy([1.0, None], "") == (None, "1 of 2 epochs were not measured")
    assert measures.cell_energy([None], "no powercap") == (None, "no powercap")
    assert measures.cell_energy([], "") == (None, "no epoch completed")
    assert measures.gpu_hours(8, 1800.0) == 4.0


def test_a_profiled_epoch_is_left_out_of_the_steady_figures():
    assert measures.steady_median([10.0, 4.0, 9.0, 6.0], [False, False, True, False]) == 5.0
    assert measures.steady_median([10.0, 4.0, 6.0], [True, False, False]) == 5.0  # the warm-up anyway
    assert measures.steady_median([10.0, 9.0], [False, True]) == 9.0  # every later epoch traced: as if none
