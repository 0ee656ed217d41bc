"""The bill against what each cell cost (analysis/cost.py): the prediction a cell started with beside
its measured run, the study's total, the error of the measured predictions (the formula kept out of
it), and the note generated from those numbers."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from cell_records import cell, write_cell
from scalebench.analysis import collect, cost
from scalebench.config import bill as bills

RUN = {"start": "2025-01-01T10:00:00+00:00"}


def ended(seconds: int) -> dict:
    """run.json of a cell whose job held it `seconds` (launch.py's job_s), its ranks' run 5 s less."""
    run = seconds - 5
    return {
        **RUN,
        "end": f"2025-01-01T10:{run // 60:02d}:{run % 60:02d}+00:00",
        "job_s": float(seconds),
        "job_s_source": "launch",
        "job_attempts": 1,
        "job_s_reason": None,
    }


UNKNOWN_ATTEMPT = "resumed after epoch 2: the attempt before left no job wall (it recorded none)"


def test_each_cell_is_set_against_the_prediction_it_started_with(tmp_path):
    for gpus, seconds in ((1, 100), (2, 60), (4, 50)):
        write_cell(tmp_path, gpus=gpus, run_extra=ended(seconds))
    resumed = {**ended(40), "resumed_from_epoch": 2, "job_s": None, "job_attempts": None}
    write_cell(tmp_path, gpus=8, run_extra={**resumed, "job_s_source": None, "job_s_reason": UNKNOWN_ATTEMPT})
    runs, _ = collect.collect(tmp_path, [cell(gpus=g) for g in (1, 2, 4, 8, 16)])
    rows = [
        {**cell(gpus=1), "source": "formula", "predicted_s": 1200.0, "high_s": 1200.0, "time_limit_min": 20},
        {**cell(gpus=2), "source": "this study", "predicted_s": 66.0, "low_s": 55.0, "high_s": 70.0},
        {**cell(gpus=4), "source": "this study", "predicted_s": 45.0, "low_s": 44.0, "high_s": 46.0},
        {**cell(gpus=8), "source": "this study", "predicted_s": 30.0},
        {**cell(gpus=16), "source": "this study", "predicted_s": 25.0},  # never ran: not in the table
    ]
    path = tmp_path / "submitted.csv"
    path.write_text(bills.csv_text([{"method": "", **row} for row in rows]))
    table = cost.cost(runs, cost.read_submitted(str(path)))
    assert list(table["gpus"]) == [1, 2, 4, 8]
    two = table.set_index("gpus").loc[2]
    assert two["gpu_hours"] == pytest.approx(2 * 60 / 3600) and two["predicted_gpu_hours"] == pytest.approx(
        2 * 66 / 3600
    )
    assert two["error"] == pytest.approx(0.1) and bool(two["within_interval"])
    assert not table.set_index("gpus").loc[4, "within_interval"]  # 50 s ran outside 44-46
    resumed = table.set_index("gpus").loc[8]
    assert math.isnan(resumed["gpu_hours"]) and resumed["reason"] == f"no measured job wall ({UNKNOWN_ATTEMPT})"
    found = cost.summary(table)
    # the total of the cells with both; the error only of the predictions made from measured cells
    assert found["cells"] == 3 and found["measured_cells"] == 2 and found["formula_cells"] == 1
    assert found["median_error"] == pytest.approx((0.1 + (45 / 50 - 1)) / 2) and found["worst_error"] == pytest.approx(
        0.1
    )
    assert found["formula_ratio"] == pytest.approx(12.0)
    text = cost.sentence(found)
    assert text.startswith(
        "The 3 cells with a prediction kept from when they started were billed 0.42 GPU-hours and took 0.117."
    )
    assert (
        "The 2 cells predicted from measured cells: median error +0%, worst +10%; 1 of the 2 with an interval ran inside it"
        in text
    )
    assert "billed 1 cell 12 times what they took" in text


def test_a_study_without_kept_predictions_says_there_is_nothing_to_set_the_bill_against(tmp_path):
    write_cell(tmp_path, run_extra=ended(100))
    runs, _ = collect.collect(tmp_path, [cell()])
    table = cost.cost(runs, cost.read_submitted(None))
    assert table["reason"].iloc[0].startswith("no prediction kept")
    assert cost.sentence(cost.summary(table)).startswith("No cell that ended has a prediction kept")
    assert isinstance(table, pd.DataFrame)


def test_the_measured_cost_is_the_jobs_wall_and_an_older_record_has_none_with_the_reason(tmp_path):
    """What the bill predicts is measured: job_s, not run.json's span; without it, empty, never 0."""
    write_cell(tmp_path, gpus=2, seed=1, run_extra=ended(60))
    write_cell(tmp_path, gpus=2, seed=2, run_extra={**RUN, "end": "2025-01-01T10:00:55+00:00"})  # before job_s
    runs, _ = collect.collect(tmp_path, [cell(gpus=2, seed=s) for s in (1, 2)])
    rows = [{**cell(gpus=2, seed=s), "method": "", "source": "this study", "predicted_s": 66.0} for s in (1, 2)]
    path = tmp_path / "submitted.csv"
    path.write_text(bills.csv_text(rows))
    table = cost.cost(runs, cost.read_submitted(str(path))).set_index("seed")
    assert table.loc[1, "job_s"] == 60.0 and table.loc[1, "error"] == pytest.approx(0.1)  # not 66 / 55 - 1
    assert table.loc[1, "gpu_hours"] == pytest.approx(runs.set_index("seed").loc[1, "gpu_hours"])  # runs.csv's
    assert math.isnan(table.loc[2, "gpu_hours"]) and math.isnan(table.loc[2, "error"])
    assert table.loc[2, "reason"].startswith("no measured job wall (not recorded (run.json has no job_s")


@pytest.mark.parametrize("chances", [(1.0, 0.0, 0.0), (None, None, None)])
def test_the_rounds_bill_is_set_against_what_the_cells_they_added_took(tmp_path, chances):
    """Three cells a round could add, billed 100 s each on 2 GPUs; the rounds added one (seed 3), which
    held its 2 GPUs 60 s. Expected where the start that billed them had the first seeds' scatter."""
    write_cell(tmp_path, gpus=2, seed=3, run_extra=ended(60))
    runs, _ = collect.collect(tmp_path, [cell(gpus=2, seed=s) for s in (3, 4, 5)])
    rows = [
        {**cell(gpus=2, seed=s), "state": bills.ROUND, "source": "this study", "method": "", "predicted_s": 100.0}
        | {"gpu_hours": 2 * 100 / 3600, "round_chance": chance}
        for s, chance in zip((3, 4, 5), chances, strict=True)
    ]
    path = tmp_path / "submitted.csv"
    path.write_text(bills.csv_text(rows))
    submitted = cost.read_submitted(str(path))
    table = cost.cost(runs, submitted)
    found = cost.rounds_summary(submitted, table)
    assert found["cells"] == 3 and found["added_cells"] == 1
    assert found["worst_gpu_hours"] == pytest.approx(3 * 200 / 3600, rel=1e-3)
    assert found["took_gpu_hours"] == pytest.approx(120 / 3600)
    text = cost.rounds_sentence(found)
    assert text.startswith(" The rounds were billed at 0.167 GPU-hours at worst (3 cells), ")
    assert text.endswith("; they added 1 cell, which took 0.0333 GPU-hours.")
    if chances[0] is None:
        assert math.isnan(found["expected_gpu_hours"]) and "with no expected cost (the start that billed" in text
    else:
        assert found["expected_gpu_hours"] == pytest.approx(200 / 3600, rel=1e-3)
        assert "expected at 0.0556 (1 cell, from the first seeds' scatter)" in text
    # a list of seeds: the bill priced no round, and the note says nothing of rounds
    assert cost.rounds_sentence(cost.rounds_summary(submitted.assign(state="to run"), table)) == ""
