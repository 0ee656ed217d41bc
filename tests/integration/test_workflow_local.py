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


def test_structured_config_overrides_take_the_schemas_types(tmp_path):
    """`--config matrix={...}` as the README prints it: Snakemake hands the numbers over as strings."""
    config = tiny_config(matrix={"frameworks": ["tensorflow"], "backends": ["native"], "gpus": [1], "seeds": [1]})
    result = run_snakemake(
        tmp_path,
        config,
        "-n",
        "--config",
        'matrix={"gpus": [1, 2, 4], "frameworks": ["torch"], "backends": ["native", "horovod"], "seeds": [1, 2]}',
        'training={"epochs": 2, "base_lr": 0.5, "batch_norm": false, "threads_per_rank": null}',
    )
    assert result.returncode == 0, result.stderr
    assert job_counts(result.stdout)["train"] == 12
    assert "results/runs/torch/horovod/g4/s2/metrics.jsonl" in result.stdout


def test_config_override_that_does_not_fit_names_the_key(tmp_path):
    result = run_snakemake(tmp_path, tiny_config(), "-n", "--config", 'matrix={"gpus": [1, "two"]}')
    assert result.returncode != 0
    # a dry run logs its errors to stdout
    assert "config key 'matrix.gpus[1]': 'two' is not of type 'integer'" in result.stdout + result.stderr


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
