"""GPU cells run on their GPUs or fail saying why: checked with faked CUDA device queries."""

from __future__ import annotations

import subprocess

import pytest
import torch
from conftest import cell_settings
from scalebench.settings import ProcessFacts, RunSettings
from scalebench.train import devices, rank_env
from scalebench.train.devices import DeviceError
from scalebench.train.horovod_common import check_gpu_reductions
from scalebench.train.placement import DataPlacement
from scalebench.train.torch import native, runtime

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


def test_tensorflow_prefetches_to_the_gpu_of_a_one_replica_process(monkeypatch):
    from scalebench.train.tf import data as tf_data
    from scalebench.train.tf import runtime as tf_runtime

    assert tf_runtime.input_device("cuda", 1) == "/gpu:0"  # configure() left only this rank's GPU visible
    assert tf_runtime.input_device("cuda", 2) is None  # MirroredStrategy copies host batches to each replica
    assert tf_runtime.input_device("cpu", 1) is None
    monkeypatch.setattr(tf_runtime, "configure", lambda *args: [0])  # a faked GPU: its index
    settings = cell_settings("tensorflow", "native", 1)
    run = RunSettings.from_json(settings, "d", "o")
    device = tf_runtime.build_device(run, ProcessFacts.of_rank(run, {}), rank_env.detect({}))
    backend = native.DDPBackend(rank_env.detect({}))  # only its place and counts are used here
    asked = []
    monkeypatch.setattr(tf_data, "train_dataset", lambda *args: asked.append(args[-1]))
    monkeypatch.setattr(tf_data, "eval_dataset", lambda *args: asked.append(args[-1]) or [])
    order = tf_data.build_order(run, backend, [0, 1], 1)
    batches = tf_data.build_data(run, device, backend, order, DataPlacement("host", 0, "host"), [])
    batches.epoch(0)
    batches.eval_batches([0])
    assert device.type == "cuda" and asked == ["/gpu:0", "/gpu:0"]


def test_horovod_without_nccl_refuses_a_gpu_cell_unless_allowed():
    import horovod.torch as hvd  # this machine's build: Gloo, no NCCL

    assert not hvd.nccl_built()
    with pytest.raises(RuntimeError, match=r"needs Horovod built with NCCL.*HOROVOD_GPU_OPERATIONS=NCCL"):
        check_gpu_reductions(hvd, "cuda", allowed=False)
    check_gpu_reductions(hvd, "cuda", allowed=True)
    check_gpu_reductions(hvd, "cpu", allowed=False)


@pytest.mark.parametrize(
    ("setting", "on_gpu", "expected"),
    [(None, False, True), (None, True, False), (True, True, True), (False, False, False)],
)
def test_determinism_is_on_for_cpu_ranks_and_off_on_gpus_unless_set(setting, on_gpu, expected):
    assert devices.deterministic(setting, on_gpu) is expected


def test_gpu_ranks_autotune_when_not_deterministic(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    runtime.set_determinism(1, deterministic=False)
    assert torch.backends.cudnn.benchmark is True
    try:
        runtime.set_determinism(1, deterministic=True)
        assert torch.backends.cudnn.benchmark is False and torch.are_deterministic_algorithms_enabled()
    finally:  # process-wide switches: leave them as the other tests expect
        torch.use_deterministic_algorithms(False)
