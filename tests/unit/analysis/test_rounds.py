"""The rounds of matrix.seeds {initial, max} on runs tables whose truth is known: a round adds one seed
to exactly the cells of the open comparisons the answer rests on, nothing to a decided one, to one at
its most seeds, to one whose last seed failed (named) or to one whose scatter says max seeds could
not decide it (saying how many would), and its sequence replays from the table; the rounds' expected
additions follow from the same scatter."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scalebench.analysis import rounds
from scalebench.analysis.comparisons import answer_rows, sides
from scalebench.analysis.rounds import Rules
from scalebench.analysis.scaling import LEVEL
from scalebench.analysis.verdicts import verdicts
from scalebench.config.seeds import configuration, round_configurations
from scalebench.distributions import welch
from test_verdicts import cells as verdict_cells

pytestmark = pytest.mark.unit

RULES = Rules(initial=3, max=5, equivalence=0.02)


def cells(framework: str, backend: str, gpus: int, speeds, status=None, targets=None) -> list[dict]:
    """runs.csv rows of one configuration, seeds 1, 2, ... (test_verdicts' rows), with their status
    and times to target."""
    rows = verdict_cells(backend, speeds, framework=framework, gpus=gpus, targets=targets)
    for row, state in zip(rows, status or ["ok"] * len(rows), strict=True):
        row.update(status=state, reason="" if state == "ok" else "rank 1 exited with 1", gpu_hours=0.01 * gpus)
    return rows


def steady(mean: float, seeds: int = 3) -> list[float]:
    """Values whose spread is 0.3%: a 20% difference is beyond doubt, and an equal one is inside 2%."""
    return list(mean * (1 + 0.003 * np.array([-1.0, 0.0, 1.0, 0.5, -0.5][:seeds])))


def noisy(mean: float, seed: int, seeds: int = 3) -> list[float]:
    """Values whose spread (15%) leaves a 3% difference open."""
    return list(mean * (1 + 0.15 * np.random.default_rng(seed).standard_normal(seeds)))


# three configurations whose truth is known (replayed below): native against horovod open at 3 seeds a
# side and decided at 4; native against fsdp open at 3 and 4, and at 5 (max) too, where fsdp's last two
# seeds scatter so much that it would take 8 seeds a side
NATIVE = [100.0, 108.0, 92.0, 101.0, 99.0]
HOROVOD = [82.0, 86.0, 78.0, 82.5, 81.5]
FSDP = [90.0, 91.0, 89.0, 75.0, 105.0]
FSDP_AT_MAX = "throughput: about 8 seeds a side to tell 12% (matrix.seeds max 5); stopped at 5"


def paths(keys) -> list[str]:
    return sorted(rounds.label(**key) for key in keys)


def study() -> pd.DataFrame:
    """torch at 1 and 2 GPUs: native, the best at 2, three times horovod's speed (decided) and 16% faster
    than fsdp with 7% noise (open at 3 seeds, not at 5); tensorflow native only, 21% slower than
    torch's with the same noise. The frameworks on native at 2 GPUs: open."""
    return pd.DataFrame(
        cells("torch", "native", 1, noisy(60, 1))
        + cells("torch", "horovod", 1, noisy(50, 2))
        + cells("torch", "fsdp", 1, noisy(55, 3))
        + cells("torch", "native", 2, [121.0, 112.0, 130.0])
        + cells("torch", "horovod", 2, [40.0, 40.2, 39.8])
        + cells("torch", "fsdp", 2, [104.0, 96.0, 112.0])
        + cells("tensorflow", "native", 2, [100.0, 92.0, 108.0])
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


def test_a_comparison_open_at_its_most_seeds_says_how_many_seeds_it_would_take():
    runs = pd.DataFrame(cells("torch", "native", 2, NATIVE) + cells("torch", "fsdp", 2, FSDP))
    found = rounds.decide(runs, RULES, 3)
    (row,) = [row for _, row in found.comparisons.iterrows() if row["kind"] == "throughput"]
    assert row["state"] == "open" and found.adds == ()
    assert row["open_reason"] == FSDP_AT_MAX
    assert found.stopped == f"open, and no seed can be added: {FSDP_AT_MAX}"


def test_one_side_at_its_most_seeds_still_adds_to_the_other():
    """Open at 5 and 4 seeds, and a fifth horovod seed could decide it: horovod gets it, native is at max."""
    horovod = [80.5, 96.6, 64.4, 80.5]
    runs = pd.DataFrame(cells("torch", "native", 2, NATIVE) + cells("torch", "horovod", 2, horovod))
    found = rounds.decide(runs, RULES, 2)
    assert paths(found.adds) == ["torch/horovod/g2/s5"]


def test_a_failed_cell_leaves_its_comparison_open_with_the_failure_named_and_adds_no_seed():
    runs = pd.DataFrame(
        cells("torch", "native", 2, NATIVE[:4], status=["ok", "ok", "ok", "failed"])
        + cells("torch", "fsdp", 2, FSDP[:4])
    )
    found = rounds.decide(runs, RULES, 2)
    (row,) = [row for _, row in found.comparisons.iterrows() if row["kind"] == "throughput"]
    assert row["state"] == "open" and found.adds == ()
    assert row["open_reason"] == "torch/native/g2/s4 ended failed: rank 1 exited with 1"
    assert "torch/native/g2/s4 ended failed" in found.stopped


def test_a_round_adds_only_cells_the_planner_planned():
    runs = pd.DataFrame(cells("torch", "native", 2, NATIVE[:3]) + cells("torch", "fsdp", 2, FSDP[:3]))
    possible = {("torch", "native", "", 2, 4)}
    found = rounds.decide(runs, RULES, 1, possible)
    assert paths(found.adds) == ["torch/native/g2/s4"]


def gpu_study(time_scatter: float) -> pd.DataFrame:
    """The issue's GPU study: DataParallel 2% faster than DDP, its seeds 0.3% apart (decided at 3 seeds);
    every seed reached the target, their times `time_scatter` apart (DataParallel 2% quicker)."""
    spread = np.array([-1.0, 0.0, 1.0])
    return pd.DataFrame(
        cells("torch", "native", 2, steady(100), targets=600 * (1 + time_scatter * spread))
        + cells("torch", "dp", 2, steady(102), targets=588 * (1 + time_scatter * spread[::-1]))
    )


def test_a_time_to_target_whose_scatter_max_seeds_cannot_decide_stops_and_says_how_many_it_would_take():
    """Throughput decided in round 1; time to target 2% apart with seeds 20% apart: at 5 seeds a side its
    interval would still hold both 1 and values beyond the band, so round 1 adds nothing, and says how
    many seeds a side would tell 2%: the fewest at which the t-interval's own arithmetic, with the
    measured variances, leaves out 1."""
    runs = gpu_study(0.2)
    found = rounds.decide(runs, RULES, 1)
    rows = found.comparisons.set_index("kind")
    assert (rows.at["throughput", "a"], rows.at["throughput", "state"]) == ("dp", "different")
    assert rows.at["time_to_target", "state"] == "open" and found.adds == ()
    logs = [np.log(runs.loc[runs["backend"] == side, "time_to_target_s"].to_numpy()) for side in ("dp", "native")]
    variances = [float(np.var(values, ddof=1)) for values in logs]
    difference = float(np.mean(logs[1]) - np.mean(logs[0]))
    needed = rounds.seeds_needed(*variances, difference, RULES.equivalence)
    assert needed > RULES.max
    assert rounds.half_width(*variances, needed) < difference <= rounds.half_width(*variances, needed - 1)
    said = f"time to target: about {needed} seeds a side to tell 2% (matrix.seeds max 5); stopped at 3"
    assert rows.at["time_to_target", "open_reason"] == said
    assert found.stopped == f"open, and no seed can be added: {said}"
    # the same, after the round, in verdicts.csv's open_reason (the report's answer reads it there)
    table = rounds.annotate(found.table, [found])
    (row,) = table[(table["kind"] == "time_to_target")].to_dict("records")
    assert row["open_reason"] == said


def test_a_scatter_that_max_seeds_can_decide_goes_on():
    found = rounds.decide(gpu_study(0.011), RULES, 1)
    rows = found.comparisons.set_index("kind")
    assert rows.at["time_to_target", "state"] == "open" and pd.isna(rows.at["time_to_target", "open_reason"])
    assert paths(found.adds) == ["torch/dp/g2/s4", "torch/native/g2/s4"]


def test_a_kind_the_rounds_do_not_decide_adds_no_seed_and_says_so():
    rules = Rules(initial=3, max=5, equivalence=0.02, decide=["throughput"])
    assert rules.decide == ("throughput",)
    found = rounds.decide(gpu_study(0.011), rules, 1)
    rows = found.comparisons.set_index("kind")
    assert rows.at["time_to_target", "open_reason"] == (
        "time to target: the rounds add no seeds for it (verdicts.rounds_decide)"
    )
    assert found.adds == ()


def test_the_projected_interval_is_the_verdicts_own_at_the_measured_seeds():
    """half_width with n seeds a side is Welch's interval (distributions.welch, as verdicts.py calls it)
    for two samples of n with those variances; seeds_needed is the fewest n whose interval decides."""
    rng = np.random.default_rng(7)
    a, b = rng.normal(0.1, 0.05, 4), rng.normal(0.0, 0.08, 4)
    _, low, high = welch(a, b, LEVEL)
    variances = (float(np.var(a, ddof=1)), float(np.var(b, ddof=1)))
    assert rounds.half_width(*variances, 4) == pytest.approx((high - low) / 2, rel=1e-12)
    # equal sides 0.05 apart in log, no difference: the band of 2% needs the half-width under log(1.02)
    needed = rounds.seeds_needed(0.0025, 0.0025, 0.0, 0.02)
    assert rounds.half_width(0.0025, 0.0025, needed) <= math.log(1.02) < rounds.half_width(0.0025, 0.0025, needed - 1)
    assert rounds.seeds_needed(0.0025, 0.0025, 0.0, 0.0) is None  # no difference and no band: never
    assert rounds.seeds_needed(0.0, 0.0, 0.01, 0.0) == 2  # no scatter: the first two seeds decide


def test_a_comparison_decided_in_round_two_adds_seeds_to_its_cells_only():
    """Round 1: native against horovod and against fsdp are open; the three get seed 4. With it native
    against horovod is decided, against fsdp it is not: round 2 adds seed 5 to native and fsdp only,
    round 3 (at 5 seeds, max) adds nothing. A horovod seed 5 on disk (an earlier study's) is not the study's."""
    runs = pd.DataFrame(
        cells("torch", "native", 2, NATIVE) + cells("torch", "horovod", 2, HOROVOD) + cells("torch", "fsdp", 2, FSDP)
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
    assert speed.at["fsdp", "open_reason"] == FSDP_AT_MAX
    costs = rounds.round_table(found, runs)
    assert list(costs["added"]) == [3, 2, 0] and list(costs["open"]) == [2, 1, 1]
    assert list(costs["added_gpu_hours"]) == pytest.approx([0.06, 0.04, 0.0])
    assert costs["stopped"].iloc[-1] == f"open, and no seed can be added: {FSDP_AT_MAX}"


def test_a_replay_reads_a_cell_the_table_lacks_as_missing_and_names_it():
    """Added cells whose jobs failed have no record (a partial report): the replay counts them missing,
    names them, and adds no seed to their comparisons. Native against horovod is decided with the
    seeds that ran (4 and 3); native against fsdp stays open, naming the seeds that did not run."""
    runs = pd.DataFrame(
        cells("torch", "native", 2, NATIVE[:4])
        + cells("torch", "horovod", 2, HOROVOD[:3])
        + cells("torch", "fsdp", 2, FSDP[:4])
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
        cells("torch", "native", 2, NATIVE[:4])
        + cells("torch", "horovod", 2, HOROVOD[:3])
        + cells("torch", "fsdp", 2, FSDP[:4])
    )
    spent = rounds_fact(runs, rounds.replay(runs, RULES), RULES)
    # five cells added (three in round 1, two in round 2); horovod's s4 and the s5 cells have no record
    assert (spent["first_cells"], spent["added_cells"], spent["added_without_record"]) == (9, 5, 3)
    assert spent["first_gpu_hours"] == pytest.approx(0.18) and spent["added_gpu_hours"] == pytest.approx(0.04)
    assert "3 rounds added 5 cells (0.04 GPU-hours, 3 without a record)" in spent["sentence"]


def planned(backends, most: int = 5) -> set[tuple]:
    return {("torch", backend, "", 2, seed) for backend in backends for seed in range(1, most + 1)}


def test_the_rounds_expected_additions_follow_the_measured_scatter():
    """Three seeds a side of the replayed study above: native against horovod needs 4 seeds a side,
    against fsdp 5 (max): what the replay added, each cell once."""
    runs = pd.DataFrame(
        cells("torch", "native", 2, NATIVE[:3])
        + cells("torch", "horovod", 2, HOROVOD[:3])
        + cells("torch", "fsdp", 2, FSDP[:3])
    )
    chances = rounds.expected_adds(runs, RULES, planned(["native", "horovod", "fsdp"]))
    assert chances == {
        ("torch", "native", "", 2, 4): 1.0,
        ("torch", "native", "", 2, 5): 1.0,
        ("torch", "horovod", "", 2, 4): 1.0,
        ("torch", "horovod", "", 2, 5): 0.0,
        ("torch", "fsdp", "", 2, 4): 1.0,
        ("torch", "fsdp", "", 2, 5): 1.0,
    }
    replayed = rounds.replay(
        pd.DataFrame(
            cells("torch", "native", 2, NATIVE)
            + cells("torch", "horovod", 2, HOROVOD)
            + cells("torch", "fsdp", 2, FSDP)
        ),
        RULES,
    )
    added = {tuple(key[name] for name in rounds.KEYS) for one in replayed for key in one.adds}
    assert added == {key for key, chance in chances.items() if chance == 1.0}


def test_a_comparison_max_seeds_cannot_decide_is_expected_to_add_nothing_and_one_that_can_its_need():
    keys = planned(["native", "dp"])
    assert set(rounds.expected_adds(gpu_study(0.2), RULES, keys).values()) == {0.0}
    assert rounds.expected_adds(gpu_study(0.011), RULES, keys) == {
        ("torch", "native", "", 2, 4): 1.0,
        ("torch", "native", "", 2, 5): 0.0,
        ("torch", "dp", "", 2, 4): 1.0,
        ("torch", "dp", "", 2, 5): 0.0,
    }


def test_before_the_first_seeds_ran_every_cell_a_round_could_add_is_expected():
    runs = pd.DataFrame(cells("torch", "native", 2, NATIVE[:3]) + cells("torch", "dp", 2, [99.0, 98.0]))
    assert rounds.expected_adds(runs, RULES, planned(["native", "dp"])) == dict.fromkeys(
        [("torch", backend, "", 2, seed) for backend in ("native", "dp") for seed in (4, 5)], 1.0
    )


def test_the_comparisons_the_answer_rests_on_lie_among_the_configurations_a_round_may_add_to():
    """comparisons.answer_rows picks its verdicts where config/seeds.py's answer_scope says, and
    round_configurations plans seeds for all of them: every side of every verdict the answer rests on
    is a configuration the planner planned round cells for."""
    runs = study()
    chosen = answer_rows(verdicts(runs), runs)
    assert len(chosen) > 0
    configurations = [
        configuration(*key) for key in runs[["framework", "backend", "variant", "gpus"]].itertuples(index=False)
    ]
    planned_for = set(round_configurations(configurations))
    assert {side for _, row in chosen.iterrows() for side in sides(row)} <= planned_for
    assert planned_for == {
        ("torch", "native", "", 2),
        ("torch", "horovod", "", 2),
        ("torch", "fsdp", "", 2),
        ("tensorflow", "native", "", 2),
    }
