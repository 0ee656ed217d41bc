"""Real two-worker TensorFlow training on CPU, started the way the train rule starts it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    assert_refused,
    cell_settings,
    launch_cell,
    rank_command,
    read_records,
    skip_unless_horovod_ran,
    tool_env,
)
from paired_cells import KILLED_AFTER, LEARN, killed_worker_attempt, multiworker_reference, multiworker_settings
from scalebench import backends
from scalebench.launch import launcher as sb_launch

pytestmark = pytest.mark.integration

# LEARN (paired_cells.py): the settings of the MultiWorkerMirrored reference run, which the horovod and
# mirrored backends' runs here take too, with the reasons for each


def foreground_iou(data: Path) -> float:
    masks = np.load(data / "masks.npy")
    test = json.loads((data / "manifest.json").read_text())["test"]
    return float(masks[test].mean())


@pytest.fixture
def reference(prepared_data, tmp_path_factory) -> Path:
    return multiworker_reference(tmp_path_factory, prepared_data)


def test_two_worker_multiworker_mirrored_learns(reference, prepared_data):
    # that it trains the same figures again is asserted where a second run of the same settings is
    # trained anyway (paired_cells.multiworker_reference): the killed worker's attempt, below, to 1e-6,
    # and test_data_placement's device and host cells, bit for bit
    epochs, final, run = read_records(reference)
    assert final["iou"] > 3 * foreground_iou(prepared_data)
    assert epochs[-1]["loss"] < epochs[0]["loss"]
    assert run["status"] == "ok" and run["replicas"] == 2 and run["parameters"] == 486409
    assert (
        "MultiWorkerMirrored" in run["versions"]["distributed"]
        or "CollectiveAllReduce" in run["versions"]["distributed"]
    )
    assert run["versions"]["tensorflow"] and run["versions"]["keras"].startswith("tf_keras")
    assert run["versions"]["onednn"] == "on" and run["layout"] == "channels_last"
    assert final["setup_s"] > 0 and not (reference / "checkpoint").exists()
    assert len(list((reference / "predictions").glob("test_*.png"))) == 2


def test_two_rank_horovod_learns_the_same_losses_as_multiworker(reference, prepared_data, tmp_path):
    result = launch_cell(cell_settings("tensorflow", "horovod", 2, seed=3, **LEARN), prepared_data, tmp_path)
    skip_unless_horovod_ran(result, tmp_path, "tensorflow")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "workflow/scripts/horovod_run.py --gloo" in result.stdout  # horovodrun, without its probe
    epochs, final, run = read_records(tmp_path)
    reference_epochs, _, _ = read_records(reference)
    # Same data order, init and optimizer: only the reduction differs (mean by Horovod, sum of scaled by TF).
    np.testing.assert_allclose([e["loss"] for e in epochs], [e["loss"] for e in reference_epochs], rtol=1e-4)
    assert final["iou"] > 3 * foreground_iou(prepared_data)
    assert run["status"] == "ok" and run["versions"]["horovod"]


def _epochs_done(out: Path) -> int:
    metrics = out / "metrics.jsonl"
    return metrics.read_text().count('"type": "epoch"') if metrics.exists() else 0


def test_a_killed_worker_fails_the_other_within_the_timeout_and_the_cell_resumes_to_identical_results(
    reference, prepared_data, tmp_path_factory, tmp_path
):
    """Worker 1 dies hard once the checkpoint after epoch 2 (KILLED_AFTER) is in force (a node lost); worker 0 fails
    on its own, and the cell's next attempt resumes from that checkpoint to the reference's results.
    The killed attempt is made once per run (paired_cells.killed_worker_attempt, no worker left
    behind): test_resume.py's agreement test takes a copy of it on too."""
    settings = multiworker_settings()
    out = tmp_path / "cell"
    survivor = killed_worker_attempt(tmp_path_factory, prepared_data, out)
    output = survivor["output"]
    # the survivor failed on its own, within the collective timeout plus a margin (not by hanging)
    assert survivor["returncode"] is not None, "worker 0 still ran 90 s past its collective timeout"
    assert survivor["returncode"] != 0, output[-3000:]
    assert "rank 0: failed:" in output, output[-3000:]
    assert json.loads((out / "run.json").read_text())["status"] == "failed"
    assert _epochs_done(out) < LEARN["epochs"]
    resumed = launch_cell(settings, prepared_data, out)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert f"resuming from checkpoint after epoch {KILLED_AFTER}" in resumed.stdout
    epochs_ref, final_ref, _ = read_records(reference)
    epochs_res, final_res, run_res = read_records(out)
    assert run_res["resumed_from_epoch"] == KILLED_AFTER and [e["epoch"] for e in epochs_res] == [1, 2, 3, 4]
    np.testing.assert_allclose([e["loss"] for e in epochs_res], [e["loss"] for e in epochs_ref], rtol=0, atol=1e-6)
    np.testing.assert_allclose(
        [final_res["test_loss"], final_res["iou"]], [final_ref["test_loss"], final_ref["iou"]], rtol=0, atol=1e-6
    )
    assert not (out / "checkpoint").exists()


