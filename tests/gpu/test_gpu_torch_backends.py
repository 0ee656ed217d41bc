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
    assert run["status"] == "ok" and run["device"] == "cuda" and (run["processes"], run["world_size"]) == (1, gpus)
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
