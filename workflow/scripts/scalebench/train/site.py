"""run.json's `site`: what two sites or two software stacks differ in, read on rank 0's node.

A rerun after upgrading a driver or NCCL, or the same study on another cluster, is compared
with analysis/baseline.py, which names every field of `site` that changed:

- `driver` and `gpus`: nvidia-smi's driver version and, per GPU, its model, memory, maximum
  and application clocks, power limit, MIG mode, persistence and compute mode;
- `topology`: nvidia-smi topo -m, how each pair of GPUs and network adapters connects
  (NV18, PIX, SYS...) and each GPU's nearest CPUs and NUMA node;
- `libraries`: the CUDA runtime, the CUDA driver API and NCCL as this rank's process loaded
  them (each library file mapped in the process, its own version function asked through
  ctypes: the framework's NCCL and Horovod's, which can differ from what either was built with);
- `network`: the node's adapters (/sys/class/net with their driver, speed and MTU; the
  InfiniBand devices of /sys/class/infiniband with each port's state, rate and link layer,
  Ethernet there meaning RoCE) and GPUDirect RDMA (the nvidia_peermem module loaded);
- `environment`: the NCCL_*, HOROVOD_*, TF_* and OMP_* variables the ranks ran with, without
  those the launcher sets per job (ranks, sizes, addresses, ports).

What cannot be read on a node is absent, and `site_reasons` says why (no nvidia-smi, no
InfiniBand, no NCCL loaded in a CPU cell). A multi-node cell records its first node's.
The readers take their sources as arguments (nvidia-smi's output, the /sys root, the
process's maps), so tests feed them recorded output and a faked /sys tree.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from scalebench.cluster import nvidia_smi

ENVIRONMENT_PREFIXES = ("NCCL_", "HOROVOD_", "TF_", "OMP_")
# set by the launchers for one job or one rank: they differ between any two runs and explain nothing
PER_LAUNCH = re.compile(r"^TF_CONFIG$|_(RANK|SIZE|ADDR|PORT|HOSTNAME|PREFIX)$")
# NVIDIA's kernel modules for GPUDirect RDMA (the second one before driver 470)
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
# mapped files that may hold a version function: the libraries, and the frameworks' and Horovod's
# own shared objects, which can carry NCCL linked in
LIBRARIES = {
    "nccl": (
        re.compile(r"libnccl|libtorch_cuda|_pywrap_tensorflow|libtensorflow_framework|horovod.*\.so"),
        "ncclGetVersion",
    ),
    "cuda_runtime": (re.compile(r"libcudart"), "cudaRuntimeGetVersion"),
    "cuda_driver_api": (re.compile(r"libcuda\.so"), "cuDriverGetVersion"),
}
Call = Callable[..., tuple[str | None, str]]


def gpus(call: Call = nvidia_smi.call) -> tuple[dict | None, str | None, str]:
    """(each GPU's properties by index, the driver version, '') or (None, None, why not)."""
    text, why = call(f"--query-gpu={','.join(nvidia_smi.GPU_QUERY)}", "--format=csv,nounits")
    if text is None:
        return None, None, why
    found = {}
    driver = None
    for row in nvidia_smi.parse_query(text):
        driver = row.pop("driver_version", None) or driver
        row.pop("uuid", None)  # identifies the card, not how it is set up
        found[str(row.pop("index", len(found)))] = {key.replace(".", "_"): value for key, value in row.items()}
    if not found:
        return None, None, "nvidia-smi lists no GPU on this node"
    return found, driver, ""


def topology(call: Call = nvidia_smi.call) -> tuple[dict | None, str]:
    """(nvidia-smi topo -m as links, CPU and NUMA affinities and adapter names, '') or (None, why not)."""
    text, why = call("topo", "-m")
    if text is None:
        return None, why
    parsed = nvidia_smi.parse_topology(text)
    if not parsed.links:
        return None, "nvidia-smi topo -m printed no matrix"
    return parsed.to_json(), ""


def mapped_files(maps: str) -> list[str]:
    """The shared objects a process has mapped, from /proc/<pid>/maps, in first-mapped order."""
    paths = (line.split(None, 5)[5].strip() for line in maps.splitlines() if len(line.split(None, 5)) == 6)
    return list(dict.fromkeys(path for path in paths if ".so" in Path(path).name))


def nccl_files(maps: str | None = None) -> list[str]:
    """The libnccl files mapped in this process (its /proc/self/maps where `maps` is not given): the
    GPU stack check's observation of which NCCL the framework and Horovod actually loaded."""
    text = Path("/proc/self/maps").read_text() if maps is None else maps
    return [path for path in mapped_files(text) if Path(path).name.startswith("libnccl")]


# NVIDIA's CUDA libraries as Python packages (nvidia-cudnn-cu12, nvidia-nccl-cu12, ...)
CUDA_PACKAGE = re.compile(r"nvidia-[a-z0-9-]+-cu\d+")


def cuda_packages() -> list[str]:
    """NVIDIA's CUDA libraries installed in this environment as Python packages ('nvidia-cudnn-cu12
    9.3.0.75'), sorted: where TensorFlow finds its CUDA when the site's modules give none."""
    found = set()
    for distribution in importlib.metadata.distributions():
        name = (distribution.metadata["Name"] or "").lower()
        if CUDA_PACKAGE.fullmatch(name):
            found.add(f"{name} {distribution.version}")
    return sorted(found)


def version_text(kind: str, code: int) -> str:
    """A version function's integer as text: NCCL 22105 -> 2.21.5 (2708 -> 2.7.8 before 2.9); CUDA 12040 -> 12.4."""
    if kind == "nccl":
        major, rest = (code // 10000, code % 10000) if code >= 10000 else (code // 1000, code % 1000)
        return f"{major}.{rest // 100}.{rest % 100}"
    return f"{code // 1000}.{code % 1000 // 10}"


def ask_version(path: str, function: str) -> int | None:
    """The integer `function(int*)` of the library at `path` reports (already loaded: no new copy), or None."""
    try:
        library = ctypes.CDLL(path)
        reader = getattr(library, function)
    except (OSError, AttributeError):
        return None
    value = ctypes.c_int(0)
    return value.value if reader(ctypes.byref(value)) == 0 and value.value > 0 else None


def library_label(path: str) -> str:
    """A library by its place in its Python environment ('nvidia/nccl/lib/libnccl.so.2'), else its path:
    the same library of an environment at another path is no change."""
    return path.split("site-packages/", 1)[1] if "site-packages/" in path else path


def libraries(maps: str, ask: Callable[[str, str], int | None] = ask_version) -> tuple[dict, dict]:
    """({kind: {library: version}}, {kind: why absent}) for NCCL, the CUDA runtime and driver API."""
    files = mapped_files(maps)
    found: dict[str, dict[str, str]] = {}
    reasons: dict[str, str] = {}
    for kind, (pattern, function) in LIBRARIES.items():
        versions = {}
        for path in files:
            if pattern.search(Path(path).name) or (kind == "nccl" and pattern.search(path)):
                code = ask(path, function)
                if code:
                    versions[library_label(path)] = version_text(kind, code)
        if versions:
            found[kind] = versions
        else:
            reasons[kind] = f"no library with {function} is loaded in this rank (a CPU cell, or a build without it)"
    return found, reasons


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:  # a down link's speed reads EINVAL; missing files on other kernels
        return None


def _driver(device: Path) -> str | None:
    link = device / "driver"
    return os.path.basename(os.readlink(link)) if link.is_symlink() else None


def network(sys_root: str | Path = "/sys") -> tuple[dict, dict]:
    """({interfaces, infiniband, gpudirect_rdma}, {what: why absent}) of this node's /sys."""
    root = Path(sys_root)
    interfaces = {}
    net = root / "class" / "net"
    for adapter in sorted(net.iterdir()) if net.is_dir() else []:
        if not (adapter / "device").exists():  # loopback, bridges, veth: no adapter behind them
            continue
        speed = _read(adapter / "speed")
        interfaces[adapter.name] = {
            "driver": _driver(adapter / "device"),
            "state": _read(adapter / "operstate"),
            "speed_mbps": int(speed) if speed and speed.lstrip("-").isdigit() and int(speed) > 0 else None,
            "mtu": _read(adapter / "mtu"),
            "type": {"1": "ethernet", "32": "infiniband"}.get(_read(adapter / "type") or "", _read(adapter / "type")),
        }
    infiniband = {}
    ib = root / "class" / "infiniband"
    for device in sorted(ib.iterdir()) if ib.is_dir() else []:
        ports = {}
        for port in sorted((device / "ports").iterdir()) if (device / "ports").is_dir() else []:
            layer = _read(port / "link_layer")
            ports[port.name] = {
                "state": _read(port / "state"),
                "rate": _read(port / "rate"),
                "link_layer": layer,
                "roce": layer == "Ethernet",
            }
        infiniband[device.name] = {
            "driver": _driver(device / "device"),
            "firmware": _read(device / "fw_ver"),
            "board": _read(device / "board_id"),
            "ports": ports,
        }
    loaded = [name for name in PEERMEM_MODULES if (root / "module" / name).is_dir()]
    found = {
        "interfaces": interfaces,
        "infiniband": infiniband,
        "gpudirect_rdma": {"module": loaded[0] if loaded else None, "loaded": bool(loaded)},
    }
    reasons = {}
    if not infiniband:
        reasons["infiniband"] = f"no InfiniBand or RoCE device on this node ({ib} is empty or absent)"
    if not interfaces:
        reasons["interfaces"] = f"no network adapter under {net}"
    return found, reasons


def environment(env: Mapping[str, str]) -> dict[str, str]:
    """The NCCL_*, HOROVOD_*, TF_* and OMP_* variables, without the launcher's per-job ones."""
    return {
        name: value
        for name, value in sorted(env.items())
        if name.startswith(ENVIRONMENT_PREFIXES) and not PER_LAUNCH.search(name)
    }


def read_libraries(maps: str | None = None) -> tuple[dict, dict]:
    """libraries() of this process (its /proc/self/maps where `maps` is not given)."""
    return libraries(Path("/proc/self/maps").read_text() if maps is None else maps)


def update_libraries(record: dict, maps: str | None = None) -> None:
    """Read the libraries again into a run.json record at the cell's end: TensorFlow and Horovod
    may load NCCL only at their first reduction, after the record was started."""
    if "site" not in record:
        return
    record["site"]["libraries"], missing = read_libraries(maps)
    reasons = {k: v for k, v in record["site_reasons"].items() if not k.startswith("libraries.")}
    record["site_reasons"] = reasons | {f"libraries.{kind}": why for kind, why in missing.items()}


def fields(
    call: Call = nvidia_smi.call,
    sys_root: str | Path = "/sys",
    maps: str | None = None,
    env: Mapping[str, str] | None = None,
) -> dict:
    """run.json's `site` and `site_reasons` (what is absent from `site`, and why)."""
    site: dict = {}
    reasons: dict[str, str] = {}
    found, driver, why = gpus(call)
    if found is None:
        reasons["gpus"] = reasons["driver"] = why
    else:
        site["driver"], site["gpus"] = driver, found
    links, why = topology(call) if found is not None else (None, "no GPU listed by nvidia-smi")
    if links is None:
        reasons["topology"] = why
    else:
        site["topology"] = links
    site["libraries"], missing = read_libraries(maps)
    reasons.update({f"libraries.{kind}": why for kind, why in missing.items()})
    site["network"], missing = network(sys_root)
    reasons.update({f"network.{what}": why for what, why in missing.items()})
    site["environment"] = environment(os.environ if env is None else env)
    return {"site": site, "site_reasons": reasons}
