"""nvidia-smi's list, properties and topology, read from recorded output (tests/fixtures/nvidia-smi)."""

from __future__ import annotations

import os

from conftest import REPO
from scalebench.cluster import nvidia_smi

RECORDED = REPO / "tests" / "fixtures" / "nvidia-smi"


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


def test_the_list_gives_each_gpu_its_index_model_and_uuid_with_its_mig_devices():
    gpus = nvidia_smi.parse_list(recorded("list-2xa100-mig.txt"))
    assert [(g.index, g.name) for g in gpus] == [(0, "NVIDIA A100-SXM4-40GB"), (1, "NVIDIA A100-SXM4-40GB")]
    assert gpus[0].uuid == "GPU-5d3a8e2f-1b4c-4d6e-8f70-91a2b3c4d5e6"
    assert gpus[0].mig_uuids == ("MIG-2f6e1a9d-8c7b-5a4e-3d2c-1b0a9f8e7d6c", "MIG-8b7a6c5d-4e3f-2a1b-0c9d-8e7f6a5b4c3d")
    assert gpus[1].mig_uuids == ()


def test_the_query_is_read_by_its_header_with_units_dropped_and_unknowns_empty():
    rows = nvidia_smi.parse_query(recorded("query-4xh100.csv"))
    assert len(rows) == 4 and set(rows[0]) == set(nvidia_smi.GPU_QUERY)
    assert rows[2]["power.limit"] == "500.00" and rows[2]["power.default_limit"] == "700.00"
    assert rows[0]["driver_version"] == "550.54.15" and rows[0]["mig.mode.current"] == "Disabled"
    assert nvidia_smi.parse_query(recorded("query-2xgpu-2core.csv"))[0]["mig.mode.current"] is None  # [N/A]


def test_the_topology_gives_links_nearest_cpus_numa_nodes_and_adapter_names():
    topology = nvidia_smi.parse_topology(recorded("topo-4xh100.txt"))
    assert topology.links["GPU0"] == {"GPU1": "NV18", "GPU2": "NV18", "GPU3": "NV18", "NIC0": "PXB", "NIC1": "SYS"}
    assert topology.links["NIC1"]["GPU2"] == "PXB"
    assert topology.gpu_cpus(0) == "0-15,32-47" and topology.gpu_cpus(3) == "16-31,48-63"
    assert topology.numa_affinity == {"GPU0": "0", "GPU1": "0", "GPU2": "1", "GPU3": "1"}
    assert topology.nics == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert nvidia_smi.parse_topology("No devices were found\n").links == {}


def test_call_runs_the_nvidia_smi_on_path_or_says_why_there_is_none(monkeypatch):
    monkeypatch.setenv("PATH", f"{RECORDED}{os.pathsep}{os.environ['PATH']}")
    text, why = nvidia_smi.call("-L")
    assert why == "" and len(nvidia_smi.parse_list(text)) == 4
    text, why = nvidia_smi.call("--id=0", "-q")
    assert text is None and "failed (exit 2)" in why and "no recording" in why
    monkeypatch.setenv("PATH", "/nonexistent")
    assert nvidia_smi.call("-L") == (None, "nvidia-smi is not on this node's PATH (no NVIDIA driver)")
