"""The PyTorch process: threads, device, determinism, mixed precision, clocks and memory.

Two products (train/interfaces.py): the Device, built before the backend joins (NCCL and every
allocation use the current device), and the Numerics, built once it has (the autocast type, the
determinism, the seeds).
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from scalebench import backends, gpu_stack
from scalebench.refusal import SettingRefused
from scalebench.settings import PRECISION_OF, ProcessFacts, RunSettings
from scalebench.train import devices, placement, site
from scalebench.train.faults import FaultPlan
from scalebench.train.provenance import cpu_name, peak_host_memory_mb
from scalebench.train.rank_env import RankInfo
from scalebench.train.torch import compiled

# Channels-last (NHWC) activations and weights: 1.7x faster training steps on the CPU than NCHW
# (oneDNN), the layout tensor cores prefer, and the layout the TensorFlow UNet uses.
LAYOUT = torch.channels_last
LAYOUT_NAME = "channels_last"


def set_determinism(seed: int, deterministic: bool) -> None:
    """Seed every generator a cell uses; deterministic kernels where asked (else cuDNN autotunes)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.benchmark = not deterministic
    if not deterministic:
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    # Deterministic mode also fills every new tensor with NaN, a check for kernels that read
    # memory they never wrote; it costs 7% of a CPU training step and changes no result.
    torch.utils.deterministic.fill_uninitialized_memory = False


