"""The TensorFlow process: threads, devices, determinism, mixed precision, clocks and memory.

Threads, visible devices and memory growth must be set before TensorFlow runs
its first operation, so build_device() calls configure() before the backend
builds a strategy or a model; build_numerics() follows once the strategy exists (its seeds and
checks run TensorFlow operations). The environment TensorFlow reads at import is set by this
package's __init__.py.
"""

from __future__ import annotations

import importlib.metadata
import random

import numpy as np
import tensorflow as tf

from scalebench import backends, gpu_stack
from scalebench.refusal import SettingRefused
from scalebench.settings import PRECISION_OF, ProcessFacts, RunSettings
from scalebench.train import devices, placement, site
from scalebench.train.faults import FaultPlan
from scalebench.train.provenance import cpu_name, peak_host_memory_mb
from scalebench.train.rank_env import RankInfo
from scalebench.train.tf import compiled

# NVIDIA's NCCL for CUDA 12 as a Python package: what XLA's collectives load (tensorflow[and-cuda])
NCCL_PACKAGE = "nvidia-nccl-cu12"


def visible_gpus() -> int:
    """The GPUs TensorFlow sees (none where it finds no CUDA libraries or driver)."""
    return len(tf.config.list_physical_devices("GPU"))


def build_answers(visible: int | None = None, horovod: gpu_stack.Horovod | None = None) -> gpu_stack.Build:
    """This build's answers to the GPU stack check (scalebench/gpu_stack.py), read from TensorFlow
    itself: its build information (CUDA, the compute capabilities it carries kernels for), the NCCL
    package beside it, the CUDA packages TensorFlow loads at run time (else the site's modules)."""
    build = tf.sysconfig.get_build_info()
    try:
        nccl = importlib.metadata.version(NCCL_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        nccl = None
    return gpu_stack.Build(
        framework="tensorflow",
        version=tf.__version__,
        cuda=build.get("cuda_version") if build.get("is_cuda_build") else None,
        architectures=tuple(build.get("cuda_compute_capabilities") or ()),
        nccl=nccl,
        nccl_files=tuple(site.nccl_files()),
        gpus_seen=visible,
        cuda_libraries=tuple(site.cuda_packages()),
        horovod=horovod,
    )


def configure(
    run: RunSettings, process: ProcessFacts, local_rank: int, ranks_on_node: int, replicas: int = 1
) -> list[int]:
    """Threads and devices for this process, before its first operation; returns the indices of the
    GPUs it drives among those it sees (devices.process_gpus), none on the CPU.

    A process with one replica (MultiWorkerMirrored, Horovod) sees its local rank's
    GPU (under task binding the only one its task sees); one holding several (MirroredStrategy) its first `replicas` GPUs. On the CPU,
    several replicas split it into logical devices. devices.use_gpus decides, or refuses.
    """
    tf.config.threading.set_intra_op_parallelism_threads(process.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    gpus = tf.config.list_physical_devices("GPU")
    build = tf.sysconfig.get_build_info()
    library = f"TensorFlow {tf.__version__} (CUDA build: {build.get('cuda_version') if build.get('is_cuda_build') else 'none'})"
    share, binding = process.share_gpu, run.gpu_binding
    if not devices.use_gpus(
        process.gpu_required, run.training.device, len(gpus), ranks_on_node, replicas, library, share, binding
    ):
        if gpus:
            tf.config.set_visible_devices([], "GPU")
        if replicas > 1:
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)]
            )
        return []
    indices = devices.process_gpus(local_rank, replicas, len(gpus))
    chosen = [gpus[index] for index in indices]
    tf.config.set_visible_devices(chosen, "GPU")
    for gpu in chosen:  # grow as needed: peak memory is then what training used, not a preallocation
        tf.config.experimental.set_memory_growth(gpu, True)
    return indices


def input_device(device_type: str, local_replicas: int) -> str | None:
    """Where a process's batches are prefetched to: its GPU when it drives one replica.

    configure() left exactly that GPU visible, so it is /gpu:0. A process driving several
    replicas (MirroredStrategy) gets host batches, which the strategy copies to each replica.
    """
    return "/gpu:0" if device_type == "cuda" and local_replicas == 1 else None


def tf32_enabled(device_type: str) -> bool | None:
    """Whether fp32 convolutions and matmuls run in TF32 (TensorFlow's default on GPUs that have it); None on the CPU."""
    if device_type != "cuda":
        return None
    capability = tf.config.experimental.get_device_details(tf.config.get_visible_devices("GPU")[0])
    major = (capability.get("compute_capability") or (0, 0))[0]
    allowed = tf.config.experimental.is_tensor_float_32_execution_enabled() and devices.tf32_allowed_by_environment()
    return bool(allowed) and major >= 8


def set_determinism(seed: int, deterministic: bool) -> None:
    """Seed Python, NumPy and TensorFlow; deterministic kernels where asked."""
    random.seed(seed)
    np.random.seed(seed)
    tf.keras.utils.set_random_seed(seed)
    if deterministic:
        tf.config.experimental.enable_op_determinism()
    # The global generator is part of the checkpointed RNG state; with determinism on it must be set explicitly.
    tf.random.set_global_generator(tf.random.Generator.from_seed(seed))


def synchronize() -> None:
    """Wait for queued device work, so a clock read after it is honest."""
    sync = getattr(tf.test.experimental, "sync_devices", None)
    if sync is not None and tf.config.list_logical_devices("GPU"):
        sync()


def gpu_names() -> list[str]:
    return [device.name for device in tf.config.list_logical_devices("GPU")]


def reset_peak_memory(device_type: str) -> None:
    if device_type == "cuda":
        for name in gpu_names():
            tf.config.experimental.reset_memory_stats(name.replace("/device:", ""))


