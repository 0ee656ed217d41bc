"""This study against a baseline: ratios with intervals from both studies' seeds, flags, cells only one
study has, provenance differences, and baselines that are missing or from older tables."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from conftest import REPO
from scalebench.analysis.baseline import BaselineError, compare, read_baseline, study_differences
from scalebench.analysis.baseline_tables import baseline_problem
from scalebench.analysis.tables import runs_frame
from scalebench.records.tables import RUNS

VERSIONS = "python 3.11.7, torch 2.13.0, numpy 2.1.0"


def cell(gpus: int, seed: int, images_per_s: float, train_time_s: float, **extra) -> dict:
    row = {
        "source": "scalebench",
        "framework": "torch",
        "backend": "native",
        "variant": "",
        "gpus": gpus,
        "seed": seed,
        "status": "ok",
        "reason": "",
        "images_per_s": images_per_s,
        "train_time_s": train_time_s,
        "steady_epoch_s": train_time_s / 4,
        "time_to_target_s": math.nan,
        "time_to_target_reason": "never reached 0.8 (best 0.41 in 2 evaluations)",
        "versions": VERSIONS,
        "devices": "cpu",
        "nodes": 1,
        "config_hash": "aaa",
        "training": json.dumps({"batch_per_gpu": 8, "precision": "fp32"}),
    }
    return row | extra


def frame(rows: list[dict]) -> pd.DataFrame:
    return runs_frame(rows)


def row(table: pd.DataFrame, gpus: int) -> pd.Series:
    return table[table["gpus"] == gpus].iloc[0]


BASELINE = [
    cell(1, 1, 50.0, 100.0),
    cell(1, 2, 51.0, 101.0),
    cell(2, 1, 90.0, 56.0),
    cell(2, 2, 92.0, 55.0),
    cell(8, 1, 300.0, 20.0),
]
FASTER = [  # twice the images/s; at 2 GPUs it scales worse than the baseline did
    cell(1, 1, 100.0, 50.0, versions="python 3.11.7, torch 2.14.0, numpy 2.1.0", config_hash="bbb"),
    cell(1, 2, 102.0, 50.5, versions="python 3.11.7, torch 2.14.0, numpy 2.1.0", config_hash="bbb"),
    cell(2, 1, 150.0, 33.0, versions="python 3.11.7, torch 2.14.0, numpy 2.1.0", config_hash="bbb"),
    cell(2, 2, 152.0, 33.5, versions="python 3.11.7, torch 2.14.0, numpy 2.1.0", config_hash="bbb"),
    cell(4, 1, 250.0, 20.0, versions="python 3.11.7, torch 2.14.0, numpy 2.1.0", config_hash="bbb"),
]


def test_shared_cells_get_ratios_with_intervals_and_flags():
    table = compare(frame(FASTER), frame(BASELINE))
    one = row(table, 1)
    assert one["present"] == "both" and (one["cells_here"], one["cells_baseline"]) == (2, 2)
    assert one["images_per_s_ratio"] == pytest.approx(101.0 / 50.5)
    assert one["images_per_s_ratio_lo"] < one["images_per_s_ratio"] < one["images_per_s_ratio_hi"]
    assert one["images_per_s_ratio_lo"] > 1 and one["images_per_s_change"] == "faster"
    assert one["efficiency_ratio"] == 1.0 and "1 by definition" in one["note"]
    two = row(table, 2)
    efficiency_here = 1 * 50.25 / (2 * 33.25)
    efficiency_there = 1 * 100.5 / (2 * 55.5)
    assert two["efficiency_here"] == pytest.approx(efficiency_here)
    assert two["efficiency_ratio"] == pytest.approx(efficiency_here / efficiency_there)
    assert two["efficiency_ratio_hi"] < 1 and two["efficiency_change"] == "lower"


def test_a_slower_study_is_flagged_slower_and_an_overlap_is_not_flagged():
    slower = [cell(1, 1, 25.0, 200.0), cell(1, 2, 26.0, 201.0)]
    assert row(compare(frame(slower), frame(BASELINE[:2])), 1)["images_per_s_change"] == "slower"
    same = [cell(1, 1, 49.0, 100.0), cell(1, 2, 52.0, 101.0)]
    unchanged = row(compare(frame(same), frame(BASELINE[:2])), 1)
    assert unchanged["images_per_s_ratio_lo"] < 1 < unchanged["images_per_s_ratio_hi"]
    assert pd.isna(unchanged["images_per_s_change"]) or unchanged["images_per_s_change"] == ""


def test_time_to_target_is_compared_where_reached_and_empty_with_the_reason_where_not():
    reached = [cell(1, s, 50.0, 100.0, time_to_target_s=t) for s, t in ((1, 40.0), (2, 41.0))]
    baseline = [cell(1, s, 50.0, 100.0, time_to_target_s=t) for s, t in ((1, 80.0), (2, 82.0))]
    one = row(compare(frame(reached), frame(baseline)), 1)
    assert one["time_to_target_ratio"] == pytest.approx(40.5 / 81.0) and one["time_to_target_change"] == "faster"
    never = row(compare(frame(FASTER), frame(BASELINE)), 1)
    assert math.isnan(never["time_to_target_ratio"])
    assert "time to target: no usable cell in this study (never reached 0.8" in never["note"]


def test_cells_only_one_study_has_are_listed():
    table = compare(frame(FASTER), frame(BASELINE))
    assert row(table, 4)["present"] == "this study only" and math.isnan(row(table, 4)["images_per_s_ratio"])
    assert row(table, 8)["present"] == "baseline only"
    assert list(table["gpus"]) == [1, 2, 4, 8]


def test_one_seed_gives_a_ratio_without_interval_and_no_flag():
    one = row(compare(frame(FASTER[:1]), frame(BASELINE[:1])), 1)
    assert one["images_per_s_ratio"] == pytest.approx(2.0) and math.isnan(one["images_per_s_ratio_lo"])
    assert "one seed on a side, no interval" in one["note"]
    assert pd.isna(one["images_per_s_change"]) or one["images_per_s_change"] == ""


def test_efficiency_is_not_compared_when_the_bases_differ():
    two = row(compare(frame(FASTER[2:4]), frame(BASELINE)), 2)
    assert math.isnan(two["efficiency_ratio"])
    assert "bases differ (2 GPUs here, 1 in the baseline)" in two["note"]


def test_provenance_differences_name_what_changed():
    here = [c | {"training": json.dumps({"batch_per_gpu": 1, "precision": "fp32"})} for c in FASTER]
    text = row(compare(frame(here), frame(BASELINE)), 1)["provenance_differences"]
    assert "torch: 2.13.0 -> 2.14.0" in text and "python" not in text  # only what changed
    assert "config hash: aaa -> bbb" in text and "training.batch_per_gpu: 8 -> 1" in text
    assert "devices" not in text and "precision" not in text
    assert "torch: 2.13.0 -> 2.14.0" in study_differences(frame(here), frame(BASELINE))


def site_column(machine: str, nccl: str, **environment: str) -> str:
    """runs.csv's site of a cell on the recorded machine (tests/fixtures/nvidia-smi), NCCL `nccl` loaded."""
    from scalebench.analysis.collect import flat_settings
    from scalebench.train import site

    recordings = REPO / "tests" / "fixtures" / "nvidia-smi"

    def call(*arguments):
        name = "query" if arguments[0].startswith("--query-gpu") else "topo"
        suffix = "csv" if name == "query" else "txt"
        return (recordings / f"{name}-{machine}.{suffix}").read_text(), ""

    maps = "7f00-7f01 r-xp 00000000 08:01 1 /venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2\n"
    found = site.fields(call=call, sys_root="/nonexistent", maps=maps, env=environment)["site"]
    found["libraries"] = site.libraries(
        maps, lambda path, function: int(nccl) if function == "ncclGetVersion" else None
    )[0]
    return json.dumps(flat_settings(found), sort_keys=True)


