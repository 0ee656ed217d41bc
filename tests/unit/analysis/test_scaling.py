"""Speedup, efficiency and their intervals on hand-made runs with known answers."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from scalebench.analysis.scaling import interval_summary, scaling

T_975_DF2 = 4.302652729911275  # scipy.stats.t.ppf(0.975, 2)


def runs_table(rows: list[tuple]) -> pd.DataFrame:
    """rows: (backend, gpus, seed, status, train_time_s, steady_epoch_s[, time_to_target_s])."""
    columns = ["backend", "gpus", "seed", "status", "train_time_s", "steady_epoch_s", "time_to_target_s"]
    frame = pd.DataFrame([row + (math.nan,) * (len(columns) - len(row)) for row in rows], columns=columns)
    return frame.assign(source="scalebench", framework="torch", variant="", iou=0.9, images_per_s_per_gpu=10.0)


def row(table: pd.DataFrame, gpus: int, backend: str = "native") -> pd.Series:
    return table[(table["gpus"] == gpus) & (table["backend"] == backend)].iloc[0]


def test_paired_speedup_efficiency_and_interval():
    table = scaling(
        runs_table(
            [
                ("native", 1, 1, "ok", 100.0, 10.0),
                ("native", 1, 2, "ok", 110.0, 11.0),
                ("native", 1, 3, "ok", 90.0, 9.0),
                ("native", 4, 1, "ok", 50.0, 2.5),
                ("native", 4, 2, "ok", 55.0, 2.75),
                ("native", 4, 3, "ok", 50.0, 2.25),
            ]
        )
    )
    four = row(table, 4)
    ratios = [2.0, 2.0, 1.8]
    mean = sum(ratios) / 3
    half = T_975_DF2 * pd.Series(ratios).std() / math.sqrt(3)
    assert four["interval"] == "paired t"
    assert four["speedup_train_time"] == pytest.approx(mean)
    assert (four["speedup_train_time_lo"], four["speedup_train_time_hi"]) == pytest.approx((mean - half, mean + half))
    assert four["efficiency_train_time"] == pytest.approx(mean / 4)
    assert four["efficiency_train_time_hi"] == pytest.approx((mean + half) / 4)
    assert four["speedup_epoch_time"] == pytest.approx(4.0)  # 10/2.5, 11/2.75, 9/2.25
    assert four["speedup_epoch_time_lo"] == pytest.approx(4.0)  # no spread, no width
    one = row(table, 1)
    assert (one["speedup_train_time"], one["efficiency_train_time"], one["base_gpus"]) == (1.0, 1.0, 1)


def test_time_to_target_has_its_own_speedup_and_interval_and_a_cell_short_of_it_still_counts():
    table = scaling(
        runs_table(
            [
                ("native", 1, 1, "ok", 100.0, 10.0, 80.0),
                ("native", 1, 2, "ok", 110.0, 11.0, 88.0),
                ("native", 1, 3, "ok", 90.0, 9.0, 72.0),
                ("native", 4, 1, "ok", 50.0, 2.5, 40.0),
                ("native", 4, 2, "ok", 55.0, 2.75, 44.0),
                ("native", 4, 3, "ok", 50.0, 2.25, math.nan),  # never reached the target
            ]
        )
    )
    four = row(table, 4)
    assert (four["used"], four["interval"], four["speedup_train_time"]) == (3, "paired t", pytest.approx(5.8 / 3))
    assert four["time_to_target_used"] == 2 and four["time_to_target_interval"] == "paired t"
    assert four["speedup_time_to_target"] == pytest.approx(2.0)  # 80/40, 88/44: no spread
    assert (four["speedup_time_to_target_lo"], four["speedup_time_to_target_hi"]) == pytest.approx((2.0, 2.0))
    assert four["efficiency_time_to_target"] == pytest.approx(0.5)
    assert four["time_to_target_mean_s"] == pytest.approx(42.0)
    assert "1 ok cell(s) never reached the target" in interval_summary(table, "time_to_target")
    assert "never reached" not in interval_summary(table)


def test_no_time_to_target_anywhere_leaves_its_ratios_empty_and_the_others_intact():
    table = scaling(runs_table([("native", 1, 1, "ok", 100.0, 10.0), ("native", 2, 1, "ok", 50.0, 5.0)]))
    two = row(table, 2)
    assert two["speedup_train_time"] == pytest.approx(2.0) and two["used"] == 1
    assert math.isnan(two["speedup_time_to_target"]) and two["time_to_target_used"] == 0
    assert two["time_to_target_interval"] == "no cell reached it"
    assert interval_summary(table, "time_to_target") == "No cell with status ok reached the target yet."


def test_a_base_that_never_reached_the_target_gives_no_time_to_target_ratio():
    table = scaling(
        runs_table([("native", 1, 1, "ok", 100.0, 10.0, math.nan), ("native", 2, 1, "ok", 50.0, 5.0, 30.0)])
    )
    two = row(table, 2)
    assert two["base_gpus"] == 1 and two["speedup_train_time"] == pytest.approx(2.0)
    assert two["time_to_target_used"] == 1 and math.isnan(two["speedup_time_to_target"])


def test_cells_not_ok_are_excluded_and_counted():
    table = scaling(
        runs_table(
            [
                ("native", 1, 1, "ok", 100.0, 10.0),
                ("native", 1, 2, "ok", 100.0, 10.0),
                ("native", 2, 1, "ok", 50.0, 5.0),
                ("native", 2, 2, "ok", 50.0, 5.0),
                ("native", 2, 3, "failed", 1.0, 1.0),  # a failed cell's time would inflate the speedup
                ("native", 2, 4, "missing", math.nan, math.nan),
            ]
        )
    )
    two = row(table, 2)
    assert two["speedup_train_time"] == pytest.approx(2.0)
    assert (two["cells"], two["used"], two["excluded"]) == (4, 2, 2)
    assert two["excluded_status"] == "failed 1, missing 1"
    assert "2 cell(s) excluded" in interval_summary(table)


def test_different_seeds_use_the_log_ratio_interval_and_one_seed_none():
    table = scaling(
        runs_table(
            [
                ("native", 1, 1, "ok", 100.0, 10.0),
                ("native", 1, 2, "ok", 120.0, 12.0),
                ("native", 2, 3, "ok", 50.0, 5.0),
                ("native", 2, 4, "ok", 60.0, 6.0),
                ("horovod", 1, 1, "ok", 100.0, 10.0),
                ("horovod", 2, 1, "ok", 40.0, 4.0),
            ]
        )
    )
    unpaired = row(table, 2)
    assert unpaired["interval"] == "log-ratio t"
    assert unpaired["speedup_train_time"] == pytest.approx(110.0 / 55.0)
    assert unpaired["speedup_train_time_lo"] < 2.0 < unpaired["speedup_train_time_hi"]
    single = row(table, 2, "horovod")
    assert single["interval"] == "none" and single["speedup_train_time"] == pytest.approx(2.5)
    assert math.isnan(single["speedup_train_time_lo"]) and math.isnan(single["speedup_train_time_hi"])
    assert "no interval where only one seed ran" in interval_summary(table)


def test_without_a_one_gpu_cell_the_smallest_gpu_count_is_the_base():
    table = scaling(
        runs_table(
            [
                ("native", 1, 1, "failed", 100.0, 10.0),
                ("native", 2, 1, "ok", 100.0, 10.0),
                ("native", 8, 1, "ok", 40.0, 4.0),
            ]
        )
    )
    eight = row(table, 8)
    assert eight["base_gpus"] == 2
    assert eight["speedup_train_time"] == pytest.approx(2.5)
    assert eight["efficiency_train_time"] == pytest.approx(2.5 * 2 / 8)
    assert row(table, 1)["used"] == 0 and math.isnan(row(table, 1)["speedup_train_time"])


def test_fsdp_without_one_gpu_cells_is_relative_to_its_own_smallest_count():
    # fsdp needs 2 ranks (the matrix leaves its 1-GPU cells out); DDP in the same study starts at 1
    table = scaling(
        runs_table(
            [
                ("native", 1, 1, "ok", 100.0, 10.0),
                ("native", 2, 1, "ok", 50.0, 5.0),
                ("fsdp", 2, 1, "ok", 60.0, 6.0),
                ("fsdp", 4, 1, "ok", 40.0, 4.0),
            ]
        )
    )
    assert row(table, 2, "native")["base_gpus"] == 1 and row(table, 2, "fsdp")["base_gpus"] == 2
    assert row(table, 2, "fsdp")["speedup_train_time"] == pytest.approx(1.0)
    assert row(table, 4, "fsdp")["speedup_train_time"] == pytest.approx(1.5)
    assert row(table, 4, "fsdp")["efficiency_train_time"] == pytest.approx(1.5 * 2 / 4)


def test_scaling_csv_carries_the_model_fit_and_prediction_per_series(tmp_path):
    # epoch(N) = (100 + 2 [N>1] + 8 (N-1)/N) / N on one node; horovod has too few points
    epoch = {n: (100 + 2 * (n > 1) + 8 * (n - 1) / n) / n for n in (1, 2, 4, 8)}
    rows = [("native", n, seed, "ok", 10 * t, t) for n, t in epoch.items() for seed in (1, 2)]
    rows += [("horovod", 1, 1, "ok", 100.0, 10.0), ("horovod", 2, 1, "ok", 60.0, 6.0)]
    table = scaling(runs_table(rows).assign(nodes=1), per_node=8)
    table.to_csv(tmp_path / "scaling.csv", index=False)
    table = pd.read_csv(tmp_path / "scaling.csv")  # what the report reads
    four = row(table, 4)
    assert four["model_status"] == "fitted" and four["model_terms"] == "compute + latency + bandwidth"
    assert (four["model_compute_s"], four["model_latency_s"], four["model_bandwidth_s"]) == pytest.approx((100, 2, 8))
    assert four["model_epoch_s"] == pytest.approx(epoch[4]) and four["model_residual"] == pytest.approx(0, abs=1e-9)
    assert four["model_compute_epoch_s"] == pytest.approx(25.0)
    assert four["model_communication_epoch_s"] == pytest.approx((2 + 8 * 3 / 4) / 4)
    assert (four["model_predicted_gpus"], four["model_predicted_nodes"]) == (16, 2)
    assert "node step unknown" in four["model_note"]
    assert four["model_predicted_efficiency"] == pytest.approx(100 / (16 * (100 + 2 + 8 * 15 / 16) / 16))
    assert not four["model_poor_fit"]
    assert four["model_form"] == "weak" and math.isnan(four["model_floor_epoch_s"])
    # back-tested: fitted on 1, 2 and 4 GPUs, the model predicts 8 (exact times: no error)
    assert four["backtest_gpus"] == 8
    assert four["backtest_predicted_efficiency"] == pytest.approx(four["backtest_measured_efficiency"])
    assert four["backtest_measured_efficiency"] == pytest.approx(epoch[1] / (8 * epoch[8]))
    assert four["backtest_error"] == pytest.approx(0, abs=1e-9) and "back-test at 8 GPUs" in four["model_note"]
    refused = row(table, 2, "horovod")
    assert refused["model_status"] == "refused" and "too few to fit" in refused["model_note"]
    assert math.isnan(refused["backtest_gpus"]) and refused["backtest_note"].startswith("not back-tested")
    assert math.isnan(refused["model_predicted_efficiency"]) and math.isnan(refused["model_epoch_s"])


def test_fixed_step_epochs_scale_per_unit_of_work():
    """training.steps_per_epoch fixes each replica's steps: an epoch at 4 GPUs trains 4 times the images
    of one at 1 GPU (weak scaling), so an epoch time that stays the same is perfect efficiency, not 1/4;
    the time to target is a time to a quality and is not scaled."""
    runs = runs_table(
        [
            ("native", 1, 1, "ok", 100.0, 10.0, 50.0),
            ("native", 1, 2, "ok", 100.0, 10.0, 50.0),
            ("native", 4, 1, "ok", 125.0, 12.5, 40.0),
            ("native", 4, 2, "ok", 125.0, 12.5, 40.0),
        ]
    ).assign(steps_per_epoch=20)
    runs["global_batch"] = runs["gpus"] * 8
    four = row(scaling(runs), 4)
    assert four["work_ratio"] == 4.0
    assert four["efficiency_epoch_time"] == pytest.approx(10.0 / 12.5)
    assert four["efficiency_train_time"] == pytest.approx(100.0 / 125.0)
    assert four["speedup_epoch_time"] == pytest.approx(4 * 10.0 / 12.5)
    assert four["speedup_time_to_target"] == pytest.approx(50.0 / 40.0)
    # one pass over the training set at every count (no fixed steps): the epoch's work is the same
    plain = row(scaling(runs.drop(columns=["steps_per_epoch"])), 4)
    assert plain["work_ratio"] == 1.0 and plain["efficiency_epoch_time"] == pytest.approx(10.0 / 12.5 / 4)
