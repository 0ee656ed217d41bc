"""A rank's GPU stack check before its first step (train/devices.py check_stack), with a node's and a
build's answers handed in: a rank that would train on GPUs is refused on a mismatch, one of
training.device auto that sees none trains on the CPU saying why, and a node without GPUs is as before."""

from __future__ import annotations

import pytest
from scalebench.gpu_stack import Build, Gpu, Node
from scalebench.refusal import GpuStackMismatch, Refused
from scalebench.train import devices

V100 = Node("535.183.01", "12.2", (Gpu(0, "Tesla V100-SXM2-32GB", (7, 0)),))
H100 = Node("580.65.06", "13.0", (Gpu(0, "NVIDIA H100 80GB HBM3", (9, 0)), Gpu(1, "NVIDIA H100 80GB HBM3", (9, 0))))
CU130 = Build("torch", "2.13.0+cu130", "13.0", ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"))
CPU_BUILD = Build("torch", "2.13.0+cpu", None, gpus_seen=0)


def never() -> Build:
    raise AssertionError("the build was asked where the check has nothing to hold it against")


@pytest.mark.parametrize(("required", "visible"), [(True, 0), (True, 1), (False, 1)])
def test_a_rank_that_would_train_on_gpus_is_refused_on_a_mismatch(monkeypatch, required, visible):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(GpuStackMismatch) as refused:
        devices.check_stack("cuda" if required else "auto", required, visible, lambda: CU130, lambda: V100)
    assert isinstance(refused.value, Refused)  # the cell ends refused, not retried
    message = str(refused.value)
    assert message.startswith("the GPU stack check refuses this cell before its first step: ")
    for named in ("Tesla V100-SXM2-32GB", "535.183.01", "torch 2.13.0+cu130", "SCALEBENCH_TORCH_CUDA=cu126"):
        assert named in message


def test_a_rank_of_device_auto_that_sees_no_gpu_trains_on_the_cpu_saying_why(monkeypatch, capsys):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    record = devices.check_stack("auto", False, 0, lambda: CPU_BUILD, lambda: V100)
    assert "warning: training.device auto: this rank trains on the CPU: torch 2.13.0+cpu is a CPU build" in (
        capsys.readouterr().out
    )
    assert record["problems"] and "SCALEBENCH_TORCH_CUDA=cu126" in record["problems"][0]
    assert record["capabilities"] == {"0": "7.0"} and record["reason"] is None


def test_a_build_that_fits_passes_and_is_recorded_for_the_gpus_this_process_sees(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    record = devices.check_stack("cuda", True, 1, lambda: CU130, lambda: H100)
    assert record == {
        "driver_cuda": "13.0",
        "capabilities": {"1": "9.0"},
        "architectures": list(CU130.architectures),
        "notes": [],
        "problems": [],
        "reason": None,
    }


def test_no_check_on_device_cpu_or_on_a_node_without_gpus(monkeypatch):
    assert devices.check_stack("cpu", False, 4, never, lambda: V100)["reason"] == "training.device is cpu"
    missing = Node(reason="nvidia-smi is not on this node's PATH (no NVIDIA driver)")
    record = devices.check_stack("cuda", True, 0, never, lambda: missing)
    assert record["reason"] == missing.reason and record["architectures"] is None
    # and use_gpus says "sees none" as before
    with pytest.raises(devices.DeviceError, match="sees none on this node"):
        devices.use_gpus(True, "cuda", 0, 1, 1, "torch 2.13.0+cpu")
