"""The history through the real workflow, from real CPU studies: the suite's finished study
(conftest.finished_study) is a site's earlier study in the history; its native cells are run again
with a planted slow collective (SCALEBENCH_FAULT slow_reduce: rank 1 of each 2-rank cell hands its
gradients to every reduction of the second epoch SLOW_S late, so its peer waits in the collective).
The new study's History section holds both studies and the drop of native's 2-GPU efficiency, the
gate fails naming it, and `snakemake history` adds the study once. Only the new study's four cells
train; the earlier study is read in place (history.add copies its tables)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import TINY_STUDY_MATRIX, copy_study, read_report, run_snakemake, tiny_study_config
from scalebench.analysis import history

pytestmark = pytest.mark.integration

SLOW_S = 5.0  # each of the 4 steps of epoch 2: 20 s against a 2-rank cell's few seconds of training


def test_a_history_of_real_studies_shows_a_planted_slow_collective_and_the_gate_fails_on_it(finished_study, tmp_path):
    place = tmp_path / "history"
    earlier = history.add(finished_study / "results", place)
    slow = tmp_path / "slow"
    # the finished study's dataset settings, so its prepared data (dates kept): only the cells train here
    copy_study(finished_study / "results" / "data", slow / "results" / "data")
    config = tiny_study_config()
    config["matrix"] = {**TINY_STUDY_MATRIX, "backends": ["native"]}
    config["history"] = {"path": str(place)}
    fault = {"SCALEBENCH_FAULT": f"slow_reduce:1:{SLOW_S}:2"}
    run = run_snakemake(slow, config, "--cores", "2", env=fault)
    assert run.returncode == 0, run.stderr[-3000:]

    summary = slow / "results" / "summary"
    series = pd.read_csv(summary / "history.csv")
    assert sorted(series["study"].unique()) == sorted(
        [earlier.study_id, history.id_of((summary / "runs.csv").read_bytes())]
    )
    native = series[(series["backend"] == "native") & (series["gpus"] == 2)].set_index(["figure", "this_study"])
    # observed: the earlier study's efficiency from its own cells, this one's from the slowed ones
    assert native.loc[("efficiency", True), "value"] < 0.5 * native.loc[("efficiency", False), "value"]
    assert series["site"].nunique() == 1  # one site: the CPUs of this machine
    # two studies: no series is long enough for a change point, and the section says so
    assert pd.read_csv(summary / "changes.csv").empty
    table = (slow / "results" / "tables" / "changes.html").read_text()
    assert "The history holds 2 studies" in table and "No series has 4 studies yet (2 in the longest)" in table

    gate = run_snakemake(slow, config, "--cores", "1", "gate")
    judged = json.loads((summary / "gate.json").read_text())
    assert gate.returncode != 0 and not judged["passed"], judged
    assert judged["reference"]["study"] == earlier.study_id
    assert "efficiency of torch/native at 2 GPUs" in judged["regressed_beyond_band"]

    added = run_snakemake(slow, config, "--cores", "1", "history")
    assert added.returncode == 0, added.stderr[-3000:]
    entries, skipped = history.read(place)
    assert len(entries) == 2 and skipped == []

    # the History section of the report, drawn again now that the study is in the history
    report = slow / "report.html"
    drawn = run_snakemake(slow, config, "--cores", "1", "--report", str(report), "--report-after-run")
    assert drawn.returncode == 0, drawn.stderr[-3000:]
    assert "rule train" not in drawn.stdout + drawn.stderr
    html = read_report(report)
    assert "history.png" in html and "changes.html" in html and "history.change_alpha" in html
