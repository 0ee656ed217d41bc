"""The bill of the real workflow on CPU ranks (config/bill.py): a dry run writes bill.csv and says it in
one line before any job, from the formula while nothing is measured; once a first cell finished, the
next start predicts the others from it, and the run that trained it kept the prediction it started with."""

from __future__ import annotations

import csv
import json
from datetime import datetime

import pytest
from conftest import run_snakemake, tiny_config
from paired_cells import study_data

CELL = "results/runs/torch/native/g1/s1"


def bill_rows(workdir) -> dict[tuple[str, str], dict]:
    with open(workdir / "results" / "plan" / "bill.csv", newline="") as handle:
        return {(row["gpus"], row["seed"]): row for row in csv.DictReader(handle)}


def bill_line(result) -> str:
    (line,) = [text for text in result.stderr.splitlines() if text.startswith("bill: ")]
    return line


@pytest.mark.integration
def test_a_dry_run_bills_the_formula_and_a_first_cell_predicts_the_rest(tmp_path_factory, tmp_path):
    matrix = {"frameworks": ["torch"], "backends": ["native"], "gpus": [1, 2], "seeds": [1, 2]}
    config = tiny_config(training={"epochs": 2}, matrix=matrix)
    study_data(tmp_path_factory, tmp_path, config)  # the prepared data, made once by the workflow
    dry = run_snakemake(tmp_path, config, "-n")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert bill_line(dry).startswith("bill: 4 cells to run, at most ")
    assert "GPU-hours by the cluster.time formula (an upper bound: nothing measured yet)" in bill_line(dry)
    rows = bill_rows(tmp_path)
    assert {(row["state"], row["source"]) for row in rows.values()} == {("to run", "formula")}
    plan = tmp_path / "results" / "plan"
    assert not (plan / "submitted.csv").exists()  # a dry run starts nothing

    first = run_snakemake(tmp_path, config, "--cores", "2", f"{CELL}/run.json")
    assert first.returncode == 0, first.stderr[-3000:]
    kept = (plan / "submitted.csv").read_text()
    assert kept.count(",formula,") == 4  # what each cell to run started with, that run's bill

    again = run_snakemake(tmp_path, config, "-n")
    assert again.returncode == 0, again.stderr[-3000:]
    rows = bill_rows(tmp_path)
    assert rows[("1", "1")]["state"] == "finished"
    same, more = rows[("1", "2")], rows[("2", "1")]
    assert (same["source"], same["method"]) == ("this study", "measured at 1 GPUs (1 cell(s))")
    # one measured cell at its own count: what its job held (launch.py's job_s, from before the
    # framework's imports: more than rank 0's start to end) is the prediction
    run = json.loads((tmp_path / CELL / "run.json").read_text())
    took = run["job_s"]
    ranks = (datetime.fromisoformat(run["end"]) - datetime.fromisoformat(run["start"])).total_seconds()
    assert run["job_s_source"] == "launch" and took > ranks
    assert float(same["predicted_s"]) == pytest.approx(took, rel=1e-3)
    assert "cold start" in same["note"]  # the study's only cell was its first on this host
    assert (more["source"], more["method"]) == ("this study", "scaled by the work from 1 GPUs")
    assert "no extrapolation of the scaling" in more["note"] and float(more["predicted_s"]) < took
    line = bill_line(again)
    assert line.startswith("bill: 3 cells to run, ") and "from this study's finished cells (3); 1 finished" in line
    assert (plan / "submitted.csv").read_text() == kept  # the dry run kept it as it was
