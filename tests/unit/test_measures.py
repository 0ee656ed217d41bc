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


def placed_epoch(number: int, hosts: list[str], resumed: bool = False) -> dict:
    return {"epoch": number, "resumed": resumed, "ranks": [{"rank": r, "host": h} for r, h in enumerate(hosts)]}


def test_a_cell_whose_epochs_ran_on_two_node_sets_takes_its_steady_figures_from_one_set():
    # requeued after epoch 3, resumed on other nodes: epochs 2-3 and 5-6 are steady, a tie, the later set kept
    epochs = [placed_epoch(n, ["a", "b"]) for n in (1, 2, 3)]
    epochs += [placed_epoch(4, ["c", "b"], resumed=True), placed_epoch(5, ["b", "c"]), placed_epoch(6, ["c", "b"])]
    placed = measures.placement(epochs)
    assert placed.sets == (("a", "b"), ("b", "c")) and placed.per_epoch == (0, 0, 0, 1, 1, 1)
    assert (placed.kept, placed.kept_steady) == (1, 2)
    flags = measures.steady_flags(epochs)
    assert flags == [True, True, True, True, False, False]
    assert measures.steady_median([9.0, 1.0, 1.0, 7.0, 2.0, 2.0], flags) == 2.0  # never a median of both
    assert placed.note([e["epoch"] for e in epochs]) == (
        "epochs 1-3 on a,b; epochs 4-6 on b,c: the steady figures from b,c's 2 steady epochs "
        "(the most; a tie goes to the later nodes)"
    )
    # the set with more steady epochs is kept, whichever came first
    longer = [placed_epoch(n, ["a", "b"]) for n in (1, 2, 3, 4)] + [placed_epoch(5, ["c"], resumed=True)]
    assert measures.placement(longer).kept == 0
    assert measures.steady_flags(longer) == [False, False, False, False, True]


def test_a_kept_set_without_a_steady_epoch_still_gives_only_its_own_epochs():
    epochs = [placed_epoch(1, ["a"]), placed_epoch(2, ["b"], resumed=True)]  # neither set has a steady epoch
    flags = measures.steady_flags(epochs)
    assert measures.placement(epochs).kept == 1 and flags == [True, False]
    assert measures.steady_median([5.0, 3.0], flags) == 3.0
    assert "none of them steady on its own" in measures.placement(epochs).note([1, 2])


def test_epochs_on_one_node_set_or_naming_none_keep_the_steady_rule_as_it_was():
    same = [placed_epoch(1, ["a", "b"]), placed_epoch(2, ["b", "a"]), placed_epoch(3, ["a", "b"], resumed=True)]
    assert measures.placement(same).kept is None and measures.placement(same).note([1, 2, 3]) is None
    assert measures.steady_flags(same) == [False, False, True]
    unnamed = [{"epoch": 1}, {"epoch": 2, "profiled": True}, {"epoch": 3}]
    assert measures.placement(unnamed).sets == () and measures.steady_flags(unnamed) == [False, True, False]
