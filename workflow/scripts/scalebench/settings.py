"""What a cell's processes are told, and what each finds out for itself, as two typed objects.

The planner writes each cell's settings from the validated config into its settings.json
(scalebench.config.train_settings, config/planning.py), which the train rule passes to the launcher;
launch.py and each rank turn that JSON into a RunSettings once: the study's
settings, the same in every process. The field names are the config keys of
config/schema.yaml, which documents each one (unit tests keep their names and types equal).
What depends on where a process runs (its threads, whether it must have a GPU,
whether ranks may share one) is a ProcessFacts, which each process resolves from
its own environment: the launcher's is not its ranks'.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scalebench import backends
from scalebench.cell import Cell

AUTOCAST = {"bf16": "bfloat16", "fp16": "float16"}  # training.precision -> the type of the passes
PRECISION_OF = {dtype: precision for precision, dtype in AUTOCAST.items()}


@dataclass(frozen=True)
class LoaderSettings:
    """training.loader: where the samples live (both frameworks) and PyTorch's host loader."""

    placement: str  # auto, device or host (train/placement.py)
    device_memory_share: float  # auto: device placement where the samples fit in this share of free memory
    workers: int  # host placement: DataLoader worker processes per rank
    pin_memory: bool  # host placement: page-locked host buffers (used only on GPU)
    prefetch_factor: int  # host placement: batches each worker loads ahead


@dataclass(frozen=True)
class HorovodSettings:
    """training.horovod: options of the Horovod backends of both frameworks."""

    backward_passes_per_step: int  # local gradient accumulation steps per allreduce
    allow_cpu_reductions: bool  # a GPU cell may run with a Horovod built without NCCL


@dataclass(frozen=True)
class CollectiveSettings:
    """training.collectives: the benchmark of the backend's collectives before the first epoch."""

    budget_s: float  # seconds per cell, shared by its operations (0: nothing measured)
    max_bytes: int  # the largest message of the sweep
    iterations: int  # timed iterations per size
    warmup: int  # untimed iterations per size before them


@dataclass(frozen=True)
class ProfileSettings:
    """training.profile: the window of steps traced with the framework's profiler."""

    epoch: int  # 1-based
    steps: int  # traced from the epoch's first step


@dataclass(frozen=True)
class TrainingSettings:
    """training: the schedule and the run's options, the same for every backend."""

    epochs: int
    batch_per_gpu: int  # per rank (in strong scaling: global_batch / GPUs, set per cell by config.cell_training)
    scaling: str  # weak or strong
    global_batch: int | None  # images per step of a strong-scaling cell (unused in weak scaling)
    base_lr: float  # Adam's rate for one rank
    lr_scaling: str  # linear, sqrt or none: how the rate grows with the replicas
    warmup_epochs: int  # linear warm-up from base_lr to the scaled rate (0 = none)
    decay_every: int  # multiply the rate by decay_factor every this many epochs (0 = never)
    decay_factor: float
    dataset_repeat: int  # passes over the training set per epoch
    steps_per_epoch: int | None  # optimizer steps per replica and epoch, the shard cycled; None: one pass
    eval_every: int  # validation loss and IOU every this many epochs (0 = none during training)
    checkpoint_every: int  # a resumable checkpoint every this many epochs (0 = never)
    precision: str  # fp32, bf16 or fp16
    compression: str  # none or fp16: the gradients' type for the reduction between ranks
    compile: bool  # torch.compile / XLA jit_compile of the training step (the framework's compile.py)
    batch_norm: bool
    device: str  # auto, cpu or cuda
    threads_per_rank: int | None  # None: SLURM_CPUS_PER_TASK under SLURM, else 1
    max_loss: float  # an epoch's mean loss above this (or not finite) ends the run as diverged
    collective_timeout_s: float | None  # a rank waiting longer than this for the others fails the job
    deterministic: bool | None  # deterministic kernels; None: on the CPU yes, on GPUs no
    predictions: int  # test images whose predicted masks are saved for the report
    target_iou: float  # the report's time to target; the end of training with stop_at_target
    stop_at_target: bool  # stop once an epoch's validation IOU reaches target_iou
    tensorboard: bool  # rank 0 writes the epoch records as TensorBoard curves (summaries.py)
    step_split: bool  # where each step's time goes: compute, exposed communication (train/step_timing.py)
    profile: ProfileSettings | None  # a window of steps traced with the framework's profiler (None: off)
    loader: LoaderSettings
    horovod: HorovodSettings
    collectives: CollectiveSettings

    @property
    def autocast_dtype(self) -> str | None:
        """The type of the forward and backward pass (bfloat16 or float16), None for fp32."""
        return AUTOCAST.get(self.precision)