def visible_gpus() -> int:
    """The GPUs this process sees (none where CUDA cannot start: a CPU build, a driver too old)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def nccl_version() -> str | None:
    """The NCCL torch was built with ('2.27.7'); None in a CPU build."""
    try:
        version = torch.cuda.nccl.version()
    except Exception:  # a CPU build has no torch._C._nccl_version
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def build_answers(visible: int | None = None, horovod: gpu_stack.Horovod | None = None) -> gpu_stack.Build:
    """This build's answers to the GPU stack check (scalebench/gpu_stack.py), read from torch itself.
    Its architectures are the flags it was compiled with: torch.cuda.get_arch_list() is empty where
    CUDA cannot start (a driver too old), which is when they matter."""
    flags = getattr(torch._C, "_cuda_getArchFlags", lambda: None)()  # absent from CPU builds
    return gpu_stack.Build(
        framework="torch",
        version=torch.__version__,
        cuda=torch.version.cuda,
        architectures=tuple((flags or "").split()),
        nccl=nccl_version(),
        nccl_files=tuple(site.nccl_files()),
        gpus_seen=visible,
        horovod=horovod,
    )


def choose_device(
    run: RunSettings, process: ProcessFacts, local_rank: int, ranks_on_node: int, per_process: int = 1
) -> torch.device:
    """This rank's device: its local rank's GPU (the one it sees, under task binding), or the CPU
    (devices.use_gpus decides, or refuses).
    per_process: the GPUs this process drives (DataParallel: all of the cell's, from the first)."""
    visible = visible_gpus()
    library = f"torch {torch.__version__} (CUDA build: {torch.version.cuda or 'none'})"
    use = devices.use_gpus(
        process.gpu_required,
        run.training.device,
        visible,
        ranks_on_node,
        per_process,
        library,
        process.share_gpu,
        run.gpu_binding,
    )
    if not use:
        return torch.device("cpu")
    device = torch.device("cuda", devices.process_gpus(local_rank, per_process, visible)[0])
    torch.cuda.set_device(device)  # NCCL and every allocation use the current device
    return device


def autocast_dtype(name: str | None, device: torch.device) -> torch.dtype | None:
    """The autocast type of bf16 and fp16 runs (None for fp32); float16 needs a GPU."""
    if name is None:
        return None
    problem = backends.precision_problem(PRECISION_OF[name], device.type)
    if problem:
        raise SettingRefused(f"training.precision: {problem}")
    return {"bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def tf32_enabled(device: torch.device) -> bool | None:
    """Whether fp32 convolutions run in TF32 (cuDNN's default; the UNet is convolutions); None on the CPU."""
    if device.type != "cuda":
        return None
    allowed = torch.backends.cudnn.allow_tf32 and devices.tf32_allowed_by_environment()
    return bool(allowed) and torch.cuda.get_device_capability(device)[0] >= 8


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return peak_host_memory_mb()


def device_model(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_name()


def versions() -> dict:
    found = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": None, "nccl": None}
    if torch.backends.cudnn.is_available():
        found["cudnn"] = torch.backends.cudnn.version()
    if torch.cuda.is_available():
        found["nccl"] = nccl_version()
    return found


class Device:
    """This process's device and the GPUs it drives (DataParallel: several, the first is `device`)."""

    layout = LAYOUT_NAME
    out_of_memory = (torch.OutOfMemoryError,)

    def __init__(self, device: torch.device, gpu_indices: list[int], stack: dict | None = None) -> None:
        self.device = device
        self.type = device.type  # cuda or cpu
        self.gpu_indices = gpu_indices
        # run.json's gpu_stack: what the GPU stack check found (devices.check_stack)
        self.stack = stack if stack is not None else gpu_stack.record(gpu_stack.Node(), None, "not checked")
        # each replica's device: DataParallel drives GPUs 0..n-1 (the first is `device`)
        self.replica_devices = [torch.device("cuda", index) for index in gpu_indices] or [device]

    def synchronize(self) -> None:
        synchronize(self.device)

    def reset_peak_memory(self) -> None:
        reset_peak_memory(self.device)

    def peak_memory_mb(self) -> float:
        return peak_memory_mb(self.device)

    def model(self) -> str:
        return device_model(self.device)

    def free_bytes(self, local_processes: int) -> int | None:
        if self.type == "cuda":
            return min(torch.cuda.mem_get_info(device)[0] for device in self.replica_devices)
        return placement.host_free_bytes(local_processes)

    def describe(self) -> dict:
        return {
            "device": self.type,
            "layout": self.layout,
            "tf32": tf32_enabled(self.device),
            "versions": versions(),
            "gpu_stack": self.stack,
        }

    def out_of_memory_error(self, message: str) -> BaseException:
        return torch.OutOfMemoryError(f"CUDA {message}")


def build_device(run: RunSettings, process: ProcessFacts, place: RankInfo) -> Device:
    """The rank's threads and device, before the backend joins: the GPU stack check first (it refuses
    a build the node cannot run), then choose_device (it refuses a cell without the GPU it needs)."""
    torch.set_num_threads(process.threads)
    per_process = backends.devices_per_process(run.cell.framework, run.cell.backend, run.cell.gpus)  # dp: all
    visible = visible_gpus()
    stack = devices.check_stack(run.training.device, process.gpu_required, visible, lambda: build_answers(visible))
    device = choose_device(run, process, place.local_rank, place.local_processes, per_process)
    gpus = (
        devices.process_gpus(place.local_rank, per_process, torch.cuda.device_count()) if device.type == "cuda" else []
    )
    return Device(device, gpus, stack)


class Numerics:
    """How the steps compute: the autocast type (None: float32) and whether kernels are deterministic."""

    def __init__(self, autocast: torch.dtype | None, deterministic: bool) -> None:
        self.autocast, self.deterministic = autocast, deterministic


def build_numerics(run: RunSettings, device: Device, faults: FaultPlan) -> Numerics:
    """training.precision and training.deterministic as this device runs them (refused where it
    cannot), torch.compile's availability where asked, and every generator seeded; `faults`: the
    rank's test faults (precision_off)."""
    autocast = autocast_dtype(run.training.autocast_dtype, device.device)
    if faults.precision_off():  # a test hook: the steps compute in float32, which the loop must refuse
        autocast = None
    if run.training.compile:
        compiled.check_available(device.device)
    deterministic = devices.deterministic(run.training.deterministic, device.type == "cuda")
    set_determinism(run.cell.seed, deterministic)
    return Numerics(autocast, deterministic)
