"""run.json's site: nvidia-smi's recorded output, a faked /sys tree with InfiniBand and RoCE, the
libraries a process maps, the ranks' variables; and this machine's network adapters, read for real."""

from __future__ import annotations

import ctypes.util
import json
import subprocess
from pathlib import Path

import pytest
from conftest import REPO
from scalebench.train import site

RECORDED = REPO / "tests" / "fixtures" / "nvidia-smi"


def recorded_smi(machine: str = "4xh100"):
    """nvidia_smi.call answering from the recordings, as the stand-in script does."""

    def call(*arguments: str):
        if arguments[0].startswith("--query-gpu="):
            return (RECORDED / f"query-{machine}.csv").read_text(), ""
        if arguments[:2] == ("topo", "-m"):
            return (RECORDED / f"topo-{machine}.txt").read_text(), ""
        return None, f"no recording of {arguments}"

    return call


def no_smi(*arguments: str):
    return None, "nvidia-smi is not on this node's PATH (no NVIDIA driver)"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def fake_sys(root: Path) -> Path:
    """A node with an InfiniBand HCA (mlx5_0), a RoCE NIC (mlx5_1), its Ethernet port, and nvidia_peermem."""
    drivers = root / "bus" / "pci" / "drivers"
    for name, layer, rate in (
        ("mlx5_0", "InfiniBand", "200 Gb/sec (4X HDR)"),
        ("mlx5_1", "Ethernet", "100 Gb/sec (4X EDR)"),
    ):
        device = root / "class" / "infiniband" / name
        write(device / "fw_ver", "20.39.1002")
        write(device / "board_id", "MT_0000000222")
        write(device / "ports" / "1" / "state", "4: ACTIVE")
        write(device / "ports" / "1" / "rate", rate)
        write(device / "ports" / "1" / "link_layer", layer)
        (device / "device").mkdir()
        (drivers / "mlx5_core").mkdir(parents=True, exist_ok=True)
        (device / "device" / "driver").symlink_to(drivers / "mlx5_core")
    port = root / "class" / "net" / "enp1s0f1"
    write(port / "operstate", "up")
    write(port / "speed", "100000")
    write(port / "mtu", "9000")
    write(port / "type", "1")
    (port / "device").mkdir()
    (port / "device" / "driver").symlink_to(drivers / "mlx5_core")
    write(root / "class" / "net" / "lo" / "operstate", "unknown")  # no device: not an adapter
    (root / "module" / "nvidia_peermem").mkdir(parents=True)
    return root


def test_gpus_driver_and_topology_come_from_nvidia_smi():
    fields = site.fields(call=recorded_smi(), sys_root="/nonexistent", maps="", env={})
    found = fields["site"]
    assert found["driver"] == "550.54.15" and sorted(found["gpus"]) == ["0", "1", "2", "3"]
    gpu = found["gpus"]["2"]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["power_limit"] == "500.00"
    assert gpu["clocks_max_sm"] == "1980" and gpu["mig_mode_current"] == "Disabled" and "uuid" not in gpu
    assert found["topology"]["links"]["GPU0"]["NIC0"] == "PXB"
    assert found["topology"]["cpu_affinity"]["GPU3"] == "16-31,48-63" and found["topology"]["nics"]["NIC1"] == "mlx5_1"
    assert "gpus" not in fields["site_reasons"] and "topology" not in fields["site_reasons"]


def test_without_nvidia_smi_the_gpu_fields_are_absent_with_the_reason():
    fields = site.fields(call=no_smi, sys_root="/nonexistent", maps="", env={})
    assert not {"driver", "gpus", "topology"} & set(fields["site"])
    assert fields["site_reasons"]["gpus"] == "nvidia-smi is not on this node's PATH (no NVIDIA driver)"
    assert fields["site_reasons"]["topology"] == "no GPU listed by nvidia-smi"


def test_infiniband_roce_and_gpudirect_are_read_from_the_sys_tree(tmp_path):
    found, reasons = site.network(fake_sys(tmp_path))
    assert found["infiniband"]["mlx5_0"]["ports"]["1"] == {
        "state": "4: ACTIVE",
        "rate": "200 Gb/sec (4X HDR)",
        "link_layer": "InfiniBand",
        "roce": False,
    }
    assert found["infiniband"]["mlx5_1"]["ports"]["1"]["roce"] is True
    assert (
        found["infiniband"]["mlx5_0"]["driver"] == "mlx5_core"
        and found["infiniband"]["mlx5_0"]["firmware"] == "20.39.1002"
    )
    assert found["interfaces"] == {
        "enp1s0f1": {"driver": "mlx5_core", "state": "up", "speed_mbps": 100000, "mtu": "9000", "type": "ethernet"}
    }
    assert found["gpudirect_rdma"] == {"module": "nvidia_peermem", "loaded": True}
    assert reasons == {}
    bare, reasons = site.network(tmp_path / "empty")
    assert (
        bare["gpudirect_rdma"] == {"module": None, "loaded": False}
        and "no InfiniBand or RoCE device" in reasons["infiniband"]
    )


