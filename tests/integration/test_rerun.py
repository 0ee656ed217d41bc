"""The rerun command the report prints rebuilds exactly the lost cell, with the study's own settings.

A study kept in its own config file with --config overrides, run from its own folder as a
user would; one cell is lost; the partial report prints the command; the command runs as
printed (from another directory), and nothing else changes.
"""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
import subprocess

import pytest
import yaml
from conftest import BIN, REPO, tiny_config, tool_env

pytestmark = pytest.mark.integration

OVERRIDE = 'training={"epochs": 3, "lr_scaling": "sqrt"}'


def snakemake(cwd, *args: str) -> subprocess.CompletedProcess:
    command = [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=1800, env=tool_env())


def digests(root) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def incomplete_rows(study) -> list[dict]:
    with open(study / "results" / "summary" / "incomplete.csv") as handle:
        return list(csv.DictReader(handle))


def test_the_printed_rerun_command_rebuilds_only_the_lost_cell_as_the_study_made_it(tmp_path):
    study = tmp_path / "my study"
    study.mkdir()
    (study / "study.yaml").write_text(yaml.safe_dump(tiny_config(training={"epochs": 2})))
    options = ["--configfile", "study.yaml", "--config", OVERRIDE]
    first = snakemake(study, *options, "--cores", "2")
    assert first.returncode == 0, first.stderr[-3000:]

    lost = study / "results" / "runs" / "torch" / "native" / "g2" / "s1"
    shutil.rmtree(lost)
    partial = snakemake(study, *options, "partial=true", "--cores", "2")
    assert partial.returncode == 0, partial.stderr[-3000:]
    (row,) = incomplete_rows(study)
    assert (row["item"], row["status"]) == ("torch/native/g2/s1", "missing")
    command = row["rerun"]
    assert "partial" not in command and OVERRIDE in command.replace("'", "")

    kept = digests(study / "results" / "runs" / "torch" / "native" / "g1") | digests(study / "results" / "data")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    rerun = subprocess.run(
        command, shell=True, cwd=elsewhere, capture_output=True, text=True, timeout=1800, env=tool_env()
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert rerun.stderr.count("rule train:") + rerun.stdout.count("rule train:") == 1

    run = json.loads((lost / "run.json").read_text())
    (prepared,) = (study / "results" / "data" / "prepared").iterdir()
    assert run["status"] == "ok" and run["data_key"] == prepared.name
    epochs = [json.loads(line) for line in (lost / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in epochs if r["type"] == "epoch"] == [1, 2, 3]  # the override, not the file's 2
    assert digests(study / "results" / "runs" / "torch" / "native" / "g1") | digests(study / "results" / "data") == kept

    full = snakemake(study, *options, "--cores", "2")
    assert full.returncode == 0, full.stderr[-3000:]
    assert incomplete_rows(study) == []
    report = snakemake(study, *options, "--report", "report.html")
    assert report.returncode == 0, report.stderr[-3000:]
    assert (study / "report.html").stat().st_size > 100_000
