"""Partial reports through the real workflow: with `--config partial=true` the analysis uses the
cells that finished and lists the others; without it, the missing cells are still scheduled."""

from __future__ import annotations

import csv
import json
import re

import pytest
from conftest import REPO, read_report, run_snakemake, tiny_config
from paired_cells import study_data
from scalebench import backends

pytestmark = pytest.mark.integration


def job_counts(output: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", output, re.MULTILINE)}


def finished_cell(folder, gpus: int) -> None:
    """The outputs a finished train job leaves (written after the prepared data, so newer; the planner
    dates a finished cell's settings.json before its outputs, config/freshness.py)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        {
            "type": "epoch",
            "epoch": e,
            "loss": 0.5 / e,
            "lr": 0.001,
            "epoch_time_s": 2.0 / gpus,
            "images_per_s": 10.0,
            "data_wait_s": 0.1,
            "peak_mem_mb": 300.0,
            "steps": 8,
            "train_time_s": 2.0 * e / gpus,
            "val_iou": None,
            "val_loss": None,
        }
        for e in (1, 2)
    ]
    lines.append(
        {
            "type": "final",
            "status": "ok",
            "setup_s": 1.0,
            "train_time_s": 4.0 / gpus,
            "iou": 0.7,
            "test_loss": 0.3,
            "test_time_s": 0.2,
            "epochs_completed": 2,
            "stopped_at_target": False,
        }
    )
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    framework, backend = folder.parts[-4:-2]
    cell = {"framework": framework, "backend": backend, "gpus": gpus, "seed": int(folder.name[1:])}
    (folder / "run.json").write_text(json.dumps({**cell, "status": "ok", "hosts": ["vm"], "config_hash": "c"}))
    (folder / "train.log").write_text("done\n")


def test_partial_report_from_the_finished_cells(tmp_path_factory, tmp_path):
    config = tiny_config(training={"epochs": 2}, matrix={"gpus": [1, 2, 4], "seeds": [1]})
    study_data(tmp_path_factory, tmp_path, config)  # the prepared data, made once by the workflow
    runs = tmp_path / "results" / "runs" / "torch" / "native"
    finished_cell(runs / "g1" / "s1", 1)
    finished_cell(runs / "g2" / "s1", 2)
    (runs / "g4" / "s1").mkdir(parents=True, exist_ok=True)
    (runs / "g4" / "s1" / "train.log").write_text("Traceback: killed\n")  # failed: Snakemake removed the outputs

    normal = run_snakemake(tmp_path, config, "-n")
    assert normal.returncode == 0, normal.stderr[-3000:]
    assert job_counts(normal.stdout)["train"] == 1  # without the switch the failed cell is retried

    partial = run_snakemake(tmp_path, config, "-n", "--config", "partial=true")
    assert partial.returncode == 0, partial.stderr[-3000:]
    assert "train" not in job_counts(partial.stdout)

    result = run_snakemake(tmp_path, config, "--cores", "2", "--config", "partial=true")
    assert result.returncode == 0, result.stderr[-3000:]
    with open(tmp_path / "results" / "summary" / "incomplete.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["item"], r["status"]) for r in rows] == [("torch/native/g4/s1", "failed")]
    # the study's own invocation without partial, from its work directory (paths absolute)
    study = f"-s {REPO / 'Snakefile'} --directory {tmp_path} --configfile {tmp_path / 'test-config.yaml'} --cores 2"
    target = "results/runs/torch/native/g4/s1/metrics.jsonl"
    assert rows[0]["rerun"] == f"cd {tmp_path} && snakemake {study} -- {target}"  # -- ends the options
    with open(tmp_path / "results" / "summary" / "scaling.csv") as handle:
        scaling = {row["gpus"]: row for row in csv.DictReader(handle)}
    assert float(scaling["2"]["speedup_train_time"]) == pytest.approx(2.0)
    assert scaling["4"]["excluded_status"] == "failed 1"

    report = tmp_path / "report.html"
    result = run_snakemake(tmp_path, config, "--report", str(report), "--config", "partial=true")
    assert result.returncode == 0, result.stderr[-3000:]
    html = read_report(report)
    for name in ("speedup.png", "completeness.png", "predictions.png", "incomplete.html", "runs.html"):
        assert name in html
    assert "This is a partial report" in html


def test_the_report_lists_the_left_out_cells_and_scales_fsdp_from_its_smallest_count(tmp_path_factory, tmp_path):
    config = tiny_config(
        training={"epochs": 2}, matrix={"frameworks": ["torch"], "backends": ["native", "fsdp"], "gpus": [1, 2, 4]}
    )
    study_data(tmp_path_factory, tmp_path, config)  # the prepared data, made once by the workflow
    runs = tmp_path / "results" / "runs" / "torch"
    for backend, gpus in (("native", 1), ("native", 2), ("native", 4), ("fsdp", 2), ("fsdp", 4)):
        finished_cell(runs / backend / f"g{gpus}" / "s1", gpus)
    result = run_snakemake(tmp_path, config, "--cores", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "left out: torch/fsdp g1: fsdp needs at least 2 ranks" in result.stderr
    with open(tmp_path / "results" / "summary" / "incomplete.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["item"], r["status"], r["rerun"]) for r in rows] == [("torch/fsdp g1", "left out", "")]
    assert rows[0]["reason"] == "fsdp needs at least 2 ranks (with one there is nothing to shard)"
    with open(tmp_path / "results" / "summary" / "scaling.csv") as handle:
        scaling = {(row["backend"], row["gpus"]): row for row in csv.DictReader(handle)}
    assert scaling[("fsdp", "4")]["base_gpus"] == "2" and scaling[("native", "4")]["base_gpus"] == "1"
    assert float(scaling[("fsdp", "4")]["speedup_train_time"]) == pytest.approx(2.0)
    table = (tmp_path / "results" / "tables" / "incomplete.html").read_text()
    assert "torch/fsdp g1" in table and "fsdp needs at least 2 ranks" in table

    report = tmp_path / "report.html"
    result = run_snakemake(tmp_path, config, "--report", str(report))
    assert result.returncode == 0, result.stderr[-3000:]
    html = read_report(report)
    assert backends.about()["fsdp"] in html  # the intro: the registry's sentence about each backend
    assert "failed, missing and left-out cells" in html
