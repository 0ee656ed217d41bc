"""The rerun command the report prints rebuilds exactly the lost cell, with the study's own settings.

A study kept in its own config file with --config overrides, run from its own folder as a
user would; one cell is lost; the partial report prints the command; the command runs as
printed (from another directory), and nothing else changes. The studies here start from a copy
of the suite's finished study (conftest.finished_study), whose cells have the settings they ask for.
"""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
import subprocess

import pytest
import yaml
from conftest import BIN, REPO, copy_study, read_report, tiny_config, tiny_study_config, tool_env
from paired_cells import study_data
from scalebench import config as sb_config
from scalebench import rerun as sb_rerun
from scalebench.data import keys as sb_keys

pytestmark = pytest.mark.integration

# the finished study's training (conftest.tiny_study_config), over a file that says otherwise
OVERRIDE = 'training={"epochs": 2, "batch_per_gpu": 4}'
# what the steps before the last read: collect_runs' tables (the cells and the incomplete ones), not the figures
INCOMPLETE = "results/summary/incomplete.csv"


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


def test_the_printed_rerun_command_rebuilds_only_the_lost_cell_as_the_study_made_it(finished_study, tmp_path):
    # the finished study's cells torch/native g1 and g2 of seed 1 (and others this study leaves alone);
    # the one-rank cell is the one lost, so the rerun starts one rank where g2 would start torchrun, two
    # ranks and their collective benchmark, none of which the command's faithfulness depends on
    study = copy_study(finished_study, tmp_path / "my study")
    # one epoch of two images a step in the file, two of four by the override: the cells kept are the
    # override's (the partial report below finds none stale), and the rerun cell must train the override's
    (study / "study.yaml").write_text(yaml.safe_dump(tiny_config(training={"epochs": 1, "batch_per_gpu": 2})))
    # --configfile last, as a study kept in its own file is run: the printed target must not join it
    options = ["--config", OVERRIDE, "--configfile", "study.yaml"]

    lost = study / "results" / "runs" / "torch" / "native" / "g1" / "s1"
    shutil.rmtree(lost)
    partial = snakemake(
        study, "--config", OVERRIDE, "partial=true", "--configfile", "study.yaml", "--cores", "2", INCOMPLETE
    )
    assert partial.returncode == 0, partial.stderr[-3000:]
    (row,) = incomplete_rows(study)
    assert (row["item"], row["status"]) == ("torch/native/g1/s1", "missing")
    command = row["rerun"]
    assert "partial" not in command and OVERRIDE in command.replace("'", "")

    kept = digests(study / "results" / "runs" / "torch" / "native" / "g2") | digests(study / "results" / "data")
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
    assert run["settings"]["training"]["batch_per_gpu"] == 4 and run["settings"]["training"]["epochs"] == 2
    epochs = [json.loads(line) for line in (lost / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in epochs if r["type"] == "epoch"] == [1, 2]  # the override, not the file's 1
    assert digests(study / "results" / "runs" / "torch" / "native" / "g2") | digests(study / "results" / "data") == kept

    # the rest of the study and its report, in one Snakemake start (--report-after-run): the copy's
    # landing page exists before it starts, so the report's first page is the one a later --report reads
    full = snakemake(study, *options, "--cores", "2", "--report", "report.html", "--report-after-run")
    assert full.returncode == 0, full.stderr[-3000:]
    assert incomplete_rows(study) == []
    assert (study / "report.html").stat().st_size > 100_000
    read_report(study / "report.html")


# Options that take one or more values: a target printed right after one of them would be read
# as another of its values (a second config file, a resource), unless the command ends them.
MANY_VALUED = {
    "configfile": [],
    "config": ["--config", 'training={"epochs": 2}'],
    "set-resources": ["--set-resources", "preprocess_dataset:mem_mb=1000"],
    "default-resources": ["--default-resources", "mem_mb=1000", "disk_mb=1000"],
    "set-threads": ["--set-threads", "preprocess_dataset=1"],
}


@pytest.mark.parametrize("last", list(MANY_VALUED))
def test_a_rerun_command_runs_as_printed_whatever_option_the_study_ended_with(tmp_path_factory, tmp_path, last):
    study = tmp_path / "study"
    config = tiny_config()
    # the dataset made once (paired_cells.study_data) without its arrays: the command must build them here
    study_data(tmp_path_factory, study, config)
    shutil.rmtree(study / "results" / "data" / "prepared")
    (study / "my-study.yaml").write_text(yaml.safe_dump(config))
    argv = [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "--cores", "1"]
    argv += ["--configfile", "my-study.yaml", *MANY_VALUED[last]]
    invocation = sb_rerun.from_argv(argv, str(study), [str(study / "my-study.yaml")], str(REPO / "Snakefile"))
    resolved = sb_config.validate(config, sb_config.load_schema(REPO / "config" / "schema.yaml"))
    target = f"results/data/prepared/{sb_keys.prepared_key(resolved['dataset'])}/manifest.json"
    command = invocation.command([target])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ran = subprocess.run(
        ["bash", "-c", command], cwd=elsewhere, capture_output=True, text=True, timeout=600, env=tool_env()
    )
    assert ran.returncode == 0, f"{command}\n{ran.stderr[-3000:]}"
    assert (study / target).is_file()


def test_changed_settings_are_named_and_the_cells_retrained_or_marked_stale(finished_study, tmp_path):
    # the finished study's one-rank native cells of two seeds, with the settings it trained them with
    study = copy_study(finished_study, tmp_path / "study")
    config = tiny_study_config()
    config["matrix"].update(backends=["native"], gpus=[1])
    config["training"]["base_lr"] = 0.002
    # the retrained one-rank cells started by the launcher's Python itself (rank 0 of 1), not by torchrun:
    # a launcher is no cell setting (config/cell_settings.py), so the kept cells are judged as before
    config["launchers"] = {"local": {"torch_native": "{python} {program}"}}
    changed = write(study / "c.yaml", config)
    dry = snakemake(study, "--configfile", changed, "-n")
    assert dry.returncode == 0, dry.stderr[-3000:]
    for seed in (1, 2):
        assert (
            f"warning: torch/native/g1/s{seed} was trained with other settings (training.base_lr: 0.001 -> 0.002); "
            "a run that builds it retrains it" in dry.stderr
        )
    assert dry.stdout.count("rule train:") == 2  # their settings.json is newer than their outputs
    # partial=true reports what exists and retrains nothing: the changed cells are marked stale
    partial = snakemake(study, "--configfile", changed, "--config", "partial=true", "--cores", "1", INCOMPLETE)
    assert partial.returncode == 0, partial.stderr[-3000:]
    assert "rule train:" not in partial.stdout + partial.stderr
    rows = incomplete_rows(study)
    assert [(r["item"], r["status"]) for r in rows] == [
        ("torch/native/g1/s1", "stale"),
        ("torch/native/g1/s2", "stale"),
        ("all of the above", ""),
    ]
    assert "training.base_lr: 0.001 -> 0.002" in rows[0]["reason"] and "--force" in rows[0]["rerun"]
    # the study's own run retrains them with the new settings
    again = snakemake(study, "--configfile", changed, "--cores", "2", INCOMPLETE)
    assert again.returncode == 0, again.stderr[-3000:]
    run = json.loads((study / "results" / "runs" / "torch" / "native" / "g1" / "s1" / "run.json").read_text())
    assert run["settings"]["training"]["base_lr"] == 0.002 and incomplete_rows(study) == []


def test_other_dataset_settings_prepare_beside_and_a_failed_preparation_deletes_nothing(tmp_path_factory, tmp_path):
    # tiny_config()'s arrays, prepared by the workflow once (paired_cells.study_data)
    study_data(tmp_path_factory, tmp_path, tiny_config())
    write(tmp_path / "a.yaml", tiny_config())
    prepared = tmp_path / "results" / "data" / "prepared"
    (arrays,) = prepared.iterdir()
    before = digests(arrays)
    other = tiny_config(dataset={"image_size": [48, 32]})
    second = snakemake(tmp_path, "--configfile", write(tmp_path / "b.yaml", other), "--cores", "1", "prepared_data")
    assert second.returncode == 0, second.stderr[-3000:]
    assert len(list(prepared.iterdir())) == 2 and digests(arrays) == before
    (tmp_path / "empty").mkdir()
    broken = tiny_config(dataset={"source": "folder", "folder": str(tmp_path / "empty")})
    failed = snakemake(tmp_path, "--configfile", write(tmp_path / "c.yaml", broken), "--cores", "1", "prepared_data")
    assert failed.returncode != 0
    assert len(list(prepared.iterdir())) == 2 and digests(arrays) == before
    # a lost file of the arrays is rebuilt with the rest, never half-read
    (arrays / "masks.npy").unlink()
    again = snakemake(tmp_path, "--configfile", str(tmp_path / "a.yaml"), "--cores", "1", "prepared_data")
    assert again.returncode == 0, again.stderr[-3000:]
    assert digests(arrays) == before


def write(path, config: dict) -> str:
    path.write_text(yaml.safe_dump(config))
    return str(path)
