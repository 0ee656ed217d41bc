"""The real workflow on the local executor: the DAG, config errors before any job, a tiny run to the report."""

from __future__ import annotations

import csv
import json
import re

import pandas as pd
import pytest
from conftest import read_report, run_snakemake, tiny_config
from paired_cells import study_data
from scalebench import backends
from scalebench.records.tables import BASELINE, CHANGES, HISTORY, TABLES

# the tables tiny_study_config() does not write, and why
NOT_IN_A_TINY_STUDY = {
    BASELINE.where: "only with compare.baseline",
    HISTORY.where: "only with history.path",
    CHANGES.where: "only with history.path",
}


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


def test_a_matrix_of_both_frameworks_and_every_backend_runs_each_backend_where_it_exists(tmp_path):
    config = tiny_config(
        matrix={
            "frameworks": ["torch", "tensorflow"],
            "backends": ["native", "horovod", "fsdp", "dp", "mirrored"],
            "gpus": [1, 2, 4, 8, 16],
            "seeds": [1, 2, 3],
        },
        dataset={"synthetic": {"count": 400}},
        training={"batch_per_gpu": 2},
        cluster={"gpus_per_node": 4},
    )
    result = run_snakemake(tmp_path, config, "-n")
    assert result.returncode == 0, result.stderr
    # native and horovod in both (5 counts x 3 seeds each), fsdp from 2 GPUs, dp and mirrored on one node
    assert job_counts(result.stdout)["train"] == 4 * 15 + 4 * 3 + 3 * 3 + 3 * 3
    for path in ("torch/fsdp/g2/s1", "torch/dp/g4/s3", "tensorflow/mirrored/g1/s2", "tensorflow/native/g16/s1"):
        assert f"results/runs/{path}/metrics.jsonl" in result.stdout
    left_out = sorted(line for line in result.stderr.splitlines() if line.startswith("left out: "))
    assert [line.split(":")[1].strip() for line in left_out] == [
        "tensorflow/dp",
        "tensorflow/fsdp",
        "tensorflow/mirrored g8, g16",
        "torch/dp g8, g16",
        "torch/fsdp g1",
        "torch/mirrored",
    ]
    assert "left out: torch/fsdp g1: fsdp needs at least 2 ranks" in result.stderr
    assert "left out: torch/dp g8, g16: dp drives the devices of one node from one process" in result.stderr
    # a left-out cell named as a target is refused before anything runs
    refused = run_snakemake(tmp_path, config, "-n", "results/runs/torch/fsdp/g1/s1/metrics.jsonl")
    assert refused.returncode != 0
    assert "torch/fsdp/g1/s1 cannot run: fsdp needs at least 2 ranks" in refused.stdout + refused.stderr


def test_a_backend_of_none_of_the_listed_frameworks_stops_before_any_job(tmp_path):
    config = tiny_config(matrix={"frameworks": ["tensorflow"], "backends": ["native", "dp"], "gpus": [1]})
    result = run_snakemake(tmp_path, config, "--cores", "1")
    assert result.returncode != 0
    assert "config key 'matrix.backends': dp exists for none of matrix.frameworks ['tensorflow']" in result.stderr
    assert not (tmp_path / "results").exists()


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
def test_tiny_study_runs_to_the_report_with_its_answer(finished_study):
    # two backends, two seeds: the smallest study whose verdicts can be more than "one seed"
    # (conftest.tiny_study_config, run once for every test that reads it)
    summary = finished_study / "results" / "summary"
    runs = (summary / "runs.csv").read_text().splitlines()
    assert len(runs) == 9 and all(",ok," in row for row in runs[1:])
    # the verdicts: each pair tested on its two seeds, the words following the corrected p-value
    verdicts = pd.read_csv(summary / "verdicts.csv")
    speed = verdicts[verdicts["kind"] == "throughput"]
    assert sorted(speed["gpus"]) == [1, 2] and (speed[["seeds_a", "seeds_b"]] == 2).all().all()
    for _, row in speed.iterrows():
        assert row["ratio"] >= 1 and row["low"] < row["ratio"] < row["high"] and 0 <= row["p"] <= row["p_holm"] <= 1
        inside = 1 / 1.02 <= row["low"] and row["high"] <= 1.02  # verdicts.equivalence's default band
        state = "equivalent" if inside else "different" if row["p_holm"] < 0.05 else "open"
        assert row["state"] == state
        assert row["verdict"].startswith(
            {
                "different": "faster by",
                "equivalent": "no difference larger than 2% (n = 2)",
                "open": "no difference the seeds can show (n = 2): none larger than",
            }[state]
        )
    # the waterfall of each backend at 2 ranks adds up to its measured epoch
    losses = pd.read_csv(summary / "waterfall.csv")
    for backend in ("native", "horovod"):
        terms = losses[(losses["backend"] == backend) & (losses["gpus"] == 2)].set_index("term")["seconds"]
        parts = terms["ideal"] + terms[["compute_growth", "imbalance", "exposed_comm", "data_wait", "rest"]].sum()
        assert parts == pytest.approx(terms["measured"]) and terms["measured"] > 0
    assert (finished_study / "results" / "figures" / "speedup.png").stat().st_size > 10_000
    # the bill against what each cell took: the formula's bill this run started every cell with
    cost = pd.read_csv(summary / "cost.csv")
    assert len(cost) == 8 and set(cost["predicted_from"]) == {"formula"} and (cost["gpu_hours"] > 0).all()
    assert (
        "The cluster.time formula, an upper bound rather than a prediction, billed 8 cells"
        in (finished_study / "results" / "tables" / "cost.html").read_text()
    )
    html = read_report(finished_study / "report.html")
    assert "speedup.png" in html and "runs.csv" in html
    assert backends.upstream_status()["horovod"] in html  # the intro says where Horovod stands upstream
    # the answer leads the first page, generated from the study's numbers (analysis/answer.py)
    answer = json.loads((summary / "answer.json").read_text())
    (torch,) = answer["frameworks"]
    assert torch["gpus"] == 2 and torch["base_gpus"] == 1 and torch["best"]["efficiency"] > 0
    best = speed[speed["gpus"] == 2].iloc[0]
    assert (torch["best"]["backend"], torch["versus"]["backend"]) == (best["a"], best["b"])
    assert torch["versus"]["verdict"] == best["verdict"]
    assert "The answer" in html and torch["sentences"][0] in html
    # and the hosts: one machine ran every rank, which the page says rather than comparing it with itself
    hosts = answer["hosts"]
    assert hosts["slow_nodes"] == [] and hosts["rerun"] is None and hosts["sentences"][0] in html
    assert (
        hosts["sentences"][0].startswith("One host (") and "no other host to compare it with" in hosts["sentences"][0]
    )


