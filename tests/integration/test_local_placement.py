"""Each running local cell owns its GPU ids and its ranks' cores, and run.json records both.

This machine has no GPU: CUDA_VISIBLE_DEVICES fakes three (or the nvidia-smi stand-in of
tests/fixtures/nvidia-smi fakes a two-GPU machine with its topology), as the GPU-binding tests
fake them, and the ranks train on the CPU (torch sees no GPU). Each test gets its own pool
folder (SCALEBENCH_LOCAL_POOL), so cells of other runs on this machine do not meet its cells.
Cells that must run at the same time meet before their first epoch (SCALEBENCH_FAULT=meet),
and the tests wait for what the launchers print, never for a time.
"""

from __future__ import annotations

import json
import os
import queue
import threading
from datetime import datetime
from pathlib import Path

import pytest
from conftest import REPO, cell_settings, launch_cell, run_snakemake, start_cell, tiny_config
from paired_cells import study_data
from scalebench.cluster.cpu_binding import format_cpus

pytestmark = pytest.mark.integration

STAND_IN = REPO / "tests" / "fixtures" / "nvidia-smi"
CORES = sorted(os.sched_getaffinity(0))


class Output:
    """A started cell's output, read line by line in the background."""

    def __init__(self, process):
        self.process, self.lines, self.seen = process, queue.Queue(), []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, text: str, limit_s: float = 600) -> str:
        """The first line holding `text` (fails at the end of the output: the cell ended without it)."""
        while True:
            line = self.lines.get(timeout=limit_s)  # only against a hang: no test waits on a time
            assert line is not None, f"the cell ended without printing {text!r}:\n{''.join(self.seen)[-3000:]}"
            self.seen.append(line)
            if text in line:
                return line

    def finish(self) -> str:
        code = self.process.wait(timeout=900)
        while (line := self.lines.get(timeout=60)) is not None:
            self.seen.append(line)
        assert code == 0, "".join(self.seen)[-3000:]
        return "".join(self.seen)


# what these tests' cells train: one epoch, with no checkpoint, no prediction images and no collective
# benchmark, none of which they read (each costs a rank CPU; the benchmark spins its whole budget)
TRAINING = {"epochs": 1, "checkpoint_every": 0, "predictions": 0, "collectives": {"budget_s": 0}}


def cell(gpus: int, seed: int = 1) -> dict:
    return cell_settings("torch", "native", gpus, seed, **TRAINING)


def run_json(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())


def span(run: dict) -> tuple[datetime, datetime]:
    return datetime.fromisoformat(run["start"]), datetime.fromisoformat(run["end"])


@pytest.mark.skipif(len(CORES) < 2, reason="two ranks bound to one core each need two cores")
def test_running_cells_hold_disjoint_gpu_ids_and_a_third_waits_for_one_a_killed_cell_frees(tmp_path, prepared_data):
    meet = tmp_path / "meet"
    env = {
        "CUDA_VISIBLE_DEVICES": "0,1,2",  # a 3-GPU machine
        "SCALEBENCH_LOCAL_POOL": str(tmp_path / "pool"),
        "SCALEBENCH_FAULT": f"meet:{meet}:3",  # the two-GPU and one-GPU cells wait for each other and the test
    }
    outs = {name: tmp_path / name for name in ("two", "one", "third")}
    two = Output(start_cell(cell(2), prepared_data, outs["two"], **env))
    assert "GPU(s) 0,1 of this machine, held for this cell" in two.wait_for("held for this cell")
    one = Output(start_cell(cell(1), prepared_data, outs["one"], **env))
    assert "GPU(s) 2 of this machine, held for this cell" in one.wait_for("held for this cell")
    third = Output(start_cell(cell(1, 2), prepared_data, outs["third"], **env))
    third.wait_for("launch: waiting for 1 of GPUs 0,1,2: other cells hold them")
    (meet / "the-test").parent.mkdir(exist_ok=True)
    (meet / "the-test").touch()  # the two running cells go on, end, and give their ids back
    two.finish(), one.finish(), third.finish()

    runs = {name: run_json(out) for name, out in outs.items()}
    assert runs["two"]["local_gpu_ids"] == ["0", "1"] and runs["one"]["local_gpu_ids"] == ["2"]
    assert len(runs["third"]["local_gpu_ids"]) == 1 and set(runs["third"]["local_gpu_ids"]) <= {"0", "1", "2"}
    assert span(runs["third"])[0] >= min(span(runs["two"])[1], span(runs["one"])[1])
    # the two-rank cell held both cores of this machine: one each, as the OS reports them
    assert sorted(runs["two"]["rank_cpus"]) == [str(CORES[0]), str(CORES[1])]
    assert (runs["two"]["cpu_binding"], runs["two"]["cpu_bound_by"]) == ("cores", "launch.py")
    # none were left for the one-GPU cell beside it: it ran unbound, and says why
    assert runs["one"]["cpu_bound_by"] is None and runs["one"]["rank_cpus"] == [format_cpus(CORES)]
    assert "fewer than the 1 cores the cell's ranks need are free" in runs["one"]["cpu_binding_reason"]


