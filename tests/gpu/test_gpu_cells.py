"""PyTorch's cells on a real GPU, started through launch.py exactly as the train rule does.

Skipped where torch sees no CUDA device (CI, laptops). On a GPU machine (each module in its
environment's session, tests/conftest.py; TensorFlow's cell: test_gpu_cells_tensorflow.py):
    ./run_tests.sh -m gpu tests/gpu
benchmarks/gpu_check.py measures the same paths at the benchmark size.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import assert_refused, cell_settings, launch_cell
from gpu_cells import train_on_gpu

ENVIRONMENT = "torch"

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]


def train(prepared_data, out, gpus: int = 1, env: dict | None = None, **training) -> tuple[dict, list[dict], str]:
    return train_on_gpu("native", gpus, prepared_data, out, env, **training)


def test_a_cuda_cell_trains_on_its_gpu_with_nccl_and_reports_mfu(prepared_data, tmp_path):
    run, records, log = train(prepared_data, tmp_path / "cell")
    assert run, log[-3000:]
    assert run["device"] == "cuda" and run["status"] == "ok"
    assert run["devices"] == [torch.cuda.get_device_name(0)]
    assert run["versions"]["distributed"] == "torch.distributed nccl"
    assert run["tf32"] is (torch.cuda.get_device_capability(0)[0] >= 8)
    epochs = [r for r in records if r["type"] == "epoch"]
    assert all(math.isfinite(r["loss"]) for r in epochs)
    if run["peak_tflops"] is not None:  # a GPU of the peaks table: MFU per GPU, a fraction
        assert all(0 < r["mfu"] < 1 for r in epochs)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains_on_the_gpu(prepared_data, tmp_path, precision):
    run, records, log = train(prepared_data, tmp_path / precision, precision=precision)
    assert run, log[-3000:]
    assert run["status"] == "ok" and run["peak_precision"] == precision
    # observed inside the step (fp16 runs only on a GPU, so only here)
    assert run["compute_dtype"] == {"bf16": "bfloat16", "fp16": "float16"}[precision]
    assert all(math.isfinite(r["loss"]) for r in records if r["type"] == "epoch")


def test_two_ranks_share_the_gpu_only_when_allowed(prepared_data, tmp_path):
    needed = torch.cuda.device_count() + 1  # one rank more than this machine has GPUs
    settings = cell_settings("torch", "native", needed, device="cuda")
    result = launch_cell(settings, prepared_data, tmp_path / "refused", timeout=600)
    # refused before the first step, at its first attempt: launch.py records the outcome and exits 0
    assert_refused(result, tmp_path / "refused", f"need {needed} GPUs but torch")
    run, records, log = train(prepared_data, tmp_path / "shared", gpus=needed, env={"SCALEBENCH_SHARE_GPU": "1"})
    assert run, log[-3000:]
    assert run["status"] == "ok" and run["replicas"] == needed and run["shared_gpu"] is True
    assert run["versions"]["distributed"] == "torch.distributed gloo"  # NCCL refuses two ranks on one GPU


def test_mfu_is_the_measured_flops_over_the_gpus_peak(prepared_data, tmp_path):
    from scalebench.data.preprocess import read_manifest
    from torch.utils.flop_counter import FlopCounterMode

    run, records, log = train(prepared_data, tmp_path / "cell")
    assert run, log[-3000:]
    if run["peak_tflops"] is None:
        pytest.skip(f"{run['devices'][0]} is not in cluster.peak_tflops")
    from scalebench.train.torch.model import UNet

    height, width = read_manifest(prepared_data)["image_size"]
    model = UNet().cuda()
    counter = FlopCounterMode(display=False)
    with counter:
        image = torch.rand(1, 1, height, width, device="cuda")
        mask = (torch.rand(1, 1, height, width, device="cuda") > 0.5).float()
        torch.nn.functional.binary_cross_entropy_with_logits(model(image), mask).backward()
    for record in (r for r in records if r["type"] == "epoch"):
        counted = record["images_per_s"] * counter.get_total_flops() / 1e12 / run["peak_tflops"]
        assert record["mfu"] == pytest.approx(counted, rel=0.05)


def test_the_step_split_of_one_gpu_has_no_exposed_communication_and_its_trace_holds_kernels(prepared_data, tmp_path):
    # CUDA events on the current stream, read at the epoch's end (train/torch/step_timing.py)
    run, records, log = train(prepared_data, tmp_path / "split", epochs=3, profile={"epoch": 2, "steps": 2})
    assert run, log[-3000:]
    for epoch in (r for r in records if r["type"] == "epoch"):
        (rank,) = epoch["ranks"]
        assert rank["compute_s"] + rank["comm_exposed_s"] + rank["data_wait_s"] + rank["rest_s"] == pytest.approx(
            rank["epoch_time_s"]
        )
        assert rank["rest_s"] >= -(0.01 * rank["epoch_time_s"] + 0.002)  # records.REST_TOLERANCE_*
        # one rank still runs DDP's reducer (a one-rank NCCL all-reduce and the copy back): 4.6 ms of an
        # 81 ms epoch on an H100, 5.6%, over the 5% of the epoch this test first asked. A split that counted
        # compute as communication would put most of the step here; measured against compute, not the
        # epoch, since on these tiny images a step's length is the launch overhead of the machine at hand
        assert 0 <= epoch["comm_exposed_s"] < 0.25 * epoch["compute_s"]
        assert epoch["comm_total_s"] is None and "GPUs" in epoch["comm_total_reason"]
    trace = json.loads((tmp_path / "split" / "profile" / "rank0.pt.trace.json").read_text())
    assert any(event.get("cat") == "kernel" for event in trace["traceEvents"])
