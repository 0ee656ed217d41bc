"""PyTorch fsdp and dp trained for real on the CPU, each rank through the rank entry (workflow/scripts/train.py).

The ranks of a multi-rank cell are started by torchrun (torch.distributed.run in torch's environment)
directly, as the torch_native launcher template does, with the cell's settings switched to the
backend under test. The uninterrupted FSDP
and DDP cells the parity and the resume compare with, and dp's cell of one device, are
test_data_placement's, trained once per run through launch.py (paired_cells.py).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    assert_refused,
    cell_settings,
    checkpoint_epoch,
    framework_python,
    in_framework,
    rank_command,
    rank_pids,
    read_records,
    tool_env,
    wait_for,
)
from paired_cells import job_beyond_ranks, launch_output, placed, trained_once
from scalebench.cluster.ports import free_port

pytestmark = pytest.mark.integration

UNET_PARAMETERS = 486409
# FSDP's reduce-scatter averages the same two gradients DDP's allreduce does, and Adam updates each
# element alike; only the kernels' rounding may differ (the CPU here gives equal numbers)
PARITY = {"rtol": 1e-5, "atol": 1e-6}


def settings_for(backend: str, gpus: int, **training) -> dict:
    settings = cell_settings("torch", "native", gpus, **training)
    settings["cell"]["backend"] = backend
    return settings


def rank_processes(settings: dict, data: Path, out: Path) -> list[str]:
    """The ranks of a cell: torchrun over the rank entry for several processes, else the entry alone."""
    command = rank_command(settings, data, out)
    processes = 1 if settings["cell"]["backend"] == "dp" else settings["cell"]["gpus"]
    if processes == 1:
        return command
    torchrun = [framework_python("torch"), "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={processes}"]
    return [*torchrun, "--master-addr=127.0.0.1", f"--master-port={free_port()}", *command[1:]]


def train(settings: dict, data: Path, out: Path, **env: str) -> subprocess.CompletedProcess:
    command = rank_processes(settings, data, out)
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=tool_env(**env))


def losses(out: Path) -> list[float]:
    epochs, final, _ = read_records(out)
    return [e["loss"] for e in epochs] + [final["test_loss"], final["iou"]]


# the parameters of the model's state in a checkpoint, counted by torch (its environment's Python)
CHECKPOINT_PARAMETERS = """
import sys, torch
state = torch.load(sys.argv[1], weights_only=False)["model"]
print(sum(t.numel() for name, t in state.items() if "running" not in name and "num_batches" not in name))
"""


# FSDP's and DDP's cells of both tests below are test_data_placement's device cells, trained once per
# run through launch.py (paired_cells.py): two epochs, evaluated and checkpointed after each (FSDP's
# second trains after the evaluation of a sharded model, and the resume starts from the first one's
# checkpoint), the ranks' output kept beside each
def fsdp_cell() -> dict:
    return placed("torch", "fsdp", 2, "device")


@pytest.fixture
def fsdp_run(prepared_data, tmp_path_factory) -> Path:
    """The FSDP cell trained without interruption: the parity's FSDP side, the resume's reference."""
    assert fsdp_cell()["training"]["checkpoint_every"] == 1
    return trained_once(tmp_path_factory, fsdp_cell(), prepared_data)


def test_fsdp_shards_the_model_and_trains_like_ddp(prepared_data, tmp_path_factory, fsdp_run):
    native = trained_once(tmp_path_factory, placed("torch", "native", 2, "device"), prepared_data)
    np.testing.assert_allclose(losses(fsdp_run), losses(native), **PARITY)
    epochs, final, run = read_records(fsdp_run)
    assert epochs[1]["val_iou"] is not None and final["status"] == "ok"  # evaluation of a sharded model
    assert run["status"] == "ok" and (run["replicas"], run["processes"]) == (2, 2)
    # torchrun's cells: the job's wall from launch.py's start, as a one-rank cell's (test_torch_training)
    assert job_beyond_ranks(read_records(native)[2]) > 0 and job_beyond_ranks(run) > 0
    assert run["parameters"] == UNET_PARAMETERS
    assert "FSDP2" in run["versions"]["distributed"] and run["training"]["fsdp"]["reshard_after_forward"]
    assert run["training"]["global_batch"] == 2 * 4
    # parameters are sharded: each rank holds part of them, together all
    output = launch_output(fsdp_run)
    held = re.findall(r"rank (\d)/2: FSDP holds (\d+) of the model's (\d+) parameters", output)
    assert sorted(rank for rank, _, _ in held) == ["0", "1"], output
    assert {int(total) for _, _, total in held} == {UNET_PARAMETERS}
    assert sum(int(count) for _, count, _ in held) == UNET_PARAMETERS
    assert all(int(count) < UNET_PARAMETERS * 0.6 for _, count, _ in held)
    # rank 0 predicts with the whole model the final evaluation gathered
    for name in ("test_00004.png", "test_00005.png"):
        assert (fsdp_run / "predictions" / name).read_bytes() == (native / "predictions" / name).read_bytes()


def test_fsdp_resumes_from_its_checkpoint_to_identical_results(prepared_data, tmp_path, fsdp_run):
    settings = fsdp_cell()
    # the first run stops for good at the start of epoch 2, after epoch 1's checkpoint
    out = tmp_path / "interrupted"
    command = rank_processes(settings, prepared_data, out)
    env = tool_env(SCALEBENCH_FAULT="stall:2")
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    try:
        assert wait_for(lambda: checkpoint_epoch(out, "torch") == 1, 300)
        process.send_signal(signal.SIGTERM)  # torchrun passes it on to its ranks, as at a time limit
        process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        for pid in rank_pids(out):  # never leave a stalled rank behind
            os.kill(pid, signal.SIGKILL)
    # whole tensors, as the plain model holds them: the parameter count, not a rank's shard
    assert in_framework("torch", CHECKPOINT_PARAMETERS, str(out / "checkpoint.pt")) == UNET_PARAMETERS
    resumed = train(settings, prepared_data, out)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from checkpoint after epoch 1" in resumed.stdout
    assert losses(out) == losses(fsdp_run)
    assert read_records(out)[2]["resumed_from_epoch"] == 1


def test_fsdp_of_one_rank_is_refused_before_training(prepared_data, tmp_path):
    result = train(settings_for("fsdp", 1), prepared_data, tmp_path)
    # the registry entry's reason (BackendSpec.min_ranks_reason), the one the planner gives too
    assert_refused(
        result, tmp_path, "matrix.gpus = 1: fsdp needs at least 2 ranks (with one there is nothing to shard)"
    )


def test_dp_of_one_gpu_on_the_cpu_trains_as_ddp_of_one_rank(prepared_data, tmp_path_factory, tmp_path):
    # dp's cell is test_data_placement's device cell (launch.py starts its one process as the rank
    # entry alone), trained once per run; DDP's one rank trains the same training settings here
    dp = trained_once(tmp_path_factory, placed("torch", "dp", 1, "device"), prepared_data)
    result = train(placed("torch", "native", 1, "device"), prepared_data, tmp_path / "native")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert losses(dp) == losses(tmp_path / "native")  # one device: the same module, the same data
    _, _, run = read_records(dp)
    assert (run["replicas"], run["processes"], run["device"]) == (1, 1, "cpu")
    assert run["training"]["dp"] == {"processes": 1, "device_ids": None}
    assert "plain module" in run["versions"]["distributed"]


def test_dp_over_two_devices_on_the_cpu_is_refused_before_training(prepared_data, tmp_path):
    result = train(settings_for("dp", 2), prepared_data, tmp_path)
    # the registry entry's reason (BackendSpec.cpu_reason), the one the planner gives too
    assert_refused(result, tmp_path, "matrix.gpus = 2: dp splits a batch over GPUs only; on the CPU it has one device")
    assert "use backend native" in result.stderr
