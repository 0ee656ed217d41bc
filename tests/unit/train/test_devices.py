"""GPU cells run on their GPUs or fail saying why: the decisions every framework's rank takes
(train/devices.py), checked with faked answers. PyTorch's device choice with faked CUDA device
queries: test_devices_torch.py; TensorFlow's input device: test_devices_tensorflow.py (its
refusals: tests/integration/test_tf_device_refusals.py)."""

from __future__ import annotations

import subprocess

import pytest
from conftest import cell_settings
from scalebench.settings import ProcessFacts, RunSettings
from scalebench.train import devices
from scalebench.train.devices import DeviceError

SLURM_JOB = {"SCALEBENCH_EXECUTOR": "slurm"}  # launch.py sets it for the ranks of a SLURM cell


def run_settings(env: dict | None = None, binding: str = "node", **training) -> tuple[RunSettings, ProcessFacts]:
    """A rank's settings and its own facts, resolved from `env` as the rank would from its own."""
    settings = cell_settings("torch", "native", 2, **training)
    settings["gpus_per_node"] = 4
    if binding != "node":  # config.train_settings names it only where it is not node
        settings["gpu_binding"] = binding
    run = RunSettings.from_json(settings, "data", "out")
    return run, ProcessFacts.of_rank(run, env or {})


def test_a_gpu_cell_is_one_with_device_cuda_or_a_slurm_job_on_a_gpu_cluster():
    assert run_settings(device="cuda")[1].gpu_required
    assert run_settings(SLURM_JOB)[1].gpu_required  # device auto
    assert not run_settings()[1].gpu_required  # the local demo: auto means a GPU if there is one
    assert not run_settings(SLURM_JOB, device="cpu")[1].gpu_required


def test_use_gpus_decides_or_refuses():
    assert devices.use_gpus(False, "auto", 0, 2, 1, "lib") is False
    assert devices.use_gpus(True, "auto", 4, 4, 1, "lib") is True
    assert devices.use_gpus(True, "cpu", 4, 4, 1, "lib") is False
    with pytest.raises(DeviceError, match=r"meant for GPUs \(training.device is cuda\) but lib sees none"):
        devices.use_gpus(True, "cuda", 0, 1, 1, "lib")
    with pytest.raises(DeviceError, match=r"runs on SLURM and cluster.gpus_per_node > 0"):
        devices.use_gpus(True, "auto", 0, 1, 1, "lib")
    with pytest.raises(DeviceError, match=r"4 rank\(s\) on this node need 4 GPUs but lib sees 2"):
        devices.use_gpus(False, "auto", 2, 4, 1, "lib")
    with pytest.raises(DeviceError, match=r"1 rank\(s\) on this node need 4 GPUs but lib sees 2"):
        devices.use_gpus(False, "auto", 2, 1, 4, "lib")  # one process driving 4 GPUs


def test_use_gpus_under_task_binding():
    assert devices.use_gpus(True, "auto", 1, 4, 1, "lib", binding="task") is True
    assert devices.use_gpus(True, "auto", 4, 1, 4, "lib", binding="task") is True  # dp: its one task's four
    assert devices.use_gpus(True, "auto", 8, 8, 1, "lib", binding="task") is True  # unbound: the node's
    with pytest.raises(DeviceError, match=r"sees 2 GPU\(s\) under cluster.gpu_binding: task, fewer than its 4"):
        devices.use_gpus(True, "auto", 2, 1, 4, "lib", binding="task")
    assert devices.use_gpus(True, "cpu", 1, 4, 1, "lib", binding="task") is False


def test_the_memory_of_a_task_s_only_gpu_is_asked_of_that_gpu(monkeypatch):
    asked = []

    def nvidia_smi(command, **kwargs):
        asked.append(command[1])
        return subprocess.CompletedProcess(command, 0, stdout="81559\n")

    monkeypatch.setattr(devices.subprocess, "run", nvidia_smi)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")  # SLURM's own numbering for this task's GPU
    assert devices.memory_total_mb("cuda", 2) == 81559.0  # local rank 2 uses cuda:0, which is GPU 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    devices.memory_total_mb("cuda", 3)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-a,GPU-b")  # nvidia-smi takes a UUID as the id too
    devices.memory_total_mb("cuda", 1)
    assert asked == ["--id=2", "--id=3", "--id=GPU-b"]


@pytest.mark.parametrize(
    ("setting", "on_gpu", "expected"),
    [(None, False, True), (None, True, False), (True, True, True), (False, False, False)],
)
def test_determinism_is_on_for_cpu_ranks_and_off_on_gpus_unless_set(setting, on_gpu, expected):
    assert devices.deterministic(setting, on_gpu) is expected