@pytest.mark.integration
def test_a_finished_studys_tables_hold_exactly_their_defined_columns(finished_study):
    """Every CSV the study wrote (the bill, the cells' collectives.csv, the summary tables) has its
    definition's columns in order (records/tables.py); a file that differs is named with them."""
    problems, missing = [], []
    for table in TABLES:
        files = sorted(finished_study.glob(table.where.replace("<cell>", "**")))
        if not files and table.where not in NOT_IN_A_TINY_STUDY:
            missing.append(table.where)
        for path in files:
            with open(path, newline="") as handle:
                problem = table.header_problem(next(csv.reader(handle)))
            problems += [f"{path.relative_to(finished_study)}: {problem}"] if problem else []
    assert (problems, missing) == ([], [])


def test_a_variant_outside_the_study_is_refused_naming_its_variants(tmp_path):
    config = tiny_config(matrix={"frameworks": ["torch"], "backends": ["native"], "gpus": [1], "precision": ["bf16"]})
    refused = run_snakemake(tmp_path, config, "-n", "results/runs/torch/native/fp16/g1/s1/metrics.jsonl")
    assert refused.returncode != 0
    assert "'fp16' is not a variant of this study's optional axes" in refused.stdout + refused.stderr
    assert "its variants: bf16" in refused.stdout + refused.stderr


@pytest.mark.integration
def test_a_study_with_optional_axes_and_strong_scaling_runs_to_the_report(tmp_path_factory, tmp_path):
    config = tiny_config(
        matrix={
            "frameworks": ["torch"],
            "backends": ["native"],
            "gpus": [1, 2],
            "precision": ["bf16"],
            "scaling": ["weak", "strong"],
        },
        # no checkpoint, prediction images or collective benchmark (each costs a rank CPU; the benchmark
        # spins its whole budget): the tables read here are the cells' variants, batches and status
        training={"epochs": 1, "global_batch": 4, "eval_every": 0, "checkpoint_every": 0, "predictions": 0},
    )
    config["training"]["collectives"] = {"budget_s": 0}
    study_data(tmp_path_factory, tmp_path, config)  # the prepared data, made once by the workflow
    # the tables it reads (runs.csv, then scaling.csv), not the figures
    result = run_snakemake(tmp_path, config, "--cores", "2", "results/summary/scaling.csv")
    assert result.returncode == 0, result.stderr[-3000:]
    runs = tmp_path / "results" / "runs" / "torch" / "native"
    assert sorted(p.name for p in runs.iterdir()) == ["bf16_strong_global4", "bf16_weak"]
    import pandas as pd

    table = pd.read_csv(tmp_path / "results" / "summary" / "runs.csv", keep_default_na=False)
    assert sorted(zip(table["variant"], table["gpus"], table["batch_per_gpu"], table["status"])) == [
        ("bf16_strong_global4", 1, 4, "ok"),
        ("bf16_strong_global4", 2, 2, "ok"),
        ("bf16_weak", 1, 4, "ok"),
        ("bf16_weak", 2, 4, "ok"),
    ]
    assert set(table["precision"]) == {"bf16"} and set(table["scaling"]) == {"weak", "strong"}
    scaling = pd.read_csv(tmp_path / "results" / "summary" / "scaling.csv", keep_default_na=False)
    assert set(scaling["variant"]) == {"bf16_weak", "bf16_strong_global4"}
