"""A controller that refuses calls past a rate, on the real one-node SLURM cluster: two dozen tiny
cells cost the study a delay, never a failed cell or a retry. SLURM 23.02's rate limiting
(SlurmctldParameters=rl_enable) makes its clients sleep and ask again themselves; the test cluster's
SLURM (22.05) has none, and a controller under load answers a burst of calls with timeouts instead,
so a stand-in first on PATH (for Snakemake and, through the jobs' environment, for every job's own
calls) answers "Socket timed out" past a token bucket of its own: sbatch (config/slurm_plugin.py asks
again), the plugin's squeue status query (its lost answer keeps the jobs active), the stuck-job
watch's squeue, and each job's scontrol (cluster/slurm.py asks again) and squeue
(cluster/cell_holder.py)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from .conftest import cluster_config, cluster_data, describe, read_run, run_slurm_snakemake, slurm_jobs, with_data

pytestmark = pytest.mark.cluster

SEEDS = range(1, 25)
# calls a second the stand-in answers, and the burst it answers at once
RATE, BURST = 2.0, 5

STAND_IN = """#!/usr/bin/env python3
# A controller that answers {rate:g} calls a second after a burst of {burst}, shared by every
# command and process through a locked file; past it, SLURM's answer of a controller under load.
import fcntl, json, os, sys, time
folder = os.path.dirname(os.path.abspath(__file__))
name = os.path.basename(sys.argv[0])
with open(os.path.join(folder, "bucket.json"), "a+") as state:
    fcntl.flock(state, fcntl.LOCK_EX)
    state.seek(0)
    bucket = json.loads(state.read() or '{{"tokens": {burst}, "at": 0, "answered": {{}}, "refused": {{}}}}')
    now = time.time()
    bucket["tokens"] = min({burst}, bucket["tokens"] + (now - bucket["at"]) * {rate} if bucket["at"] else {burst})
    bucket["at"] = now
    answered = bucket["tokens"] >= 1
    bucket["tokens"] -= 1 if answered else 0
    tally = bucket["answered" if answered else "refused"]
    tally[name] = tally.get(name, 0) + 1
    state.seek(0)
    state.truncate()
    state.write(json.dumps(bucket))
if not answered:
    words = "Batch job submission failed" if name == "sbatch" else "slurm_load_jobs error"
    print(f"{{name}}: error: {{words}}: Socket timed out on send/recv operation", file=sys.stderr)
    sys.exit(1)
real = {real}[name]
os.execv(real, [real, *sys.argv[1:]])
"""


def rate_limited_controller(folder) -> dict:
    """sbatch, squeue, scontrol and sacct first on PATH, answering at RATE after a BURST."""
    folder.mkdir()
    real = {name: shutil.which(name) for name in ("sbatch", "squeue", "scontrol", "sacct")}
    script = folder / "controller.py"
    script.write_text(STAND_IN.format(rate=RATE, burst=BURST, real=json.dumps(real)))
    script.chmod(0o755)
    for name in real:
        (folder / name).symlink_to(script)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


@pytest.fixture
def data(slurm, tmp_path_factory):
    return cluster_data(slurm, tmp_path_factory)


@pytest.mark.waits(60)
def test_a_controller_that_refuses_calls_past_a_rate_delays_two_dozen_cells_and_fails_none(single_node, tmp_path, data):
    config = cluster_config(gpus=(1,), seeds=tuple(SEEDS))
    config["training"]["epochs"] = 1
    env = rate_limited_controller(tmp_path / "bin")
    cells = [f"results/runs/torch/native/g1/s{seed}/run.json" for seed in SEEDS]
    result = run_slurm_snakemake(single_node, with_data(tmp_path, data), config, *cells, env=env, timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode == 0, describe(result, tmp_path)
    bucket = json.loads((tmp_path / "bin" / "bucket.json").read_text())
    # the controller refused submissions and the jobs' own calls, and the study asked again
    assert bucket["refused"].get("sbatch", 0) >= 1 and bucket["refused"].get("scontrol", 0) >= 1, bucket
    assert "sbatch got no verdict on rule train (" in output, output[-4000:]
    logs = "".join((tmp_path / cell).with_name("train.log").read_text() for cell in cells)
    assert "got no verdict (the controller did not answer in time" in logs
    # and nothing failed: every cell trained once, by one job, with no retry
    assert "Error in rule" not in output and "Trying to restart" not in output, output[-4000:]
    jobs = slurm_jobs(tmp_path)
    assert all(len(jobs[f"torch_native_1_{seed}"]) == 1 for seed in SEEDS), jobs
    assert {read_run(tmp_path, f"torch/native/g1/s{seed}")["status"] for seed in SEEDS} == {"ok"}
