"""Verdicts on tables whose truth is known: a real difference larger than the seeds' noise is found,
one inside it is not, one seed gives no verdict, and time to target is judged on the time to target."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scalebench.analysis import verdicts

pytestmark = pytest.mark.unit


def cells(backend: str, throughputs, framework: str = "torch", gpus: int = 4, targets=None) -> list[dict]:
    targets = list(targets) if targets is not None else [math.nan] * len(throughputs)
    return [
        {
            "source": "scalebench",
            "framework": framework,
            "backend": backend,
            "variant": "",
            "gpus": gpus,
            "seed": seed,
            "status": "ok",
            "train_time_s": 100.0,
            "steady_epoch_s": 10.0,
            "images_per_s": value,
            "time_to_target_s": target,
        }
        for seed, (value, target) in enumerate(zip(throughputs, targets, strict=True), start=1)
    ]


def noisy(mean: float, noise: float, seeds: int, rng: np.random.Generator) -> list[float]:
    return list(mean * (1 + noise * rng.standard_normal(seeds)))


def only(table: pd.DataFrame, **keys) -> pd.Series:
    rows = table
    for key, value in keys.items():
        rows = rows[rows[key] == value]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def test_a_ten_percent_difference_over_two_percent_noise_and_five_seeds_is_found():
    rng = np.random.default_rng(7)
    runs = pd.DataFrame(cells("horovod", noisy(110, 0.02, 5, rng)) + cells("native", noisy(100, 0.02, 5, rng)))
    row = only(verdicts.verdicts(runs), kind="throughput")
    assert (row["a"], row["b"], row["seeds"]) == ("horovod", "native", 5)
    assert row["low"] < 1.10 < row["high"] and 1 < row["low"]
    assert row["p_holm"] < 0.05
    low, high = round(100 * (row["low"] - 1)), round(100 * (row["high"] - 1))
    assert row["verdict"] == f"faster by {round(100 * (row['ratio'] - 1))}% ({low}-{high}%; n = 5)"
    assert row["state"] == "different" and row["bound"] == pytest.approx(row["high"] - 1)
    assert row["verdict"].startswith("faster by 1")  # about 10%


def test_a_one_percent_difference_under_five_percent_noise_is_no_difference_the_seeds_can_show():
    rng = np.random.default_rng(11)
    runs = pd.DataFrame(cells("horovod", noisy(101, 0.05, 5, rng)) + cells("native", noisy(100, 0.05, 5, rng)))
    row = only(verdicts.verdicts(runs), kind="throughput")
    assert row["p_holm"] >= 0.05 and row["low"] < 1 < row["high"]
    assert row["state"] == "open"
    ruled_out = math.ceil(100 * max(row["high"] - 1, 1 / row["low"] - 1))
    assert row["verdict"] == f"no difference the seeds can show (n = 5): none larger than {ruled_out}%"


def test_one_seed_gives_no_verdict():
    runs = pd.DataFrame(cells("horovod", [120.0]) + cells("native", [100.0, 101.0]))
    row = only(verdicts.verdicts(runs), kind="throughput")
    assert row["verdict"] == "one seed: no verdict" and math.isnan(row["p"]) and math.isnan(row["low"])
    assert row["state"] == "open"  # another seed could decide it
    assert row["ratio"] == pytest.approx(120 / math.sqrt(100 * 101))


def test_holm_corrects_for_every_comparison_of_the_study():
    p = pd.Series([0.01, 0.04, 0.03, math.nan])
    assert list(verdicts.holm(p)[:3]) == pytest.approx([0.03, 0.06, 0.06])
    assert math.isnan(verdicts.holm(p)[3])
    # the same difference compared once is found; among many comparisons it may not be
    rng = np.random.default_rng(3)
    pair = cells("horovod", noisy(104, 0.02, 3, rng)) + cells("native", noisy(100, 0.02, 3, rng))
    alone = only(verdicts.verdicts(pd.DataFrame(pair)), kind="throughput")
    crowd = [
        cells("native", noisy(100, 0.05, 3, rng), gpus=g) + cells("fsdp", noisy(100, 0.05, 3, rng), gpus=g)
        for g in (8, 16, 32, 64, 128, 256)
    ]
    among = verdicts.verdicts(pd.DataFrame(pair + [row for group in crowd for row in group]))
    among = only(among, kind="throughput", gpus=4)
    assert among["p"] == pytest.approx(alone["p"]) and among["p_holm"] > alone["p_holm"]


def test_frameworks_are_compared_on_one_backend():
    rng = np.random.default_rng(5)
    runs = pd.DataFrame(
        cells("horovod", noisy(100, 0.01, 3, rng)) + cells("horovod", noisy(80, 0.01, 3, rng), framework="tensorflow")
    )
    row = only(verdicts.verdicts(runs), compared="frameworks")
    assert (row["backend"], row["a"], row["b"]) == ("horovod", "torch", "tensorflow")
    assert row["verdict"].startswith("faster by 2")  # 100 / 80


def test_faster_per_epoch_is_not_faster_to_target_when_it_needs_more_epochs():
    """horovod's larger global batch runs 20% faster per epoch but needs twice the epochs to reach the
    target: faster in throughput, slower to target."""
    rng = np.random.default_rng(9)
    runs = pd.DataFrame(
        cells("horovod", noisy(120, 0.01, 3, rng), targets=noisy(200, 0.02, 3, rng))
        + cells("native", noisy(100, 0.01, 3, rng), targets=noisy(120, 0.02, 3, rng))
    )
    table = verdicts.verdicts(runs)
    speed, target = only(table, kind="throughput"), only(table, kind="time_to_target")
    assert speed["a"] == "horovod" and speed["verdict"].startswith("faster by")
    assert target["a"] == "native" and target["verdict"].startswith("faster to the target by")
    assert target["ratio"] == pytest.approx(target["mean_b"] / target["mean_a"], rel=0.01)


def test_a_backend_whose_seeds_did_not_all_reach_the_target_gets_no_time_verdict():
    runs = pd.DataFrame(
        cells("horovod", [120.0, 121.0], targets=[50.0, math.nan])
        + cells("native", [100.0, 101.0], targets=[60.0, 61.0])
        + cells("fsdp", [90.0, 91.0], targets=[math.nan, math.nan])
    )
    table = verdicts.verdicts(runs)
    mixed = only(table, kind="time_to_target", a="native", b="horovod")
    assert (
        mixed["verdict"] == "not every seed reached the target (native in 2 of 2 seeds, horovod in 1 of 2): no verdict"
    )
    never = only(table, kind="time_to_target", a="native", b="fsdp")
    assert never["verdict"].startswith("only native reached the target") and math.isnan(never["p"])
    assert {mixed["state"], never["state"]} == {"none"}  # more seeds cannot make a seed reach it


def test_an_interval_inside_the_band_of_equivalence_is_decided_as_no_difference_larger_than_the_band():
    """Two equal configurations with 0.3% noise: the interval lies within 1/1.02-1.02, so the pair is
    decided (equivalent) and says so; with a band of 0 it stays open, saying what the seeds rule out."""
    rng = np.random.default_rng(2)
    runs = pd.DataFrame(cells("horovod", noisy(100, 0.003, 4, rng)) + cells("native", noisy(100, 0.003, 4, rng)))
    row = only(verdicts.verdicts(runs, equivalence=0.02), kind="throughput")
    assert row["p_holm"] >= 0.05 and 1 / 1.02 <= row["low"] and row["high"] <= 1.02
    assert (row["state"], row["verdict"]) == ("equivalent", "no difference larger than 2% (n = 4)")
    strict = only(verdicts.verdicts(runs, equivalence=0.0), kind="throughput")
    assert strict["state"] == "open" and 0 < strict["bound"] <= 0.02
    assert strict["verdict"] == "no difference the seeds can show (n = 4): none larger than 2%"  # rounded up
    wide = pd.DataFrame(cells("horovod", noisy(100, 0.05, 4, rng)) + cells("native", noisy(100, 0.05, 4, rng)))
    assert only(verdicts.verdicts(wide, equivalence=0.02), kind="throughput")["state"] == "open"


def test_an_imported_study_is_compared_on_its_steady_epoch_time():
    """A legacy log records no images/s: its backends are compared on the steady epoch time, the
    faster the one with the shorter epochs (ratio b's time over a's)."""
    rows = cells("horovod", [math.nan] * 3) + cells("native", [math.nan] * 3)
    for row, epoch in zip(rows, [8.0, 8.1, 7.9, 10.0, 10.1, 9.9], strict=True):
        row.update(source="2021", steady_epoch_s=epoch)
    row = only(verdicts.verdicts(pd.DataFrame(rows)), kind="epoch_time")
    assert (row["source"], row["a"], row["b"]) == ("2021", "horovod", "native")
    assert row["ratio"] == pytest.approx(10.0 / 8.0, rel=0.01) and row["state"] == "different"
    assert row["verdict"].startswith("faster per epoch by 25%")
