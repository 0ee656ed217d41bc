"""A cell's time from its records, read once for runs.csv and the bill: the job's wall launch.py
recorded (empty with the reason in an older record), the run time from run.json's start to its end
(empty with the reason where a resumed run or an unended one cannot tell), a finished cell as the
bill reads it (only cells that finished ok with a steady epoch), and the cold starts among them."""

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
    assert measured.steady_epoch_s == 5.0 and measured.fixed_s == pytest.approx(100 - 4 * 5.0)
    # no job wall recorded (an older record): run.json's span stands in; start-up 100 - 25, first epoch 10 - 5
    assert not measured.from_job and measured.span_s == 100.0
    assert (measured.startup_s, measured.first_extra_s) == (pytest.approx(75.0), pytest.approx(5.0))
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


def test_the_job_wall_is_launchs_job_s_and_an_older_record_says_it_has_none(tmp_path):
    job = {**TIMES, "job_s": 104.5, "job_s_source": "launch", "job_attempts": 1, "job_s_reason": None}
    assert cell_times.job_seconds(job) == (104.5, "launch", "")
    seconds, source, why = cell_times.job_seconds(TIMES)
    assert math.isnan(seconds) and source == "" and why == cell_times.NO_JOB_WALL
    killed = {"job_s": None, "job_s_reason": "resumed after epoch 2: the attempt before left no job wall"}
    assert cell_times.job_seconds(killed)[2] == killed["job_s_reason"]
    measured = cell_times.read(write_cell(tmp_path, gpus=2, run_extra=job))
    # the job's wall, not run.json's span: start-up 104.5 - 25 s of epochs
    assert measured.from_job and measured.span_s == 104.5 and measured.startup_s == pytest.approx(79.5)


def test_each_frameworks_first_cell_on_a_host_is_a_cold_start(tmp_path):
    def at(seconds: int, host: str, seed: int, framework: str = "torch", backend: str = "native"):
        start = f"2025-01-01T10:00:{seconds:02d}+00:00"
        run = {"start": start, "end": "2025-01-01T10:05:00+00:00", "launch_host": host}
        return cell_times.read(write_cell(tmp_path, framework, backend, seed=seed, run_extra=run))

    cells = [at(30, "n1", 1), at(10, "n1", 2, backend="horovod"), at(20, "n2", 3), at(40, "n1", 4, "tensorflow")]
    marked = cell_times.with_cold_starts(cells)
    # torch on n1: the horovod cell started first; torch on n2 and tensorflow on n1: their only cells
    assert [cell.cold for cell in marked] == [False, True, True, True]
    assert [cell.seed for cell in marked] == [1, 2, 3, 4]
