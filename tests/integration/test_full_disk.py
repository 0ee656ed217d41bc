"""A write that fails (a full file system or quota; here a file-size limit, RLIMIT_FSIZE, which fails
a write with EFBIG) ends the cell naming the file and the error, and leaves the last good
checkpoint, metrics.jsonl and run.json readable (files.py, records/store.py). The SLURM side of it
is in tests/cluster/test_slurm_survival.py."""

from __future__ import annotations

import json

import pytest
from conftest import cell_settings, checkpoint_epoch, launch_cell
from scalebench import records

pytestmark = pytest.mark.integration

LIMIT = 64_000  # bytes: above metrics.jsonl and run.json of the tiny cell, below its checkpoint (about 8 MB)


def test_a_checkpoint_that_cannot_be_written_ends_the_cell_naming_it_and_keeps_the_last_one(prepared_data, tmp_path):
    settings = cell_settings("torch", "native", 1, epochs=3, checkpoint_every=1)
    result = launch_cell(settings, prepared_data, tmp_path, SCALEBENCH_FAULT=f"disk_full:2:{LIMIT}")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    checkpoint = tmp_path / "checkpoint.pt"
    words = f"could not write {checkpoint}: [Errno 27] File too large"
    assert f"rank 0: failed: WriteFailed: {words}" in output, output[-3000:]
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["status"] == "failed" and run["error"] == f"WriteFailed: {words}", run
    # the checkpoint of epoch 1 stands (epoch 2's was never renamed over it), readable by a retry
    assert checkpoint_epoch(tmp_path, "torch") == 1
    lines, complete = records.read_metrics(tmp_path / "metrics.jsonl")
    assert complete and [r["epoch"] for r in lines if r["type"] == "epoch"] == [1, 2]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".checkpoint")) == []  # no temporary
