"""PyTorch fsdp and dp on real GPUs, started through launch.py with their launcher templates as the
train rule starts them. Skipped where torch sees no CUDA
device; the FSDP test needs two GPUs.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from gpu_cells import train_on_gpu

ENVIRONMENT = "torch"

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]


def train(backend: str, gpus: int, data: Path, out: Path, **training) -> tuple[dict, list[dict], str]:
    return train_on_gpu(backend, gpus, data, out, deterministic=True, **training)


def test_dp_drives_every_visible_gpu_from_one_process_in_bfloat16(prepared_data, tmp_path):
    gpus = torch.cuda.device_count()
    run, records, log = train("dp", gpus, prepared_data, tmp_path, epochs=2, precision="bf16")
    assert run, log[-3000:]
    assert run["status"] == "ok" and run["device"] == "cuda" and (run["processes"], run["replicas"]) == (1, gpus)
    assert run["training"]["dp"]["device_ids"] == list(range(gpus))
    assert run["compute_dtype"] == "bfloat16"  # gathered from the replicas' threads (autocast is per thread)
    assert run["versions"]["distributed"] == f"torch.nn.DataParallel over {gpus} GPU(s)"
    assert all(math.isfinite(r["loss"]) for r in records if r["type"] == "epoch")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="FSDP needs two ranks, each on its own GPU")
def test_fsdp_on_two_gpus_reduces_with_nccl_and_tracks_ddp(prepared_data, tmp_path):
    losses = {}
    for backend in ("native", "fsdp"):
        run, records, log = train(backend, 2, prepared_data, tmp_path / backend, epochs=3)
        assert run, log[-3000:]
        assert run["status"] == "ok" and "nccl" in run["versions"]["distributed"]
        losses[backend] = [r["loss"] for r in records if r["type"] == "epoch"]
    # the same arithmetic up to the order NCCL's allreduce and reduce-scatter add in
    np.testing.assert_allclose(losses["fsdp"], losses["native"], rtol=1e-3)


DELAY_S = 0.2  # per step, as tests/integration/test_step_split.py


@pytest.mark.skipif(
    torch.cuda.device_count() < 2,
    reason=(
        "DataParallel's multi-device path needs two GPUs: its replicas live on CUDA devices only, and on the "
        "CPU (or one GPU) nn.DataParallel runs the module as it is, with nothing to reduce "
        "(tests/integration/test_step_split.py measures that case)"
    ),
)
def test_dp_on_two_gpus_finds_a_late_reduction_of_its_replicas_gradients(prepared_data, tmp_path):
    # slow_reduce of rank 0 sleeps in a hook on the model's first parameter, whose gradient arrives only
    # once the replicas' gradients are summed onto the first GPU (the backward of DataParallel's
    # broadcast): after the mark b (every replica's gradients, a multi-grad hook), before backward
    # returns (c). The split must count it as exposed communication, not compute.
    fault = {"SCALEBENCH_FAULT": f"slow_reduce:0:{DELAY_S}:3"}
    run, records, log = train(
        "dp", 2, prepared_data, tmp_path, env=fault, epochs=3, dataset_repeat=2, checkpoint_every=0
    )
    assert run and run["status"] == "ok" and (run["processes"], run["replicas"]) == (1, 2), log[-3000:]
    base, delayed = ([r for r in records if r["type"] == "epoch"][i]["ranks"][0] for i in (1, 2))
    grew = {part: (delayed[part] - base[part]) / delayed["steps"] for part in ("comm_exposed_s", "compute_s")}
    assert 0.6 * DELAY_S <= grew["comm_exposed_s"] <= 1.4 * DELAY_S + 0.05, grew
    assert grew["compute_s"] < 0.5 * DELAY_S, grew
