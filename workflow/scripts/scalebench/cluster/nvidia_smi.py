"""What nvidia-smi says about this node's GPUs: their list, their properties and their topology,
and the answers the GPU stack check asks of a node (`read_node`: the driver, the newest CUDA it
runs, each GPU's compute capability; scalebench/gpu_stack.py).

Each reader takes nvidia-smi's text, so tests feed it recorded output; `call` runs the
program (the first nvidia-smi on PATH) and returns its output or why there is none.
Values nvidia-smi cannot give ("[N/A]", "[Not Supported]") read as None.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

from scalebench import gpu_stack

UNKNOWN = ("[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", "[Insufficient Permissions]", "")
# the properties run.json records for each GPU (nvidia-smi --help-query-gpu names them)
GPU_QUERY = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "driver_version",
    "vbios_version",
    "memory.total",
    "clocks.max.sm",
    "clocks.max.memory",
    "clocks.applications.graphics",
    "clocks.applications.memory",
    "power.limit",
    "power.default_limit",
    "mig.mode.current",
    "persistence_mode",
    "compute_mode",
)
# what the GPU stack check asks of each GPU (compute_cap: drivers from 510 on)
CAPABILITY_QUERY = ("index", "name", "compute_cap")


def call(*arguments: str, timeout: float = 30) -> tuple[str | None, str]:
    """(nvidia-smi's output, '') or (None, why it gave none)."""
    try:
        result = subprocess.run(["nvidia-smi", *arguments], capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return None, "nvidia-smi is not on this node's PATH (no NVIDIA driver)"
    except (OSError, subprocess.SubprocessError) as error:
        return None, f"nvidia-smi {' '.join(arguments)} failed: {error}"
    if result.returncode:
        message = " ".join((result.stdout + result.stderr).split())[:300]
        return None, f"nvidia-smi {' '.join(arguments)} failed (exit {result.returncode}): {message}"
    return result.stdout, ""


@dataclass(frozen=True)
class ListedGpu:
    """One line of `nvidia-smi -L`: its index, model and UUID (MIG devices belong to their GPU)."""

    index: int
    name: str
    uuid: str
    mig_uuids: tuple[str, ...] = ()


def parse_list(text: str) -> list[ListedGpu]:
    """`nvidia-smi -L`: 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)', MIG devices indented below."""
    gpus: list[ListedGpu] = []
    for line in text.splitlines():
        gpu = re.match(r"GPU (\d+): (.+?) \(UUID: (\S+)\)", line)
        mig = re.search(r"MIG .*\(UUID: (MIG-\S+)\)", line)
        if gpu:
            gpus.append(ListedGpu(int(gpu.group(1)), gpu.group(2), gpu.group(3)))
        elif mig and gpus:
            last = gpus[-1]
            gpus[-1] = ListedGpu(last.index, last.name, last.uuid, (*last.mig_uuids, mig.group(1)))
    return gpus


def _value(text: str) -> str | None:
    text = text.strip()
    return None if text in UNKNOWN else text


def parse_query(text: str) -> list[dict[str, str | None]]:
    """`nvidia-smi --query-gpu=... --format=csv,nounits`: one dict per GPU, keyed by the query's names
    (the header's units, ' [MiB]', dropped)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    names = [re.sub(r"\s*\[.*\]$", "", name.strip()) for name in lines[0].split(",")]
    return [
        dict(zip(names, (_value(value) for value in line.split(",")), strict=False))
        for line in lines[1:]
        if len(line.split(",")) == len(names)
    ]


@dataclass(frozen=True)
class Topology:
    """`nvidia-smi topo -m`: how each pair of devices connects (NV#, PIX, PXB, PHB, NODE, SYS), each
    GPU's nearest CPUs and NUMA node, and the network adapters' names (NIC0: mlx5_0)."""

    links: dict[str, dict[str, str]] = field(default_factory=dict)
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, str] = field(default_factory=dict)
    nics: dict[str, str] = field(default_factory=dict)

    def gpu_cpus(self, index: int) -> str | None:
        """The CPU list nearest GPU `index` ('0-55,112-167'), None where nvidia-smi gives none."""
        return self.cpu_affinity.get(f"GPU{index}")

    def to_json(self) -> dict:
        return {
            "links": self.links,
            "cpu_affinity": self.cpu_affinity,
            "numa_affinity": self.numa_affinity,
            "nics": self.nics,
        }


def parse_topology(text: str) -> Topology:
    """The matrix of `nvidia-smi topo -m` (tab-separated; its header names the columns)."""
    lines = text.splitlines()
    header_at = next((n for n, line in enumerate(lines) if line.startswith("\t") and "GPU0" in line), None)
    if header_at is None:
        return Topology()
    # terminals may get the header underlined (ESC[4m ... ESC[0m)
    header = [re.sub(r"\x1b\[[0-9;]*m", "", name).strip() for name in lines[header_at].split("\t")[1:]]
    topology = Topology()
    for line in lines[header_at + 1 :]:
        cells = line.split("\t")
        if not re.fullmatch(r"(GPU|NIC|mlx\w*)\S*", cells[0].strip()):
            break
        row = cells[0].strip()
        values = dict(zip(header, (cell.strip() for cell in cells[1:]), strict=False))
        devices = [name for name in header if re.fullmatch(r"GPU\d+|NIC\d+|mlx\S+", name)]
        topology.links[row] = {name: values[name] for name in devices if values.get(name) and name != row}
        if values.get("CPU Affinity"):
            topology.cpu_affinity[row] = values["CPU Affinity"]
        if values.get("NUMA Affinity") and values["NUMA Affinity"] != "N/A":
            topology.numa_affinity[row] = values["NUMA Affinity"]
    for line in lines:
        nic = re.match(r"\s*(NIC\d+):\s*(\S+)\s*$", line)
        if nic:
            topology.nics[nic.group(1)] = nic.group(2)
    return topology


def parse_versions(text: str) -> tuple[str | None, str | None]:
    """(the driver's version, the newest CUDA it runs) from the header of `nvidia-smi -q`
    ('Driver Version : 580.159.04', 'CUDA Version : 13.0'); None for what it does not say."""
    found = {}
    for name in ("Driver Version", "CUDA Version"):
        line = re.search(rf"^{name}\s*:\s*(.*)$", text, re.MULTILINE)
        found[name] = _value(line.group(1)) if line else None
    return found["Driver Version"], found["CUDA Version"]


def parse_capabilities(text: str) -> list[gpu_stack.Gpu]:
    """`nvidia-smi --query-gpu=index,name,compute_cap --format=csv,noheader`: '0, NVIDIA H200, 9.0' per GPU."""
    gpus = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(CAPABILITY_QUERY) or not cells[0].isdigit():
            continue
        capability = re.fullmatch(r"(\d+)\.(\d+)", cells[2])
        found = (int(capability.group(1)), int(capability.group(2))) if capability else None  # [N/A]: None
        gpus.append(gpu_stack.Gpu(int(cells[0]), cells[1], found))
    return gpus


def read_node(ask: Callable[..., tuple[str | None, str]] = call) -> gpu_stack.Node:
    """This node's answers to the GPU stack check. A driver too old to report compute_cap still lists
    its GPUs (`-L`, capability unknown); `-q -d COMPUTE` prints the header with the versions and
    little else."""
    text, why = ask(f"--query-gpu={','.join(CAPABILITY_QUERY)}", "--format=csv,noheader")
    gpus = parse_capabilities(text) if text is not None else []
    if text is None:
        listing, listed_why = ask("-L")
        if listing is None:
            return gpu_stack.Node(reason=why if "not on this node's PATH" in why else listed_why)
        gpus = [gpu_stack.Gpu(gpu.index, gpu.name) for gpu in parse_list(listing)]
    if not gpus:
        return gpu_stack.Node(reason="nvidia-smi lists no GPU on this node")
    header, why = ask("-q", "-d", "COMPUTE")
    driver, cuda = parse_versions(header) if header is not None else (None, None)
    return gpu_stack.Node(driver, cuda, tuple(gpus), "" if header is not None else why)