def test_a_process_count_mismatch_stops_before_the_model(prepared_data, tmp_path):
    settings = cell_settings("tensorflow", "native", 2)
    env = tool_env(
        RANK="0",
        LOCAL_RANK="0",
        WORLD_SIZE="3",
        LOCAL_WORLD_SIZE="3",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT="29999",
        TF_USE_LEGACY_KERAS="1",
    )
    result = subprocess.run(
        rank_command(settings, prepared_data, tmp_path), env=env, capture_output=True, text=True, timeout=300
    )
    assert_refused(result, tmp_path, "WORLD_SIZE = 3 ranks, but the cell asks for 2 GPUs")


def test_a_gpu_cell_without_a_gpu_fails_before_its_first_step(prepared_data, tmp_path):
    result = launch_cell(cell_settings("tensorflow", "horovod", 2, device="cuda"), prepared_data, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]  # refused: a result, no retry would change it
    assert_refused(result, tmp_path, "this cell is meant for GPUs (training.device is cuda) but TensorFlow")
    assert "DeviceError" in json.loads((tmp_path / "run.json").read_text())["reason"]


def test_mirrored_in_one_process_learns_the_same_losses_as_two_multiworker_workers(reference, prepared_data, tmp_path):
    """The mirrored backend: one process drives both replicas of a 2-"GPU" cell (logical CPU devices
    here), started by its default launcher template, and steps like two MultiWorkerMirrored workers
    (the reference run, whose workers get 2 threads each as this process's replicas do)."""
    settings = cell_settings("tensorflow", "mirrored", 2, seed=3, **{**LEARN, "threads_per_rank": 1})
    result = launch_cell(settings, prepared_data, tmp_path / "m")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    launched = result.stdout.splitlines()[0]  # one process, no launcher of ranks
    assert "local_ranks.py" not in launched and "torch.distributed.run" not in launched, launched
    # it says where its replicas are: not on GPUs, sharing this process's CPU
    assert "rank 0/1: MirroredStrategy with 2 replicas (local) on 2 logical CPU devices: no GPU" in result.stdout
    epochs, final, run = read_records(tmp_path / "m")
    reference_epochs, reference_final, reference_run = read_records(reference)
    assert reference_run["training"]["threads_per_rank"] == 2
    # same data order, init and optimizer: only the reduction differs (in one process, or RING between two)
    np.testing.assert_allclose([e["loss"] for e in epochs], [e["loss"] for e in reference_epochs], rtol=1e-6)
    np.testing.assert_allclose(final["test_loss"], reference_final["test_loss"], rtol=1e-6)
    assert final["iou"] > 3 * foreground_iou(prepared_data)
    assert run["status"] == "ok" and (run["replicas"], run["processes"]) == (2, 1)
    assert run["versions"]["distributed"] == "tf.distribute MirroredStrategy local"
    training = run["training"]
    assert (training["tf_strategy"], training["tf_replica_devices"]) == ("MirroredStrategy", "logical CPU")
    assert training["threads_per_rank"] == 2 and training["global_batch"] == 8  # a thread per replica


def test_mirrored_refuses_a_launcher_that_starts_a_process_per_gpu(prepared_data, tmp_path):
    settings = cell_settings("tensorflow", "mirrored", 2, epochs=1)
    launchers = backends.default_launchers()
    launchers["local"]["tensorflow_mirrored"] = launchers["local"]["tensorflow_native"].replace("{ranks}", "2")
    result = subprocess.run(
        sb_launch.command_line(settings, prepared_data, tmp_path, launchers),
        capture_output=True,
        text=True,
        timeout=600,
        env=tool_env(SCALEBENCH_EXECUTOR="local"),
    )
    assert result.returncode == 0, result.stderr[-3000:]  # refused: a result, no retry would change it
    message = "WORLD_SIZE = 2 ranks, but the cell asks for 2 GPUs, which mirrored drives from 1 process(es)"
    assert_refused(result, tmp_path, message)


def test_bf16_mixed_precision_trains_under_the_keras_policy(prepared_data, tmp_path):
    # fp16 needs a GPU (and is refused on CPUs, test_config); bf16 runs on the CPU here, on both
    # placements: one-rank cells of two epochs, each rank started as srun starts it (rank_command)
    runs = {}
    for placement in ("device", "host"):
        settings = cell_settings("tensorflow", "native", 1, precision="bf16", epochs=2, loader={"placement": placement})
        command = rank_command(settings, prepared_data, tmp_path / placement)
        result = subprocess.run(command, capture_output=True, text=True, env=tool_env(), timeout=600)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        runs[placement] = read_records(tmp_path / placement)
    epochs, final, run = runs["device"]
    assert run["status"] == "ok", run.get("reason")  # a mismatch refuses the cell, naming both
    assert run["precision"] == "bf16" and run["training"]["precision"] == "bf16"
    # observed in both placements: the dtype of the model's output inside the traced step
    assert run["compute_dtype"] == runs["host"][2]["compute_dtype"] == "bfloat16"
    assert all(np.isfinite(e["loss"]) for e in epochs) and epochs[-1]["loss"] < epochs[0]["loss"]
    assert final["status"] == "ok" and 0 <= final["iou"] <= 1
    assert [e["loss"] for e in epochs] == [e["loss"] for e in runs["host"][0]]
