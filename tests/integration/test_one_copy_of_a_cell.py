"""One copy of a cell at a time on the local executor (cluster/cell_holder.py): a second Snakemake
started on the study while the first one's job trains a cell (here with --nolock, as a user who
takes the first for dead would after --unlock) does not train it beside that job: its job waits,
then adopts the outcome. Both Snakemake runs end successfully and the cell's records hold one
training. The SLURM side, with a Snakemake killed by SIGKILL, is in tests/cluster/test_slurm_survival.py."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import kill_if_running, snakemake_command, tiny_config, tool_env, wait_for
from paired_cells import study_data
from scalebench import records

pytestmark = pytest.mark.integration

CELL = "results/runs/torch/native/g1/s1"
EPOCHS = 2


def test_a_second_snakemake_waits_for_the_first_ones_job_and_adopts_its_outcome(tmp_path_factory, tmp_path):
    config = tiny_config(matrix={"gpus": [1]}, training={"epochs": EPOCHS})
    study_data(tmp_path_factory, tmp_path, config)  # the prepared data, made once by the workflow
    gate = tmp_path / "gate"  # the first job's rank 0 waits there before its first epoch (faults.meet)
    env = tool_env(SCALEBENCH_FAULT=f"meet:{gate}:2")
    command = snakemake_command(tmp_path, config, "--cores", "2", f"{CELL}/run.json")
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    second = None
    try:
        assert wait_for(lambda: gate.is_dir() and len(list(gate.iterdir())) == 1, 300), "the first job did not start"
        second = subprocess.Popen(
            [*command, "--nolock"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        log = tmp_path / CELL / "train.log"  # the second job's: its Snakemake removed the first one's name
        waiting = "this job waits for it and trains nothing beside it"
        assert wait_for(lambda: log.exists() and waiting in log.read_text(), 300), log.read_text()[-2000:]
        (gate / "open").touch()  # the first job trains on
        out_first, _ = first.communicate(timeout=600)
        out_second, _ = second.communicate(timeout=600)
    finally:
        kill_if_running(first, second)
    assert first.returncode == 0, out_first[-3000:]
    assert second.returncode == 0, out_second[-3000:]
    said = log.read_text()
    holders = sorted((tmp_path / CELL / ".holders").glob("*.json"))
    first_holder, second_holder = (json.loads(path.read_text()) for path in holders)
    assert f"the cell is held by process {first_holder['pid']} on {first_holder['host']}" in said, said
    own, _, kept = said.partition(f"launch: the log of process {first_holder['pid']} on {first_holder['host']} (")
    assert "finished the cell ok: its outcome is this job's, nothing retrained" in own, said
    assert "launch (local): " not in own  # the second job started no ranks
    assert first_holder["released"] and second_holder["released"] and second_holder["generation"] == 2
    lines, complete = records.read_metrics(tmp_path / CELL / "metrics.jsonl")
    assert complete and [line["epoch"] for line in lines if line["type"] == "epoch"] == list(range(1, EPOCHS + 1))
    assert [line["status"] for line in lines if line["type"] == "final"] == ["ok"]
    # the first job's log, kept under its holder's name, follows in the second one's
    assert "launch (local): " in kept and "final: status ok" in kept
    assert (tmp_path / CELL / ".holders" / "1.log").read_text() in kept
