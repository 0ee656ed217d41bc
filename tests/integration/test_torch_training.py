"""Real multi-rank PyTorch training on CPU, started the way the train rule starts it (what needs torch
in the test's own process: test_torch_training_torch.py)."""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path

import numpy as np
import pytest
from conftest import (  # horovod_imports: needs_horovod's condition names it
    SCRIPTS,
    assert_refused,
    cell_settings,
    framework_python,
    horovod_imports,  # noqa: F401
    launch_cell,
    rank_pids,
    read_records,
    repository_head,
    start_cell,
    wait_for,
)
from paired_cells import job_beyond_ranks, launch_output, trained_once
from scalebench.analysis import collect

pytestmark = pytest.mark.integration

# Enough steps on the tiny data to learn: four passes over the 28 training pairs per epoch.
LEARN = {"epochs": 4, "dataset_repeat": 4}


# a string: evaluated when a test that needs Horovod is set up, not when every worker collects the
# module (the probe starts torch in a process of its own)
needs_horovod = pytest.mark.skipif(
    "not horovod_imports('torch') and os.environ.get('CI') != 'true'", reason="Horovod not built (run ./install.sh)"
)


def foreground_iou(data: Path) -> float:
    """The IOU of predicting every pixel as mark: what a model that learned nothing scores."""
    masks = np.load(data / "masks.npy")
    test = json.loads((data / "manifest.json").read_text())["test"]
    return float(masks[test].mean())