@dataclass(frozen=True)
class RunSettings:
    """The study's settings of one cell: what it asked, the same for launch.py and every rank."""

    cell: Cell
    training: TrainingSettings
    image_size: tuple[int, int]  # [height, width] of the prepared arrays
    peak_tflops: dict[str, dict[str, float]]  # cluster.peak_tflops: device name -> precision -> TFLOP/s
    data_dir: str  # the prepared arrays (images.npy, masks.npy, manifest.json)
    out_dir: str  # the cell's results folder
    gpus_per_node: int  # cluster.gpus_per_node: a SLURM cell of a cluster with GPUs must have one (ProcessFacts)
    gpu_binding: str = "node"  # cluster.gpu_binding: what a task sees, its node's GPUs or its own (train/devices.py)
    network_interface: str | None = None  # cluster.network_interface (cluster/network.py)
    cpu_binding: str = "cores"  # cluster.cpu_binding: each rank bound to its share of the cores, or none
    model_width: int = 1  # model.width: the UNet's channel multiplier (scalebench/architecture.py)
    # the JSON this rank was started with, recorded in run.json: the report tells a cell
    # trained with other settings than the study's from it, key by key
    source: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, settings: dict, data_dir: str, out_dir: str) -> RunSettings:
        """The typed settings of scalebench.config.train_settings' JSON."""
        return cls(
            cell=Cell.from_json(settings["cell"]),
            training=build(TrainingSettings, settings["training"], "training"),
            image_size=tuple(settings["dataset"]["image_size"]),
            peak_tflops=settings["peak_tflops"],
            data_dir=str(data_dir),
            out_dir=str(out_dir),
            gpus_per_node=settings["gpus_per_node"],
            gpu_binding=settings.get("gpu_binding", "node"),  # set only where not node (config.train_settings)
            network_interface=settings.get("network_interface"),  # set only where set
            cpu_binding=settings.get("cpu_binding", "cores"),  # set only where not cores
            model_width=settings.get("model", {}).get("width", 1),  # settings from before model.width: 1
            source=settings,
        )


@dataclass(frozen=True)
class ProcessFacts:
    """What one process of a cell resolved from its own environment, beside the study's settings."""

    threads: int  # compute threads of this process (training.threads_per_rank resolved: process_threads)
    gpu_required: bool  # device cuda, or auto in a SLURM cell of a cluster with GPUs: no GPU is an error
    share_gpu: bool = False  # SCALEBENCH_SHARE_GPU=1: ranks may share a GPU (functional checks on one GPU only)

    @classmethod
    def of_rank(cls, run: RunSettings, env: Mapping[str, str]) -> ProcessFacts:
        """A rank's, from the variables its launcher gave it: its SLURM task's CPUs, where the cell
        runs (launch.py's SCALEBENCH_EXECUTOR: a test run inside an allocation is local)."""
        cpus = env.get("SLURM_CPUS_PER_TASK")
        return cls.resolve(run, env, int(cpus) if cpus and cpus.isdigit() else None)

    @classmethod
    def resolve(cls, run: RunSettings, env: Mapping[str, str], cpus_per_task: int | None) -> ProcessFacts:
        """A process's facts where the caller knows its task's CPUs (launch.py: its allocation's
        under SLURM, None locally)."""
        on_gpu_cluster = run.gpus_per_node > 0 and env.get("SCALEBENCH_EXECUTOR") == "slurm"
        device = run.training.device
        return cls(
            threads=process_threads(run.training.threads_per_rank, run.cell, cpus_per_task),
            gpu_required=device == "cuda" or (device == "auto" and on_gpu_cluster),
            share_gpu=env.get("SCALEBENCH_SHARE_GPU") == "1",
        )


def process_threads(threads_per_rank: int | None, cell: Cell, cpus_per_task: int | None) -> int:
    """Compute threads of one process, for launch.py (OMP_NUM_THREADS, TF's thread pools) and the
    rank alike: threads_per_rank for each device it drives (a one-process backend drives all of the
    cell's, so it gets as many threads as that many ranks would), or with null the SLURM task's
    CPUs (one task then holds every device's CPUs), else one per device."""
    devices = 1
    if backends.exists(cell.framework, cell.backend):
        devices = backends.devices_per_process(cell.framework, cell.backend, cell.gpus)
    if threads_per_rank:
        return threads_per_rank * devices
    return cpus_per_task or devices


def optional_dataclass(hint: Any) -> Any:
    """The dataclass of an optional section (`ProfileSettings | None`), else the hint itself."""
    if isinstance(hint, types.UnionType):
        classes = [arg for arg in typing.get_args(hint) if dataclasses.is_dataclass(arg)]
        if len(classes) == 1:
            return classes[0]
    return hint


def build(kind: type, data: dict[str, Any], where: str) -> Any:
    """A `kind` dataclass from a dict with exactly its fields (nested dataclasses too)."""
    fields = {f.name: f for f in dataclasses.fields(kind)}
    unknown, missing = sorted(set(data) - set(fields)), sorted(set(fields) - set(data))
    if unknown or missing:
        raise ValueError(f"settings '{where}': unknown keys {unknown}, missing keys {missing}")
    hints = typing.get_type_hints(kind)
    values = {}
    for name, value in data.items():
        hint = optional_dataclass(hints[name]) if isinstance(value, dict) else hints[name]
        if dataclasses.is_dataclass(hint):
            value = build(hint, value, f"{where}.{name}")
        elif hint in (float, float | None) and isinstance(value, int):
            value = float(value)
        elif not isinstance(hint, types.UnionType) and hint in (int, bool, str) and not isinstance(value, hint):
            raise ValueError(f"settings '{where}.{name}': {value!r} is not {hint.__name__}")
        values[name] = value
    return kind(**values)
