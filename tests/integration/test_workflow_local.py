"""The real workflow on the local executor: the DAG, config errors before any job, a tiny run to the report."""

from __future__ import annotations

import re

import pytest
from conftest import run_snakemake, tiny_config


def job_counts(output: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", output, re.MULTILINE)}


def test_dry_run_lists_one_training_job_per_cell(tmp_path):
    config = tiny_config(
        matrix={
            "frameworks": ["torch", "tensorflow"],
            "backends": ["native", "horovod"],
            "gpus": [1, 2, 4, 8, 16],
            "seeds": [1, 2, 3],
        },
        dataset={"synthetic": {"count": 400}},
        training={"batch_per_gpu": 2},
    )
    result = run_snakemake(tmp_path, config, "-n")
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    assert counts["train"] == 60
    assert counts["synthetic_dataset"] == 1 and counts["preprocess_dataset"] == 1


def test_bad_config_stops_before_any_job(tmp_path):
    config = tiny_config(training={"batch_per_gpu": 0, "epochz": 3})
    result = run_snakemake(tmp_path, config, "--cores", "1")
    assert result.returncode != 0
    assert "unknown config key 'training.epochz'" in result.stderr
    assert "config key 'training.batch_per_gpu': 0 is less than the minimum of 1" in result.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.integration
def test_tiny_study_runs_to_the_report(tmp_path):
    config = tiny_config(training={"epochs": 2})
    result = run_snakemake(tmp_path, config, "--cores", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    runs = (tmp_path / "results" / "summary" / "runs.csv").read_text().splitlines()
    assert len(runs) == 3 and all(",ok," in row for row in runs[1:])
    assert (tmp_path / "results" / "figures" / "speedup.png").stat().st_size > 10_000
    report = tmp_path / "report.html"
    result = run_snakemake(tmp_path, config, "--report", str(report))
    assert result.returncode == 0, result.stderr[-3000:]
    html = report.read_text()
    assert "speedup.png" in html and "runs.csv" in html
