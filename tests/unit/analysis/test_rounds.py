"""The rounds of matrix.seeds {initial, max} on runs tables whose truth is known: a round adds one seed
to exactly the cells of the open comparisons the answer rests on, nothing to a decided one, to one at
its most seeds or to one whose last seed failed (named), and its sequence replays from the table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scalebench.analysis import rounds
from scalebench.analysis.rounds import Rules
from test_verdicts import cells as verdict_cells

pytestmark = pytest.mark.unit

RULES = Rules(initial=3, max=5, equivalence=0.02)


def cells(framework: str, backend: str, gpus: int, speeds, status=None) -> list[dict]:
    """runs.csv rows of one configuration, seeds 1, 2, ... (test_verdicts' rows), with their status."""
    rows = verdict_cells(backend, speeds, framework=framework, gpus=gpus)
    for row, state in zip(rows, status or ["ok"] * len(rows), strict=True):
        row.update(status=state, reason="" if state == "ok" else "rank 1 exited with 1", gpu_hours=0.01 * gpus)
    return rows


def steady(mean: float, seeds: int = 3) -> list[float]:
    """Values whose spread is 0.3%: a 20% difference is beyond doubt, and an equal one is inside 2%."""
    return list(mean * (1 + 0.003 * np.array([-1.0, 0.0, 1.0, 0.5, -0.5][:seeds])))


def noisy(mean: float, seed: int, seeds: int = 3) -> list[float]:
    """Values whose spread (15%) leaves a 3% difference open."""
    return list(mean * (1 + 0.15 * np.random.default_rng(seed).standard_normal(seeds)))


def paths(keys) -> list[str]:
    return sorted(rounds.label(**key) for key in keys)


def study() -> pd.DataFrame:
    """torch at 1 and 2 GPUs: native, the best at 2, 20% faster than horovod (decided) and about fsdp's
    speed with 15% noise (open); tensorflow native only. The frameworks on native at 2 GPUs: open."""
    return pd.DataFrame(
        cells("torch", "native", 1, noisy(60, 1))
        + cells("torch", "horovod", 1, noisy(50, 2))
        + cells("torch", "fsdp", 1, noisy(55, 3))
        + cells("torch", "native", 2, [121.0, 112.0, 130.0])
        + cells("torch", "horovod", 2, [40.0, 40.2, 39.8])
        + cells("torch", "fsdp", 2, [118.0, 108.0, 127.0])
        + cells("tensorflow", "native", 2, [110.0, 125.0, 100.0])
    )


def test_a_round_adds_one_seed_to_exactly_the_cells_of_the_open_comparisons():
    found = rounds.decide(study(), RULES, 1)
    states = {
        (row["compared"], row["a"], row["b"]): row["state"]
        for _, row in found.comparisons.iterrows()
        if row["kind"] == "throughput"
    }
    assert states == {
        ("backends", "native", "horovod"): "different",
        ("backends", "native", "fsdp"): "open",
        ("frameworks", "torch", "tensorflow"): "open",
    }
    # native and fsdp (their open pair), tensorflow native (the frameworks' open pair): seed 4;
    # nothing for horovod (decided against native), nothing at 1 GPU (not what the answer rests on)
    assert paths(found.adds) == ["tensorflow/native/g2/s4", "torch/fsdp/g2/s4", "torch/native/g2/s4"]
    assert found.stopped == ""


def test_a_backend_slower_by_a_fifth_is_decided_in_the_first_round_and_adds_nothing():
    runs = pd.DataFrame(cells("torch", "native", 2, steady(120)) + cells("torch", "horovod", 2, steady(100)))
    found = rounds.decide(runs, RULES, 1)
    (row,) = [row for _, row in found.comparisons.iterrows() if row["kind"] == "throughput"]
    assert (row["a"], row["b"], row["state"]) == ("native", "horovod", "different")
    assert found.adds == () and found.stopped == "every comparison the answer rests on is decided"


def test_equal_configurations_stop_inside_the_band_of_equivalence():
    runs = pd.DataFrame(cells("torch", "native", 2, steady(100)) + cells("torch", "horovod", 2, steady(100.1)))
    found = rounds.decide(runs, RULES, 1)
    (row,) = [row for _, row in found.comparisons.iterrows() if row["kind"] == "throughput"]
    assert (row["state"], row["verdict"]) == ("equivalent", "no difference larger than 2% (n = 3)")
    assert found.adds == ()


def test_a_comparison_at_its_most_seeds_stays_open_and_says_so():
    runs = pd.DataFrame(cells("torch", "native", 2, noisy(100, 4, 5)) + cells("torch", "horovod", 2, noisy(98, 5, 5)))
    found = rounds.decide(runs, RULES, 3)
    (row,) = [row for _, row in found.comparisons.iterrows() if row["kind"] == "throughput"]
    assert row["state"] == "open" and found.adds == ()
    assert row["open_reason"] == (
        "torch/native/g2 ran 5 seeds (matrix.seeds max 5); torch/horovod/g2 ran 5 seeds (matrix.seeds max 5)"
    )
    assert found.stopped.startswith("open, and no seed can be added: torch/native/g2 ran 5 seeds")


def test_one_side_at_its_most_seeds_still_adds_to_the_other():
    runs = pd.DataFrame(cells("torch", "native", 2, noisy(100, 4, 5)) + cells("torch", "horovod", 2, noisy(98, 5, 4)))
    assert paths(rounds.decide(runs, RULES, 2).adds) == ["torch/horovod/g2/s5"]


def test_a_failed_cell_leaves_its_comparison_open_with_the_failure_named_and_adds_no_seed():
    runs = pd.DataFrame(
        cells("torch", "native", 2, noisy(100, 4, 4), status=["ok", "ok", "ok", "failed"])
        + cells("torch", "horovod", 2, noisy(98, 5, 4))
    )
    found = rounds.decide(runs, RULES, 2)
    (row,) = [row for _, row in found.comparisons.iterrows() if row["kind"] == "throughput"]
    assert row["state"] == "open" and found.adds == ()
    assert row["open_reason"] == "torch/native/g2/s4 ended failed: rank 1 exited with 1"
    assert "torch/native/g2/s4 ended failed" in found.stopped


def test_a_round_adds_only_cells_the_planner_planned():
    runs = pd.DataFrame(cells("torch", "native", 2, noisy(100, 4)) + cells("torch", "horovod", 2, noisy(98, 5)))
    possible = {("torch", "native", "", 2, 4)}
    found = rounds.decide(runs, RULES, 1, possible)
    assert paths(found.adds) == ["torch/native/g2/s4"]


def test_a_comparison_decided_in_round_two_adds_seeds_to_its_cells_only():
    """Round 1: native against horovod and against fsdp are open; the three get seed 4. With it native
    against horovod is decided, against fsdp it is not: round 2 adds seed 5 to native and fsdp only,
    round 3 (at 5 seeds, max) adds nothing. A horovod seed 5 on disk (an earlier study's) is not the study's."""
    runs = pd.DataFrame(
        cells("torch", "native", 2, [100.0, 101.0, 125.0, 101.5, 100.8])
        + cells("torch", "horovod", 2, [70.0, 70.5, 69.5, 70.2, 70.1])
        + cells("torch", "fsdp", 2, [99.0, 97.0, 120.0, 100.0, 101.0])
    )
    found = rounds.replay(runs, RULES)
    assert [paths(one.adds) for one in found] == [
        ["torch/fsdp/g2/s4", "torch/horovod/g2/s4", "torch/native/g2/s4"],
        ["torch/fsdp/g2/s5", "torch/native/g2/s5"],
        [],
    ]
    assert len(found[1].cells) == 12 and len(found[2].cells) == 14
    assert ("torch", "horovod", "", 2, 5) not in rounds.study_keys(found)
    assert len(rounds.study_keys(found)) == 14
    # verdicts.csv says which round decided native against horovod, at how many seeds, and why the
    # other pair is still open
    table = rounds.annotate(found[-1].table, found)
    speed = table[(table["kind"] == "throughput") & (table["a"] == "native")].set_index("b")
    assert (speed.at["horovod", "round"], speed.at["horovod", "decided_seeds"]) == (2, 4)
    assert speed.at["fsdp", "state"] == "open" and pd.isna(speed.at["fsdp", "round"])
    assert speed.at["fsdp", "open_reason"] == (
        "torch/native/g2 ran 5 seeds (matrix.seeds max 5); torch/fsdp/g2 ran 5 seeds (matrix.seeds max 5)"
    )
    costs = rounds.round_table(found, runs)
    assert list(costs["added"]) == [3, 2, 0] and list(costs["open"]) == [2, 1, 1]
    assert list(costs["added_gpu_hours"]) == pytest.approx([0.06, 0.04, 0.0])
    assert costs["stopped"].iloc[-1].startswith("open, and no seed can be added: torch/native/g2 ran 5 seeds")


def test_a_replay_reads_a_cell_the_table_lacks_as_missing_and_names_it():
    """Added cells whose jobs failed have no record (a partial report): the replay counts them missing,
    names them, and adds no seed to their comparisons. Native against horovod is decided with the
    seeds that ran (4 and 3); native against fsdp stays open, naming the seeds that did not run."""
    runs = pd.DataFrame(
        cells("torch", "native", 2, [100.0, 101.0, 125.0, 101.5])
        + cells("torch", "horovod", 2, [70.0, 70.5, 69.5])
        + cells("torch", "fsdp", 2, [99.0, 97.0, 120.0, 100.0])
    )
    found = rounds.replay(runs, RULES)
    assert [paths(one.adds) for one in found] == [
        ["torch/fsdp/g2/s4", "torch/horovod/g2/s4", "torch/native/g2/s4"],
        ["torch/fsdp/g2/s5", "torch/native/g2/s5"],
        [],
    ]
    last = found[-1].comparisons
    last = last[last["kind"] == "throughput"].set_index("b")
    assert (last.at["horovod", "state"], last.at["horovod", "seeds_b"]) == ("different", 3)
    assert last.at["fsdp", "open_reason"] == (
        "torch/native/g2/s5 ended missing: no record (the cell did not run); "
        "torch/fsdp/g2/s5 ended missing: no record (the cell did not run)"
    )


def test_what_the_rounds_cost_counts_an_added_cell_without_a_record_apart():
    from scalebench.analysis.answer import rounds_fact

    runs = pd.DataFrame(
        cells("torch", "native", 2, [100.0, 101.0, 125.0, 101.5])
        + cells("torch", "horovod", 2, [70.0, 70.5, 69.5])
        + cells("torch", "fsdp", 2, [99.0, 97.0, 120.0, 100.0])
    )
    spent = rounds_fact(runs, rounds.replay(runs, RULES), RULES)
    # five cells added (three in round 1, two in round 2); horovod's s4 and the s5 cells have no record
    assert (spent["first_cells"], spent["added_cells"], spent["added_without_record"]) == (9, 5, 3)
    assert spent["first_gpu_hours"] == pytest.approx(0.18) and spent["added_gpu_hours"] == pytest.approx(0.04)
    assert "3 rounds added 5 cells (0.04 GPU-hours, 3 without a record)" in spent["sentence"]
