"""A cell's time from its records, read once for runs.csv and the bill: the run time from run.json's
start to its end (empty with the reason where a resumed run or an unended one cannot tell), and a
finished cell as the bill reads it (only cells that finished ok with a steady epoch)."""

from __future__ import annotations

import math

import pytest
from cell_records import cell, write_cell
from scalebench.analysis import collect
from scalebench.timing import cell_times

TIMES = {"start": "2025-01-01T10:00:00+00:00", "end": "2025-01-01T10:01:40+00:00"}


def test_the_run_time_is_run_jsons_start_to_its_end_and_runs_csv_shows_it(tmp_path):
    write_cell(tmp_path, gpus=2, run_extra=TIMES)
    assert cell_times.run_seconds(TIMES) == (100.0, "")
    row = collect.collect(tmp_path, [cell(gpus=2)])[0].iloc[0]
    assert (row["run_s"], row["run_s_reason"]) == (100.0, None)


@pytest.mark.parametrize(
    ("run", "reason"),
    [
        ({**TIMES, "resumed_from_epoch": 2}, "resumed after epoch 2"),
        ({"start": TIMES["start"]}, "run.json has no end"),
        ({"start": "yesterday", "end": TIMES["end"]}, "is not a time"),
    ],
)
def test_a_run_time_the_record_cannot_tell_is_empty_with_the_reason(run, reason):
    seconds, why = cell_times.run_seconds(run)
    assert math.isnan(seconds) and reason in why


def test_a_finished_cell_reads_as_the_models_row_with_its_overhead(tmp_path):
    settings = {"model": {"width": 2}, "training": {"scaling": "weak", "precision": "bf16"}}
    folder = write_cell(tmp_path, gpus=2, seed=3, run_extra=TIMES, settings=settings)
    measured = cell_times.read(folder)
    # epochs 10, 4, 6, 5 s: the steady epoch is the median after the first (5 s); 100 s in all
    assert (measured.gpus, measured.seed, measured.nodes, measured.epochs) == (2, 3, 2, 4)
    assert measured.steady_epoch_s == 5.0 and measured.overhead_s == pytest.approx(100 - 4 * 5.0)
    assert measured.comm_exposed_critical_s == pytest.approx(0.1 * 5.0)  # the step split's critical rank
    assert measured.row()["scaling"] == "weak" and measured.setting("model.width") == 2
    assert measured.setting("dataset.image_size") is None and measured.devices == ("H100", "H100")


@pytest.mark.parametrize(
    "written",
    [
        {"status": "diverged"},
        {"final": False},
        {"truncate": True},
        {"times": ()},  # no epoch
        {"run_json": False},
    ],
)
def test_only_a_cell_that_finished_ok_with_a_steady_epoch_is_read(tmp_path, written):
    assert cell_times.read(write_cell(tmp_path, **written)) is None