def test_two_rank_ddp_learns(prepared_data, tmp_path):
    # that the same settings train the same figures twice is asserted where a second run is trained
    # anyway: test_data_placement's DDP device and host cells, bit for bit, and test_resume.py's
    # resumed DDP cell against its uninterrupted run
    result = launch_cell(cell_settings("torch", "native", 2, seed=3, **LEARN), prepared_data, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    epochs, final, run = read_records(tmp_path)
    assert final["iou"] > 3 * foreground_iou(prepared_data)
    assert run["status"] == "ok" and run["replicas"] == 2 and run["parameters"] == 486409
    assert epochs[-1]["loss"] < epochs[0]["loss"]
    # predictions of the first test images are saved for the report's picture panel
    assert len(list((tmp_path / "predictions").glob("test_*.png"))) == 2


# a one-rank cell of two evaluated epochs whose target it never reaches: it trains and records every
# epoch as any cell does (the contract below), and the last test here reads what it says of the
# target; trained once per run for both (paired_cells.py)
NEVER_REACHED = {"epochs": 2, "eval_every": 1, "stop_at_target": True, "target_iou": 1.0}


def never_reached(data: Path, tmp_path_factory) -> Path:
    return trained_once(tmp_path_factory, cell_settings("torch", "native", 1, **NEVER_REACHED), data)


def test_records_follow_the_contract(prepared_data, tmp_path_factory):
    out = never_reached(prepared_data, tmp_path_factory)
    # one rank of the default torchrun template starts without torchrun's agent: rank 0 of 1
    launched = next(line for line in launch_output(out).splitlines() if line.startswith("launch (local): "))
    # in torch's environment (scalebench/environments.py)
    assert launched.split()[2:4] == [framework_python("torch"), str(SCRIPTS / "train.py")], launched
    epochs, final, run = read_records(out)
    assert [e["epoch"] for e in epochs] == [1, 2]
    for record in epochs:
        assert record["epoch_time_s"] > 0 and record["images_per_s"] > 0 and record["data_wait_s"] >= 0
        assert 0 <= record["val_iou"] <= 1 and record["peak_mem_mb"] > 0
        assert record["model_tflops"] > 0 and record["mfu"] is None  # no peak is known for a CPU
    assert final["status"] == "ok" and 0 <= final["iou"] <= 1 and final["setup_s"] > 0
    # what the job held, from launch.py's start: the rank's imports too, which its run.json starts after
    assert job_beyond_ranks(run) > 0 and run["job_attempts"] == 1
    assert not (out / "tensorboard").exists(), "TensorBoard curves are off by default"
    assert final["train_time_s"] == pytest.approx(sum(e["epoch_time_s"] for e in epochs))
    # the epochs' cost: GPU-hours over the epochs' time (train_gpu_hours); energy only where a counter is read, else empty
    # with the reason (never 0): the test machine may or may not expose RAPL to this user
    assert final["train_gpu_hours"] == pytest.approx(final["train_time_s"] / 3600)
    assert final["energy_source"] == "rapl" and run["energy_source"] == "rapl"
    if final["energy_j"] is None:
        assert final["energy_reason"] and all(e["energy_j"] is None for e in epochs)
    else:
        assert final["energy_j"] == pytest.approx(sum(e["energy_j"] for e in epochs)) and final["energy_j"] > 0
    assert (run["train_gpu_hours"], run["energy_j"], run["energy_reason"]) == (
        final["train_gpu_hours"],
        final["energy_j"],
        final["energy_reason"],
    )
    for key in (
        "hosts",
        "replicas",
        "ranks_per_node",
        "devices",
        "versions",
        "python",
        "git_commit",
        "config_hash",
        "start",
        "end",
        "parameters",
        "model_flops_per_image",
    ):
        assert key in run, key
    assert run["versions"]["torch"].startswith("2.13")
    # the code it ran from, as git says, and what its steps did, read from the framework
    assert (run["git_commit"], run["git_commit_reason"]) == (repository_head(), None)
    assert (run["precision"], run["compute_dtype"]) == ("fp32", "float32")
    assert run["compiled"]["graphs"] == 0 and run["training"]["compile"] is False
    assert all(e["lr"] == e["scheduled_lr"] == 0.001 for e in epochs)  # the optimizer's own rate
    # the settings it trained with, as resolved, without train.log
    training = run["training"]
    assert (training["batch_per_gpu"], training["global_batch"], training["backward_passes_per_step"]) == (4, 4, 1)
    assert (training["epochs"], training["scaled_lr"], training["precision"]) == (2, 0.001, "fp32")
    assert training["deterministic"] is True and training["collective_timeout_s"] == 30
    assert "horovod" not in training and training["loader"]["workers"] == 0
    assert all(e["optimizer_steps"] == e["steps"] for e in epochs)  # DDP steps on every batch
    # the step split of one rank: its parts add up to the epoch, and with nobody to wait for there
    # is no exposed communication to speak of: DDP's reducer still runs its one-rank allreduce (on
    # Gloo's thread, which a loaded machine may wake late: a few ms of a step this small) and copies
    # the bucket back, far from the backward's share that a misplaced mark would count
    for record in epochs:
        (rank,) = record["ranks"]
        parts = rank["compute_s"] + rank["comm_exposed_s"] + rank["data_wait_s"] + rank["rest_s"]
        assert parts == pytest.approx(rank["epoch_time_s"]) and rank["rest_s"] >= 0
        assert 0 <= record["comm_exposed_s"] < 0.25 * record["epoch_time_s"] < record["compute_s"]
        assert record["straggler_rank"] == 0 and record["compute_spread"] == 0
    assert run["layout"] == "channels_last"  # as TensorFlow's: the layouts do not differ between frameworks


def test_a_cell_stops_once_its_validation_iou_reaches_the_target(prepared_data, tmp_path):
    # a target the tiny model passes within a few of the 8 epochs asked, checked after every epoch
    target = foreground_iou(prepared_data)
    training = {**LEARN, "epochs": 8, "eval_every": 1, "stop_at_target": True, "target_iou": target}
    result = launch_cell(cell_settings("torch", "native", 2, **training), prepared_data, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    epochs, final, run = read_records(tmp_path)
    ious = [e["val_iou"] for e in epochs]
    assert len(epochs) < 8 and ious[-1] >= target and all(iou < target for iou in ious[:-1])
    assert (final["status"], final["stopped_at_target"], final["epochs_completed"]) == ("ok", True, len(epochs))
    assert final["iou"] is not None  # the test pairs are evaluated as in any finished cell
    assert (run["status"], run["stopped_at_target"], run["epochs_completed"]) == ("ok", True, len(epochs))
    assert (run["training"]["stop_at_target"], run["training"]["target_iou"]) == (True, target)
    assert "training stops" in result.stdout + result.stderr
    row, _ = collect.read_cell(tmp_path, {"framework": "torch", "backend": "native", "gpus": 2, "seed": 1}, target)
    assert row["status"] == "ok" and row["stopped_at_target"] is True
    assert row["time_to_target_s"] == pytest.approx(final["train_time_s"])


def test_a_target_never_reached_trains_every_epoch_and_leaves_time_to_target_empty(prepared_data, tmp_path_factory):
    out = never_reached(prepared_data, tmp_path_factory)
    epochs, final, run = read_records(out)
    assert (run["training"]["stop_at_target"], run["training"]["target_iou"]) == (True, 1.0)
    assert len(epochs) == 2 and all(e["val_iou"] < 1 for e in epochs)
    assert (final["status"], final["stopped_at_target"], run["stopped_at_target"]) == ("ok", False, False)
    row, _ = collect.read_cell(out, {"framework": "torch", "backend": "native", "gpus": 1, "seed": 1}, 1.0)
    assert row["status"] == "ok" and row["stopped_at_target"] is False and math.isnan(row["time_to_target_s"])
    assert row["time_to_target_reason"].startswith("never reached 1 (best 0.")


def test_huge_learning_rate_ends_as_diverged_not_as_an_error(prepared_data, tmp_path):
    result = launch_cell(cell_settings("torch", "native", 2, epochs=3, base_lr=1e6), prepared_data, tmp_path)
    assert result.returncode == 0, result.stderr
    epochs, final, run = read_records(tmp_path)
    assert run["status"] == "diverged" and final["status"] == "diverged"
    assert final["iou"] is None and len(epochs) == 1


def test_out_of_memory_is_a_benchmark_outcome(prepared_data, tmp_path):
    result = launch_cell(
        cell_settings("torch", "native", 1, epochs=3), prepared_data, tmp_path, SCALEBENCH_FAULT="oom:0:2"
    )
    assert result.returncode == 0, result.stderr
    epochs, final, run = read_records(tmp_path)
    assert run["status"] == "oom" and final["status"] == "oom" and len(epochs) == 1


def test_fp16_autocast_on_cpu_is_refused(prepared_data, tmp_path):
    result = launch_cell(cell_settings("torch", "native", 1, precision="fp16"), prepared_data, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]  # refused: a result, no retry would change it
    assert_refused(result, tmp_path, "training.precision: fp16 needs a GPU; use bf16 on the CPU")


def test_bf16_autocast_trains_on_cpu(prepared_data, tmp_path):
    result = launch_cell(cell_settings("torch", "native", 1, epochs=1, precision="bf16"), prepared_data, tmp_path)
    assert result.returncode == 0, result.stderr
    _, final, run = read_records(tmp_path)
    assert run["status"] == "ok", run.get("reason")  # a mismatch refuses the cell, naming both
    # asked, and observed: the dtype of the model's output inside the training step
    assert (run["precision"], run["compute_dtype"]) == ("bf16", "bfloat16") and final["status"] == "ok"


@pytest.mark.parametrize("backend", ["native", pytest.param("horovod", marks=needs_horovod)])
def test_killed_rank_fails_the_cell_quickly_and_leaves_no_process(prepared_data, tmp_path, backend):
    timeout_s = 20
    settings = cell_settings("torch", backend, 2, epochs=200, collective_timeout_s=timeout_s)
    process = start_cell(settings, prepared_data, tmp_path)
    metrics = tmp_path / "metrics.jsonl"
    started = wait_for(lambda: metrics.exists() and metrics.read_text().count("\n") >= 1, 180)
    if not started:
        process.kill()
        pytest.fail("no epoch finished:\n" + process.communicate()[0][-3000:])
    victims = rank_pids(tmp_path)
    assert len(victims) >= 2, victims
    os.kill(victims[-1], signal.SIGKILL)
    try:  # 200 epochs would take minutes: the cell ends because a rank died, not a hang (a margin
        # tied to the collective timeout, not to the machine's speed)
        output, _ = process.communicate(timeout=3 * timeout_s + 60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode != 0, output
    # said why: a surviving rank's "rank 0: failed: ...", or, with Horovod, horovodrun's report of the
    # dead rank (it kills the other ranks at once, so rank 0 may not live to say it)
    said = ("failed",) if backend == "native" else ("failed", "exited with non-zero status")
    assert any(words in output for words in said), output[-3000:]
    assert wait_for(lambda: not rank_pids(tmp_path), 10), "ranks left behind"


@needs_horovod
def test_ddp_and_horovod_agree_without_batch_norm(prepared_data, tmp_path):
    losses = {}
    for backend in ("native", "horovod"):
        settings = cell_settings("torch", backend, 2, epochs=2, batch_norm=False)
        result = launch_cell(settings, prepared_data, tmp_path / backend)
        assert result.returncode == 0, result.stdout + result.stderr
        epochs, final, run = read_records(tmp_path / backend)
        losses[backend] = [e["loss"] for e in epochs] + [final["test_loss"]]
        assert run["status"] == "ok"
    np.testing.assert_allclose(losses["native"], losses["horovod"], rtol=0, atol=1e-5)


@needs_horovod
def test_ddp_and_horovod_with_fp16_gradients_train_and_record_it(prepared_data, tmp_path):
    losses = {}
    for backend in ("native", "horovod"):
        settings = cell_settings("torch", backend, 2, epochs=2, batch_norm=False, compression="fp16")
        result = launch_cell(settings, prepared_data, tmp_path / backend)
        assert result.returncode == 0, result.stdout + result.stderr
        epochs, final, run = read_records(tmp_path / backend)
        losses[backend] = [e["loss"] for e in epochs] + [final["test_loss"]]
        assert run["status"] == "ok" and run["training"]["compression"] == "fp16"
    # the two round differently (DDP's hook divides each gradient before the sum, Horovod after it)
    np.testing.assert_allclose(losses["native"], losses["horovod"], rtol=0, atol=2e-3)


@needs_horovod
def test_horovod_with_batch_norm_learns(prepared_data, tmp_path):
    result = launch_cell(cell_settings("torch", "horovod", 2, **LEARN), prepared_data, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "workflow/scripts/horovod_run.py --gloo" in result.stdout  # horovodrun, without its probe
    _, final, run = read_records(tmp_path)
    assert final["iou"] > 3 * foreground_iou(prepared_data)
    assert run["versions"]["horovod"] == "0.28.1"


def test_a_gpu_cell_without_a_gpu_fails_before_its_first_step(prepared_data, tmp_path):
    result = launch_cell(cell_settings("torch", "native", 2, device="cuda"), prepared_data, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]  # refused: a result, no retry would change it
    assert_refused(result, tmp_path, "this cell is meant for GPUs (training.device is cuda) but torch")
    assert "DeviceError" in json.loads((tmp_path / "run.json").read_text())["reason"]
