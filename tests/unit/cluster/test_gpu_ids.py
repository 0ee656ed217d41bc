"""The GPU ids a local run may share out, and the CUDA_VISIBLE_DEVICES lists refused before any cell runs."""

from __future__ import annotations

from conftest import REPO
from scalebench.cluster import gpu_ids, nvidia_smi

RECORDED = REPO / "tests" / "fixtures" / "nvidia-smi"
H100 = nvidia_smi.parse_list((RECORDED / "list-4xh100.txt").read_text())
MIG = nvidia_smi.parse_list((RECORDED / "list-2xa100-mig.txt").read_text())


def test_ids_come_from_cuda_visible_devices_as_cuda_reads_it_else_from_nvidia_smi():
    assert gpu_ids.machine_ids({"CUDA_VISIBLE_DEVICES": "2,3"}, H100) == ["2", "3"]
    assert gpu_ids.machine_ids({"CUDA_VISIBLE_DEVICES": "1,-1,3"}, H100) == ["1"]  # CUDA stops at -1
    assert gpu_ids.machine_ids({"CUDA_VISIBLE_DEVICES": ""}, H100) == []
    assert gpu_ids.machine_ids({}, H100) == ["0", "1", "2", "3"]
    assert gpu_ids.machine_ids({}, []) == []


def test_an_id_named_twice_is_refused_with_or_without_nvidia_smi():
    for listing in (H100, None):
        problem = gpu_ids.problem({"CUDA_VISIBLE_DEVICES": "0,1,1"}, listing)
        assert "names GPU 1 more than once: two cells would share it" in problem


def test_an_id_the_machine_lacks_is_refused_naming_what_it_has():
    problem = gpu_ids.problem({"CUDA_VISIBLE_DEVICES": "2,7"}, H100)
    assert "names GPU 7, which this machine does not have" in problem and "3 (GPU-7c6b5a49" in problem
    # UUIDs and their unique prefixes, MIG devices too, are the machine's
    assert gpu_ids.problem({"CUDA_VISIBLE_DEVICES": "GPU-9a8b7c6d,3"}, H100) is None
    assert gpu_ids.problem({"CUDA_VISIBLE_DEVICES": "MIG-8b7a6c5d-4e3f-2a1b-0c9d-8e7f6a5b4c3d"}, MIG) is None
    assert "GPU-ffff" in gpu_ids.problem({"CUDA_VISIBLE_DEVICES": "GPU-ffff"}, H100)
    # without nvidia-smi (a faked GPU list) only duplicates can be found
    assert gpu_ids.problem({"CUDA_VISIBLE_DEVICES": "0,1,2"}, None) is None


def test_the_framework_s_gpu_is_named_as_nvidia_smi_and_nvml_know_it_by_index_or_uuid():
    # one home for local index -> GPU id: the energy meter, the free-memory probe and the OOM reason read it
    assert gpu_ids.device_id(1, {"CUDA_VISIBLE_DEVICES": "2,3"}) == "3"
    assert gpu_ids.device_id(1, {"CUDA_VISIBLE_DEVICES": "GPU-a, GPU-b"}) == "GPU-b"
    assert gpu_ids.device_id(2, {"CUDA_VISIBLE_DEVICES": "5"}) == "5"  # a task that sees only its own GPU
    assert gpu_ids.device_id(2, {"CUDA_VISIBLE_DEVICES": "4,-1,6"}) == "4"  # CUDA stops at -1
    assert gpu_ids.device_id(2, {}) == "2"  # unset: CUDA's index is nvidia-smi's (PCI_BUS_ID order)
