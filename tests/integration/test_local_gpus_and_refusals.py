"""A local run holds each GPU for one cell at a time, and a cell no retry can fix ends at once.

This machine has no GPU: CUDA_VISIBLE_DEVICES fakes the ones it shows, `--resources local_gpus=N`
declares N of them, as a GPU machine's profile would, and the cells train on CPU ranks (torch sees
no GPU: training.device auto), holding their GPU ids while they run. training.device: cuda on this
machine is a cell that can never run here.
"""

from __future__ import annotations

import csv
import json
from datetime import datetime

import pytest
from conftest import run_snakemake, tiny_config
from paired_cells import study_data

pytestmark = pytest.mark.integration

CELLS = "results/runs/torch/native"


def run_json(workdir, cell: str) -> dict:
    return json.loads((workdir / CELLS / cell / "run.json").read_text())


def test_one_gpu_cells_take_the_one_gpu_in_turn_and_a_two_gpu_cell_is_left_out(tmp_path_factory, tmp_path):
    config = tiny_config(training={"epochs": 2}, matrix={"gpus": [1, 2], "seeds": [1, 2]})
    study_data(tmp_path_factory, tmp_path, config)  # the prepared data, made once by the workflow
    limit = ["--cores", "4", "--resources", "local_gpus=1"]
    one_gpu = {"CUDA_VISIBLE_DEVICES": "0"}
    dry = run_snakemake(tmp_path, config, *limit, "-n", env=one_gpu)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "left out: torch/native g2: needs 2 GPUs and this machine has 1 (local_gpus=1)" in dry.stderr
    assert "g2/s1/train.log" not in dry.stdout and "g1/s2/train.log" in dry.stdout
    named = run_snakemake(tmp_path, config, *limit, "-n", "--", f"{CELLS}/g2/s1/metrics.jsonl", env=one_gpu)
    assert named.returncode != 0 and "torch/native/g2/s1 cannot run: needs 2 GPUs" in named.stdout + named.stderr

    # four cores would start both one-rank cells at once; the one GPU makes them take turns
    targets = [f"{CELLS}/g1/s{seed}/metrics.jsonl" for seed in (1, 2)]
    run = run_snakemake(tmp_path, config, *limit, "--", *targets, env=one_gpu)
    assert run.returncode == 0, run.stderr[-3000:]
    spans = sorted(
        (datetime.fromisoformat(r["start"]), datetime.fromisoformat(r["end"]))
        for r in (run_json(tmp_path, f"g1/s{seed}") for seed in (1, 2))
    )
    assert spans[0][1] <= spans[1][0], spans
    assert [run_json(tmp_path, f"g1/s{seed}")["local_gpu_ids"] for seed in (1, 2)] == [["0"], ["0"]]


def test_a_count_above_the_machine_s_gpus_is_refused_naming_both(tmp_path):
    config = tiny_config(matrix={"gpus": [1], "seeds": [1]})
    result = run_snakemake(
        tmp_path, config, "--cores", "2", "--resources", "local_gpus=2", "-n", env={"CUDA_VISIBLE_DEVICES": "0"}
    )
    assert result.returncode != 0
    refusal = "--resources local_gpus=2 declares more GPUs than this machine shows: 1 (CUDA_VISIBLE_DEVICES)"
    assert refusal in result.stdout + result.stderr


def test_a_cell_no_retry_can_fix_ends_refused_at_its_first_attempt_with_the_reason(tmp_path_factory, tmp_path):
    # training.device cuda where no rank sees a GPU: the default profile's two retries would not help
    config = tiny_config(training={"device": "cuda"}, matrix={"gpus": [1], "seeds": [1]})
    study_data(tmp_path_factory, tmp_path, config)  # the prepared data, made once by the workflow
    table = "results/summary/incomplete.csv"  # the cell and collect_runs' tables, not the figures
    limit = ["--resources", "local_gpus=1"]  # last: --resources takes every word up to the next option
    result = run_snakemake(tmp_path, config, "--cores", "2", table, *limit, env={"CUDA_VISIBLE_DEVICES": "0"})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "Trying to restart" not in output
    run = run_json(tmp_path, "g1/s1")
    assert run["status"] == "refused" and "training.device is cuda" in run["reason"], run
    with open(tmp_path / "results" / "summary" / "incomplete.csv") as handle:
        (row,) = list(csv.DictReader(handle))
    assert (row["item"], row["status"]) == ("torch/native/g1/s1", "refused")
    assert "sees none on this node" in row["reason"]
    assert row["rerun"].endswith(f" --force -- {CELLS}/g1/s1/metrics.jsonl")
