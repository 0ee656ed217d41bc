"""A cell's records written whole, atomically and under a kept name (records/store.py), and a write
that fails naming the file while the last complete one stays (files.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from scalebench import files, records
from scalebench.records import store


def test_a_record_survives_the_removal_of_its_output_name_and_is_linked_back(tmp_path):
    metrics, run = tmp_path / "metrics.jsonl", tmp_path / "run.json"
    store.write_metrics(metrics, [{"type": "epoch", "epoch": 1}])
    store.write_run(run, {"status": "running", "slurm": {"job_id": "5"}})
    assert os.path.samefile(metrics, store.kept_path(metrics)) and os.path.samefile(run, store.kept_path(run))
    # Snakemake removes the outputs of a job it is about to run (Job.remove_existing_output)
    metrics.unlink()
    run.unlink()
    assert store.read_run(run) == {"status": "running", "slurm": {"job_id": "5"}}
    records.append_record(metrics, {"type": "epoch", "epoch": 2})  # continued from the kept name, not restarted
    assert [r["epoch"] for r in records.read_metrics(metrics)[0]] == [1, 2]
    assert store.restore(tmp_path) == ["run.json"]  # metrics.jsonl was written again meanwhile
    assert json.loads(run.read_text())["slurm"]["job_id"] == "5" and store.restore(tmp_path) == []


def test_a_truncated_last_line_is_dropped_when_a_record_is_appended(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"type": "epoch", "epoch": 1}\n{"type": "ep')  # a writer killed mid-line (an older version)
    records.append_record(metrics, {"type": "final", "status": "oom"})
    lines, complete = records.read_metrics(metrics)
    assert complete and [line["type"] for line in lines] == ["epoch", "final"]


WRITE_BEYOND_LIMIT = """
import resource, sys
from scalebench import files
from scalebench.records import store
resource.setrlimit(resource.RLIMIT_FSIZE, (2000, resource.RLIM_INFINITY))
try:
    store.write_metrics(sys.argv[1], [{"type": "epoch", "epoch": e, "pad": "x" * 100} for e in range(1, 30)])
except files.WriteFailed as error:
    print(error)
"""


def test_a_write_beyond_a_file_size_limit_names_the_file_and_keeps_the_last_complete_one(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    store.write_metrics(metrics, [{"type": "epoch", "epoch": 1}])
    before = metrics.read_text()
    env = {**os.environ, "PYTHONPATH": str(files.__file__).rsplit("/scalebench", 1)[0]}
    result = subprocess.run(
        [sys.executable, "-c", WRITE_BEYOND_LIMIT, str(metrics)], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.stdout.strip() == f"could not write {metrics}: [Errno 27] File too large", result
    assert metrics.read_text() == before and store.kept_path(metrics).read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".kept", "metrics.jsonl"]  # no temporary left


def test_a_library_error_without_the_system_s_words_says_what_limits_writing(tmp_path):
    error = files.WriteFailed(tmp_path / "checkpoint" / "ckpt-3", RuntimeError("OutOfRangeError"))
    assert str(error).startswith(f"could not write {tmp_path}/checkpoint/ckpt-3: RuntimeError: OutOfRangeError (")
    assert "MB free on the file system" in str(error) or "free space unknown" in str(error)
    try:
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598") from OSError(
            27, "File too large"
        )
    except RuntimeError as torch_error:
        assert str(files.WriteFailed("c.pt", torch_error)) == "could not write c.pt: [Errno 27] File too large"