def test_provenance_differences_name_a_change_of_site():
    before = site_column("2xgpu-2core", "21805", NCCL_ALGO="Ring")
    after = site_column("4xh100", "22105", NCCL_ALGO="Tree")
    text = row(
        compare(frame([c | {"site": after} for c in FASTER]), frame([c | {"site": before} for c in BASELINE])), 1
    )["provenance_differences"]
    assert 'site.driver: "535.161.08" -> "550.54.15"' in text
    assert 'site.gpus.0.name: "NVIDIA L40S" -> "NVIDIA H100 80GB HBM3"' in text
    assert (
        'site.gpus.0.power_limit: "350.00" -> "700.00"' in text
        and 'site.gpus.2.power_limit: absent -> "500.00"' in text
    )
    assert 'site.libraries.nccl.nvidia/nccl/lib/libnccl.so.2: "2.18.5" -> "2.21.5"' in text
    assert 'site.environment.NCCL_ALGO: "Ring" -> "Tree"' in text
    assert 'site.topology.links.GPU0.GPU1: "SYS" -> "NV18"' in text
    same = row(compare(frame([c | {"site": after} for c in FASTER]), frame([c | {"site": after} for c in BASELINE])), 1)
    assert "site" not in same["provenance_differences"]
    # cells from before the site was recorded: said once, not every key
    older = row(compare(frame([c | {"site": after} for c in FASTER]), frame(BASELINE)), 1)["provenance_differences"]
    assert "site: not recorded by the baseline's cells" in older and "site.driver" not in older


def write(tmp_path, rows: list[dict], drop=()) -> str:
    path = tmp_path / "results" / "summary" / "runs.csv"
    path.parent.mkdir(parents=True)
    frame(rows).drop(columns=list(drop)).to_csv(path, index=False)
    return path


def test_a_baseline_of_older_tables_is_read_where_the_columns_allow(tmp_path):
    path = write(
        tmp_path, BASELINE, drop=("variant", "source", "time_to_target_s", "time_to_target_reason", "training")
    )
    baseline, absent = read_baseline(path)
    assert set(absent) == {"time_to_target_s", "training"} and set(RUNS.names) <= set(baseline.columns)
    one = row(compare(frame(FASTER), baseline, absent), 1)
    assert one["images_per_s_change"] == "faster"  # variant '' and source own, as the tables meant then
    assert "time to target: the baseline's tables have no time_to_target_s (an older version)" in one["note"]
    assert one["provenance_differences"].endswith("not in the baseline's tables: training settings")


def test_a_baseline_without_a_needed_column_is_a_clear_error(tmp_path):
    path = write(tmp_path, BASELINE, drop=("images_per_s",))
    with pytest.raises(BaselineError, match="compare.baseline.*lacks the column\\(s\\) images_per_s"):
        read_baseline(path)
    assert "without the column(s) images_per_s" in baseline_problem(tmp_path / "results")


def test_a_missing_baseline_or_one_without_tables_is_refused_naming_the_key(tmp_path):
    assert baseline_problem(tmp_path / "nowhere").startswith("config key 'compare.baseline': ")
    assert "is not a folder" in baseline_problem(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    assert "has no summary tables" in baseline_problem(tmp_path / "empty")
    write(tmp_path, BASELINE)
    assert baseline_problem(tmp_path / "results") is None
