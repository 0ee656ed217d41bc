"""PyTorch's GPU cells run on their GPUs or fail saying why: checked with faked CUDA device queries
(the decisions themselves: test_devices.py)."""

from __future__ import annotations

import pytest
import torch
from scalebench.train import devices, rank_env
from scalebench.train.devices import DeviceError
from scalebench.train.horovod_common import check_gpu_reductions
from scalebench.train.torch import native, runtime
from test_devices import SLURM_JOB, run_settings

ENVIRONMENT = "torch"


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch believes it has `count` GPUs; set_device calls are recorded."""
    state = {"count": 2, "current": []}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: state["count"] > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: state["count"])
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: state["current"].append(device))
    return state


@pytest.mark.parametrize("local_rank", [0, 1])
def test_each_rank_takes_its_local_gpu_and_makes_it_current(fake_cuda, local_rank):
    device = runtime.choose_device(*run_settings(SLURM_JOB), local_rank, 2)
    assert device == torch.device("cuda", local_rank)
    assert fake_cuda["current"] == [device]


@pytest.mark.parametrize("local_rank", [0, 1, 2, 3])
def test_under_task_binding_each_rank_uses_the_one_gpu_its_task_sees(fake_cuda, local_rank):
    fake_cuda["count"] = 1  # --gpus-per-task=1: SLURM left each task only its own GPU
    device = runtime.choose_device(*run_settings(SLURM_JOB, binding="task"), local_rank, 4)
    assert device == torch.device("cuda", 0) and fake_cuda["current"] == [device]


def test_under_task_binding_a_task_that_sees_its_node_s_gpus_takes_its_local_rank_s(fake_cuda):
    fake_cuda["count"] = 4  # SLURM did not bind (--gpu-bind=none): as node binding
    assert runtime.choose_device(*run_settings(SLURM_JOB, binding="task"), 3, 4) == torch.device("cuda", 3)


def test_one_gpu_per_task_is_refused_where_it_could_be_shared(fake_cuda):
    fake_cuda["count"] = 1
    # node binding: every task should see the node's GPUs, so one GPU is the node's only one
    with pytest.raises(DeviceError, match=r"ranks would share a GPU.*cluster.gpu_binding: task"):
        runtime.choose_device(*run_settings(SLURM_JOB), 1, 4)
    fake_cuda["count"] = 2  # task binding: neither its own one nor the node's four, so which is its own?
    with pytest.raises(DeviceError, match=r"sees 2 GPU\(s\) under cluster.gpu_binding: task, not its own 1 nor the 4"):
        runtime.choose_device(*run_settings(SLURM_JOB, binding="task"), 1, 4)
    assert fake_cuda["current"] == []


def test_no_gpu_on_a_gpu_cell_fails_before_anything_starts(fake_cuda):
    fake_cuda["count"] = 0
    with pytest.raises(DeviceError, match=r"torch 2\.\d+.* sees none"):
        runtime.choose_device(*run_settings(SLURM_JOB), 0, 2)
    assert runtime.choose_device(*run_settings(), 0, 2) == torch.device("cpu")  # the local demo


def test_more_ranks_than_gpus_on_a_node_is_refused(fake_cuda):
    with pytest.raises(DeviceError, match=r"3 rank\(s\) on this node need 3 GPUs"):
        runtime.choose_device(*run_settings(SLURM_JOB), 2, 3)


def test_device_cpu_stays_on_the_cpu_beside_a_gpu(fake_cuda):
    assert runtime.choose_device(*run_settings(SLURM_JOB, device="cpu"), 1, 2) == torch.device("cpu")
    assert fake_cuda["current"] == []


@pytest.mark.parametrize(("device_type", "collective"), [("cuda", "nccl"), ("cpu", "gloo")])
def test_ddp_uses_nccl_on_gpus_and_gloo_on_the_cpu(monkeypatch, device_type, collective):
    chosen = []
    monkeypatch.setattr(native.dist, "init_process_group", lambda backend, **_: chosen.append(backend))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    backend = native.create(run_settings()[0], rank_env.detect({}), device_type, False)
    assert chosen == [collective] and backend.collective == collective


@pytest.mark.parametrize(("capability", "override", "expected"), [(8, None, True), (8, "0", False), (7, None, False)])
def test_tf32_is_recorded_as_the_gpu_and_nvidia_tf32_override_make_it(monkeypatch, capability, override, expected):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (capability, 0))
    if override is None:
        monkeypatch.delenv("NVIDIA_TF32_OVERRIDE", raising=False)
    else:
        monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", override)  # cuDNN and cuBLAS then never use TF32
    assert runtime.tf32_enabled(torch.device("cuda", 0)) is expected
    assert runtime.tf32_enabled(torch.device("cpu")) is None


def test_ranks_share_a_gpu_only_when_asked_and_then_reduce_through_gloo(fake_cuda, monkeypatch, capsys):
    fake_cuda["count"] = 1
    with pytest.raises(DeviceError, match=r"2 rank\(s\) on this node need 2 GPUs"):
        runtime.choose_device(*run_settings(SLURM_JOB), 1, 2)
    shared = run_settings({**SLURM_JOB, "SCALEBENCH_SHARE_GPU": "1"})
    assert shared[1].share_gpu and not run_settings(SLURM_JOB)[1].share_gpu
    assert runtime.choose_device(*shared, 1, 2) == torch.device("cuda", 0)
    assert "2 ranks share 1 GPU(s) (SCALEBENCH_SHARE_GPU=1)" in capsys.readouterr().out
    with pytest.raises(DeviceError, match=r"need 4 GPUs"):  # one process driving several GPUs never shares
        devices.use_gpus(True, "auto", 2, 2, 2, "lib", share=True)
    chosen = []  # NCCL refuses two ranks on one device: the shared check reduces through Gloo
    monkeypatch.setattr(native.dist, "init_process_group", lambda backend, **_: chosen.append(backend))
    backend = native.create(shared[0], rank_env.detect({}), "cuda", shared[1].share_gpu)  # as entry.py builds it
    assert chosen == ["gloo"] and backend.device is None


def test_horovod_without_nccl_refuses_a_gpu_cell_unless_allowed():
    import horovod.torch as hvd  # this machine's build: Gloo, no NCCL

    assert not hvd.nccl_built()
    with pytest.raises(RuntimeError, match=r"needs Horovod built with NCCL.*HOROVOD_GPU_OPERATIONS=NCCL"):
        check_gpu_reductions(hvd, "cuda", allowed=False)
    check_gpu_reductions(hvd, "cuda", allowed=True)
    check_gpu_reductions(hvd, "cpu", allowed=False)


def test_gpu_ranks_autotune_when_not_deterministic(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    runtime.set_determinism(1, deterministic=False)
    assert torch.backends.cudnn.benchmark is True
    try:
        runtime.set_determinism(1, deterministic=True)
        assert torch.backends.cudnn.benchmark is False and torch.are_deterministic_algorithms_enabled()
    finally:  # process-wide switches: leave them as the other tests expect
        torch.use_deterministic_algorithms(False)