def peak_memory_mb(device_type: str) -> float:
    """Peak GPU memory TensorFlow allocated (largest over local GPUs), or this process's peak RSS on CPU."""
    if device_type == "cuda":
        peaks = [tf.config.experimental.get_memory_info(n.replace("/device:", ""))["peak"] for n in gpu_names()]
        return max(peaks, default=0) / 2**20
    return peak_host_memory_mb()


def device_model(device_type: str) -> str:
    if device_type == "cuda":
        gpus = tf.config.list_physical_devices("GPU")
        visible = tf.config.get_visible_devices("GPU")
        names = [tf.config.experimental.get_device_details(g).get("device_name", g.name) for g in visible or gpus]
        return ", ".join(names)
    return cpu_name()


def keras_policy(autocast_dtype: str | None, device_type: str) -> str | None:
    """The Keras mixed-precision policy of bf16 and fp16 runs (None for fp32); float16 needs a GPU."""
    if autocast_dtype is None:
        return None
    problem = backends.precision_problem(PRECISION_OF[autocast_dtype], device_type)
    if problem:
        raise SettingRefused(f"training.precision: {problem}")
    return {"bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}[autocast_dtype]


def versions() -> dict:
    import tf_keras

    build = tf.sysconfig.get_build_info()
    return {
        "tensorflow": tf.__version__,
        "keras": f"tf_keras {tf_keras.__version__}",
        "cuda": build.get("cuda_version") if build.get("is_cuda_build") else None,
        "cudnn": build.get("cudnn_version") if build.get("is_cuda_build") else None,
        "onednn": "on" if onednn_enabled() else "off",
    }


def onednn_enabled() -> bool:
    """Whether TensorFlow's oneDNN CPU kernels are on (see this package's __init__.py)."""
    from tensorflow.python.util import _pywrap_util_port  # no public API tells

    return bool(_pywrap_util_port.IsMklEnabled())


def encode_text(text: str, width: int = 256) -> np.ndarray:
    """Text as a fixed-width int32 row, so strings can travel through numeric collectives."""
    data = text.encode()[:width]
    row = np.zeros(width, dtype=np.int32)
    row[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    return row


def decode_text(row: np.ndarray) -> str:
    return bytes(int(b) for b in row if b).decode(errors="replace")


class Device:
    """This process's devices as TensorFlow sees them after configure(): the GPUs it drives (the
    indices among those it saw), and where its batches are prefetched to."""

    layout = "channels_last"
    out_of_memory = (tf.errors.ResourceExhaustedError,)

    def __init__(
        self, gpu_indices: list[int], input_device: str | None, threads: int, stack: dict | None = None
    ) -> None:
        self.gpu_indices = gpu_indices
        self.type = "cuda" if gpu_indices else "cpu"
        self.input_device = input_device
        self.threads = threads  # its intra-op pool's, and each tf.data pipeline's
        # run.json's gpu_stack: what the GPU stack check found (devices.check_stack)
        self.stack = stack if stack is not None else gpu_stack.record(gpu_stack.Node(), None, "not checked")

    def synchronize(self) -> None:
        synchronize()

    def reset_peak_memory(self) -> None:
        reset_peak_memory(self.type)

    def peak_memory_mb(self) -> float:
        return peak_memory_mb(self.type)

    def model(self) -> str:
        return device_model(self.type)

    def free_bytes(self, local_processes: int) -> int | None:
        if self.type == "cuda":
            return placement.nvml_free_bytes(self.gpu_indices)
        return placement.host_free_bytes(local_processes)

    def describe(self) -> dict:
        return {
            "device": self.type,
            "layout": self.layout,
            "tf32": tf32_enabled(self.type),
            "versions": versions(),
            "gpu_stack": self.stack,
        }

    def out_of_memory_error(self, message: str) -> BaseException:
        return tf.errors.ResourceExhaustedError(None, None, f"OOM: {message}")


def build_device(run: RunSettings, process: ProcessFacts, place: RankInfo) -> Device:
    """Threads and visible devices, before TensorFlow's first operation and the backend's strategy: the
    GPU stack check first (it refuses a build the node cannot run), then configure (it refuses a cell
    without the GPUs it needs). Listing the physical devices starts no runtime: threads can still be set."""
    replicas = backends.devices_per_process(run.cell.framework, run.cell.backend, run.cell.gpus)
    visible = visible_gpus()
    stack = devices.check_stack(run.training.device, process.gpu_required, visible, lambda: build_answers(visible))
    gpu_indices = configure(run, process, place.local_rank, place.local_processes, replicas)
    return Device(gpu_indices, input_device("cuda" if gpu_indices else "cpu", replicas), process.threads, stack)


class Numerics:
    """How the steps compute: the Keras mixed-precision policy (None: float32) and whether kernels
    are deterministic."""

    def __init__(self, policy: str | None, deterministic: bool) -> None:
        self.policy, self.deterministic = policy, deterministic


def build_numerics(run: RunSettings, device: Device, faults: FaultPlan) -> Numerics:
    """training.precision and training.deterministic as this device runs them (refused where it
    cannot), XLA's availability where training.compile asks, and every generator seeded; `faults`:
    the rank's test faults (precision_off)."""
    policy = keras_policy(run.training.autocast_dtype, device.type)
    if faults.precision_off():  # a test hook: the steps compute in float32, which the loop must refuse
        policy = None
    deterministic = devices.deterministic(run.training.deterministic, device.type == "cuda")
    if run.training.compile:
        compiled.check_available()
        compiled.check_determinism(deterministic)
    set_determinism(run.cell.seed, deterministic)
    return Numerics(policy, deterministic)
