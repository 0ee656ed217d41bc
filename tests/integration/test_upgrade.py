"""A finished study survives an upgrade: no cell is retrained, or its results deleted, because the
project changed around it, and exactly the cells whose settings changed are retrained.

The study is a fixture finished by this project at commit 107b0bb, before the train rule stopped
depending on Snakemake's provenance records: tests/fixtures/study-107b0bb.tar.gz holds its
config, results (prepared data, two cells, tables, figures) and Snakemake's metadata, with the
files' times (tests/fixtures/README.md says how it was made). It is opened by a copy of this
checkout at another path whose schema has keys added with defaults (a release), from a Python
environment at another path (a rebuilt environment).
"""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml
from conftest import BIN, REPO, read_report, tool_env
from scalebench.analysis import collect

pytestmark = pytest.mark.integration

FIXTURE = REPO / "tests" / "fixtures" / "study-107b0bb.tar.gz"
CHECKOUT = ("Snakefile", "rules", "config", "workflow", "report", "profiles", "envs")
CELLS = ("torch/native/g1/s1", "torch/horovod/g1/s1")
# Keys a release adds, each with a default that reproduces what the study ran with.
ADDED_KEYS = {
    ("training",): {"new_option": {"type": "boolean", "default": False}},
    ("training", "loader"): {"new_option": {"type": "integer", "default": 0}},
    ("dataset",): {"new_option": {"type": "boolean", "default": False}},
    ("dataset", "synthetic"): {"noise": {"type": "number", "default": 0.0}},
    ("cluster",): {"new_option": {"type": ["string", "null"], "default": None}},
}
DATA_RULES = ("download_dataset", "extract_dataset", "synthetic_dataset", "preprocess_dataset")


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory) -> tuple[Path, Path]:
    """(a copy of this checkout elsewhere with keys added to its schema, a Python environment
    elsewhere that has this one's packages)."""
    root = tmp_path_factory.mktemp("elsewhere")
    checkout = root / "checkout"
    checkout.mkdir()
    for part in CHECKOUT:
        source = REPO / part
        if source.is_dir():
            shutil.copytree(source, checkout / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, checkout / part)
    schema_path = checkout / "config" / "schema.yaml"
    schema = yaml.safe_load(schema_path.read_text())
    for path, keys in ADDED_KEYS.items():
        node = schema
        for part in path:
            node = node["properties"][part]
        node["properties"].update({name: {"description": "added by a release", **spec} for name, spec in keys.items()})
    schema_path.write_text(yaml.safe_dump(schema, sort_keys=False))
    env = root / "env"
    subprocess.run([str(BIN / "python"), "-m", "venv", "--without-pip", str(env)], check=True)
    (site,) = (BIN.parent / "lib").glob("python3*/site-packages")
    (new_site,) = (env / "lib").glob("python3*/site-packages")
    (new_site / "scalebench-test.pth").write_text(f"{site}\n")
    # its frameworks' environments where ./install.sh puts them, beside it (these, by their own paths)
    (env / "frameworks").mkdir()
    for framework in ("torch", "tensorflow"):
        (env / "frameworks" / framework).symlink_to(BIN.parent / "frameworks" / framework)
    return checkout, env / "bin" / "python"


@pytest.fixture
def study(tmp_path) -> Path:
    """The finished study, unpacked with its files' times."""
    with tarfile.open(FIXTURE) as archive:
        archive.extractall(tmp_path / "study", filter="tar")
    return tmp_path / "study"


def snakemake(upgraded, study: Path, *args: str) -> subprocess.CompletedProcess:
    checkout, python = upgraded
    command = [str(python), "-m", "snakemake", "-s", str(checkout / "Snakefile"), "--configfile", "study.yaml", *args]
    ran = subprocess.run(command, cwd=study, capture_output=True, text=True, timeout=900, env=tool_env())
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    return ran


def planned_jobs(ran: subprocess.CompletedProcess) -> dict[str, int]:
    """A dry run's job counts by rule (Snakemake's 'Job stats' table)."""
    lines = ran.stdout.splitlines()
    if "Nothing to be done" in ran.stdout + ran.stderr or "Job stats:" not in lines:
        return {}
    counts = {}
    for line in lines[lines.index("Job stats:") + 3 :]:
        name, _, count = line.partition(" ")
        if not name or name == "total":
            break
        counts[name] = int(count)
    return counts


def digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "settings.json"
    }