def test_this_machine_s_network_adapters_are_read_for_real():
    """The adapters are those iproute2 (netlink, not /sys) shows with a device behind them."""
    try:
        links = json.loads(
            subprocess.run(["ip", "-j", "-d", "link"], capture_output=True, text=True, check=True).stdout
        )
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"ip is needed to check the adapters independently: {error}")
    expected = {link["ifname"]: link for link in links if link.get("parentbus")}
    found, _ = site.network("/sys")
    assert set(found["interfaces"]) == set(expected)
    for name, adapter in found["interfaces"].items():
        assert adapter["mtu"] == str(expected[name]["mtu"])
        assert adapter["state"] == expected[name]["operstate"].lower()
        uevent = Path(f"/sys/class/net/{name}/device/uevent").read_text()
        assert f"DRIVER={adapter['driver']}" in uevent.splitlines()


def test_library_versions_are_asked_of_each_mapped_file_and_decoded():
    maps = (
        "7f0000000000-7f0000001000 r-xp 00000000 08:01 1 /venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2\n"
        "7f0000001000-7f0000002000 r--p 00001000 08:01 1 /venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2\n"
        "7f0000002000-7f0000003000 r-xp 00000000 08:01 2 /venv/lib/python3.11/site-packages/horovod/torch/mpi_lib_v2.cpython-311-x86_64-linux-gnu.so\n"
        "7f0000003000-7f0000004000 r-xp 00000000 08:01 3 /opt/cuda/lib64/libcudart.so.12\n"
        "7f0000004000-7f0000005000 rw-p 00000000 00:00 0 \n"
        "7f0000005000-7f0000006000 r-xp 00000000 08:01 4 /usr/lib/libm.so.6\n"
    )
    codes = {
        ("libnccl.so.2", "ncclGetVersion"): 22105,
        ("mpi_lib_v2.cpython-311-x86_64-linux-gnu.so", "ncclGetVersion"): 2708,
    }
    codes[("libcudart.so.12", "cudaRuntimeGetVersion")] = 12040
    asked = []

    def ask(path, function):
        asked.append((Path(path).name, function))
        return codes.get((Path(path).name, function))

    found, reasons = site.libraries(maps, ask)
    assert found["nccl"] == {  # named by their place in the environment: a moved one is no change
        "nvidia/nccl/lib/libnccl.so.2": "2.21.5",
        "horovod/torch/mpi_lib_v2.cpython-311-x86_64-linux-gnu.so": "2.7.8",  # NCCL linked into Horovod
    }
    assert found["cuda_runtime"] == {"/opt/cuda/lib64/libcudart.so.12": "12.4"}  # a module's, outside it
    assert "no library with cuDriverGetVersion is loaded" in reasons["cuda_driver_api"]
    assert ("libm.so.6", "ncclGetVersion") not in asked


def test_a_real_library_s_version_function_is_called_through_ctypes():
    # libc has no NCCL: asking it gives None, not an error; a CPU process maps no NCCL at all
    assert site.ask_version(ctypes.util.find_library("c") or "libc.so.6", "ncclGetVersion") is None
    found, reasons = site.read_libraries()
    assert "nccl" in found or "no library with ncclGetVersion" in reasons["nccl"]


def test_the_ranks_variables_are_recorded_without_the_launcher_s_per_job_ones():
    env = {
        "NCCL_IB_HCA": "mlx5_0",
        "NCCL_DEBUG": "INFO",
        "HOROVOD_GPU_OPERATIONS": "NCCL",
        "HOROVOD_RANK": "0",
        "HOROVOD_GLOO_RENDEZVOUS_PORT": "12001",
        "HOROVOD_HOSTNAME": "node1",
        "TF_CONFIG": "{}",
        "TF_NUM_INTRAOP_THREADS": "4",
        "OMP_NUM_THREADS": "4",
        "PATH": "/bin",
    }
    assert site.environment(env) == {
        "HOROVOD_GPU_OPERATIONS": "NCCL",
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_HCA": "mlx5_0",
        "OMP_NUM_THREADS": "4",
        "TF_NUM_INTRAOP_THREADS": "4",
    }


def test_libraries_are_read_again_at_the_end_of_the_cell():
    record = {"site": {"libraries": {}}, "site_reasons": {"libraries.nccl": "none yet", "gpus": "no nvidia-smi"}}
    site.update_libraries(record, maps="")
    assert record["site_reasons"]["gpus"] == "no nvidia-smi"
    assert "no library with ncclGetVersion" in record["site_reasons"]["libraries.nccl"]
