"""How many GPUs a local run has, and how many a cell holds of them."""

from __future__ import annotations

from scalebench.cluster import gpu_ids
from scalebench.config import local_gpus


def test_visible_gpus_follow_cuda_visible_devices_as_cuda_reads_it():
    assert local_gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1"}) == 2
    assert local_gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == 0
    assert local_gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": "2,-1,3"}) == 1  # CUDA stops at -1
    assert local_gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}) == 0


def test_cpu_ranks_hold_no_gpu_and_gpu_cells_one_per_device():
    assert gpu_ids.gpus_taken("cpu", 4, 8) == 0
    assert gpu_ids.gpus_taken("auto", 4, 0) == 0  # auto on a machine without GPUs: CPU ranks
    assert gpu_ids.gpus_taken("auto", 4, 8) == 4
    assert gpu_ids.gpus_taken("cuda", 2, 0) == 2


def test_a_cell_with_more_gpus_than_the_machine_is_refused_with_the_reason():
    assert local_gpus.problem("auto", 2, 2) is None and local_gpus.problem("auto", 8, 0) is None
    assert "needs 4 GPUs and this machine has 1 (local_gpus=1)" in local_gpus.problem("auto", 4, 1)
    assert "training.device is cuda and this machine has no GPU" in local_gpus.problem("cuda", 1, 0)