def test_an_upgrade_retrains_nothing_and_the_report_reads_the_old_records(upgraded, study):
    kept = {cell: digests(study / "results" / "runs" / cell) for cell in CELLS}
    data = digests(study / "results" / "data")
    jobs = planned_jobs(snakemake(upgraded, study, "-n"))
    assert "train" not in jobs and not set(DATA_RULES) & set(jobs), jobs
    assert jobs.get("collect_runs") == 1  # the analysis reruns: the project's code changed

    snakemake(upgraded, study, "--cores", "2")
    assert {cell: digests(study / "results" / "runs" / cell) for cell in CELLS} == kept
    assert digests(study / "results" / "data") == data
    runs = {f"{r['framework']}/{r['backend']}": r for r in csv_rows(study / "results" / "summary" / "runs.csv")}
    assert [runs[f"torch/{backend}"]["status"] for backend in ("native", "horovod")] == ["ok", "ok"]
    assert csv_rows(study / "results" / "summary" / "incomplete.csv") == []
    # the old records are read: their measured values are there, never 0 for a field they lack
    assert float(runs["torch/native"]["iou"]) > 0 and float(runs["torch/native"]["steady_epoch_s"]) > 0
    # what the steps did was not observed then: empty with the reason, never the settings
    old = runs["torch/native"]
    assert (old["compute_dtype"], old["compiled_graphs"], old["observed_reason"]) == ("", "", collect.NOT_OBSERVED)
    rates = [row for row in csv_rows(study / "results" / "summary" / "epochs.csv") if row["backend"] == "native"]
    assert rates and all(row["lr"] == "" and float(row["scheduled_lr"]) > 0 for row in rates)
    # cells from before the step split still enter the verdicts, where their throughput is
    (verdict,) = [
        row for row in csv_rows(study / "results" / "summary" / "verdicts.csv") if row["kind"] == "throughput"
    ]
    assert {verdict["a"], verdict["b"]} == {"native", "horovod"} and verdict["verdict"] == "one seed: no verdict"
    assert csv_rows(study / "results" / "summary" / "waterfall.csv") == []  # one GPU count: nothing to explain
    snakemake(upgraded, study, "--report", "report.html")
    assert (study / "report.html").stat().st_size > 100_000
    read_report(study / "report.html")
    assert planned_jobs(snakemake(upgraded, study, "-n", "--cores", "2")) == {}


def test_changed_settings_retrain_exactly_the_cells_they_concern(upgraded, study):
    def trains(*overrides: str) -> tuple[int, str]:
        ran = snakemake(upgraded, study, "-n", *(["--config", *overrides] if overrides else []))
        return planned_jobs(ran).get("train", 0), ran.stderr

    count, said = trains('training={"epochs": 3}')
    assert count == 2 and said.count("training.epochs: 2 -> 3") == 2
    count, said = trains('training={"horovod": {"backward_passes_per_step": 2}}')
    assert count == 1 and "torch/horovod/g1/s1 was trained with other settings" in said
    count, _ = trains('matrix={"seeds": [1, 2]}')  # only the new seed's two cells
    assert count == 2
    count, said = trains('training={"new_option": true}')  # a new key set away from its default
    assert count == 2 and said.count("training.new_option: false -> true") == 2
    # none of those dry runs changed what the study's own settings plan
    assert trains()[0] == 0
    # Snakemake's params trigger, asked for on the command line, would retrain the old cells: said
    asked = snakemake(upgraded, study, "-n", "--rerun-triggers", "mtime", "params")
    assert planned_jobs(asked).get("train") == 2
    assert "warning: rerun triggers params are on; profiles/default sets `rerun-triggers: mtime`" in asked.stderr


def test_lost_metadata_keeps_finished_cells_and_retrains_incomplete_ones(study):
    # this checkout as it is (a cell trains here: the copy's added keys mean nothing to a rank)
    upgraded = (REPO, BIN / "python")
    native, horovod = (study / "results" / "runs" / cell for cell in CELLS)
    damaged = next((study / ".snakemake" / "metadata").iterdir())
    damaged.write_text("{not json")
    assert "train" not in planned_jobs(snakemake(upgraded, study, "-n"))
    shutil.rmtree(study / ".snakemake")
    assert "train" not in planned_jobs(snakemake(upgraded, study, "-n"))

    # a job killed before its final record, and a record of a version too old to read
    metrics = native / "metrics.jsonl"
    metrics.write_text("".join(line for line in metrics.read_text().splitlines(True) if '"final"' not in line))
    (horovod / "run.json").write_text(json.dumps({"framework": "torch", "epochs": 2}))
    kept = digests(horovod)
    ran = snakemake(upgraded, study, "-n")
    assert planned_jobs(ran).get("train") == 1
    assert "torch/native/g1/s1 is incomplete (metrics.jsonl has no final record" in ran.stderr
    assert "torch/horovod/g1/s1 is kept but cannot be read" in ran.stderr

    snakemake(upgraded, study, "--cores", "2", "results/summary/incomplete.csv")  # the cell, and the table read here
    assert json.loads((native / "run.json").read_text())["status"] == "ok" and digests(horovod) == kept
    (row,) = csv_rows(study / "results" / "summary" / "incomplete.csv")
    assert (row["item"], row["status"]) == ("torch/horovod/g1/s1", "unreadable")
    assert "too old to read" in row["reason"] and row["rerun"].endswith(
        "results/runs/torch/horovod/g1/s1/metrics.jsonl"
    )


def csv_rows(path: Path) -> list[dict]:
    with open(path) as handle:
        return list(csv.DictReader(handle))