@pytest.mark.skipif(len(CORES) < 2, reason="a core nearest the GPU and one that is not")
def test_a_cell_takes_the_cores_nearest_its_gpu_and_records_the_site(tmp_path, prepared_data):
    # the stand-in lists two GPUs, GPU 0 nearest core 1 and GPU 1 nearest core 0 (topo-2xgpu-2core.txt)
    env = {
        "PATH": f"{STAND_IN}{os.pathsep}{os.environ['PATH']}",
        "NVIDIA_SMI_RECORDING": "2xgpu-2core",
        "SCALEBENCH_LOCAL_POOL": str(tmp_path / "pool"),
        "NCCL_IB_DISABLE": "1",
    }
    result = launch_cell(cell(1), prepared_data, tmp_path / "cell", **env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = run_json(tmp_path / "cell")
    assert run["local_gpu_ids"] == ["0"] and run["rank_cpus"] == ["1"]
    site = run["site"]
    assert site["driver"] == "535.161.08" and site["gpus"]["1"]["name"] == "NVIDIA L40S"
    assert site["topology"]["cpu_affinity"] == {"GPU0": "1", "GPU1": "0"}
    assert site["environment"]["NCCL_IB_DISABLE"] == "1" and site["environment"]["OMP_NUM_THREADS"] == "1"
    assert "eth0" in site["network"]["interfaces"] or site["network"]["interfaces"] == {}
    assert "no library with ncclGetVersion" in run["site_reasons"]["libraries.nccl"]  # a CPU rank loads no NCCL


def test_with_cpu_binding_none_the_ranks_run_where_the_os_puts_them(tmp_path, prepared_data):
    settings = cell(1)  # one rank: bound, it would hold one core of the two (as in the test above)
    settings["cpu_binding"] = "none"
    env = {"SCALEBENCH_LOCAL_POOL": str(tmp_path / "pool")}
    result = launch_cell(settings, prepared_data, tmp_path / "cell", **env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = run_json(tmp_path / "cell")
    assert run["rank_cpus"] == [format_cpus(CORES)]  # every core this process may use
    assert (run["cpu_binding"], run["cpu_bound_by"], run["cpu_binding_reason"]) == (
        "none",
        None,
        "cluster.cpu_binding: none",
    )
    assert run["local_gpu_ids"] is None and "held no GPU" in run["local_gpu_ids_reason"]  # no GPU here


def test_with_jobs_alone_a_three_gpu_machine_runs_a_one_and_a_two_gpu_cell_at_once_on_disjoint_ids(
    tmp_path_factory, tmp_path
):
    config = tiny_config(training=TRAINING, matrix={"gpus": [1, 2, 4], "seeds": [1]})
    study_data(tmp_path_factory, tmp_path, config)  # the prepared data, made once by the workflow
    env = {"CUDA_VISIBLE_DEVICES": "0,1,2", "SCALEBENCH_LOCAL_POOL": str(tmp_path / "pool")}
    dry = run_snakemake(tmp_path, config, "-j", "4", "-n", env=env)  # -j alone is a local run's cores
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "left out: torch/native g4: needs 4 GPUs and this machine has 3 (local_gpus=3)" in dry.stderr
    cells = [f"results/runs/torch/native/g{gpus}/s1/run.json" for gpus in (1, 2)]
    run = run_snakemake(
        tmp_path, config, "-j", "4", *cells, env={**env, "SCALEBENCH_FAULT": f"meet:{tmp_path / 'meet'}:2"}
    )
    assert run.returncode == 0, run.stderr[-3000:]
    cells = [run_json(tmp_path / "results" / "runs" / "torch" / "native" / f"g{g}" / "s1") for g in (1, 2)]
    ids = [set(cell["local_gpu_ids"]) for cell in cells]
    assert [len(held) for held in ids] == [1, 2] and not ids[0] & ids[1] and ids[0] | ids[1] == {"0", "1", "2"}


def test_a_gpu_list_naming_an_id_twice_or_one_the_machine_lacks_is_refused_before_any_cell_runs(tmp_path):
    config = tiny_config(matrix={"gpus": [1], "seeds": [1]})
    twice = run_snakemake(tmp_path, config, "--cores", "2", env={"CUDA_VISIBLE_DEVICES": "0,1,0"})
    assert (
        twice.returncode != 0 and "CUDA_VISIBLE_DEVICES=0,1,0 names GPU 0 more than once" in twice.stdout + twice.stderr
    )
    stand_in = {"PATH": f"{STAND_IN}{os.pathsep}{os.environ['PATH']}", "NVIDIA_SMI_RECORDING": "2xgpu-2core"}
    lacking = run_snakemake(tmp_path, config, "--cores", "2", env={**stand_in, "CUDA_VISIBLE_DEVICES": "1,5"})
    assert (
        lacking.returncode != 0 and "names GPU 5, which this machine does not have" in lacking.stdout + lacking.stderr
    )
    assert not (tmp_path / "results" / "runs").exists()
