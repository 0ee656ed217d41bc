"""What the training loop holds, and how a framework builds it.

loop.py is the one training loop; it never touches PyTorch or TensorFlow. A framework
(train/torch/spec.py, train/tf/spec.py) is a FrameworkSpec: a bundle of builders, each returning
one small object that is whole when it is returned (torchtitan's TrainSpec). The loop calls
them in its constructor, in the order a rank needs them, and holds every product from then on:
the device, the numerics, the model and optimizer, the sample order, the distributed model, the
data of an epoch, the steps, the checkpointer, a tracer and a summary writer. A new concern is a
new builder, not a method added to every framework.

The backend (one module per backend: train/<framework>/native.py, horovod.py, ...) is built by
its module's `create`, which joins the ranks and returns a Backend with everything it needs;
the method names are the same in both frameworks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from scalebench import backends
from scalebench.settings import ProcessFacts, RunSettings
from scalebench.train.accumulation import Part
from scalebench.train.collectives import Bench
from scalebench.train.faults import EpochDelays, FaultPlan
from scalebench.train.placement import DataPlacement
from scalebench.train.rank_env import RankInfo
from scalebench.train.step_timing import StepTimes
from scalebench.train.summaries import EpochWriter


class Backend:
    """How gradients are reduced and ranks are started; one subclass per backend module, built by
    the module's create(run, place, device_type, share_gpu) once the ranks have joined.

    rank counts processes, of which there are `processes` (`local_processes` on this node).
    replicas counts the model copies that train in sync: one per process, except where one
    process drives several devices (dp, TF MirroredStrategy); replica_ids are the global ids of
    this process's replicas.

    What the backend is (how many processes it needs, whether it shards the model's state, the
    smallest number of ranks and the most CPU devices it can run) is its registry entry's (`spec`), stated
    nowhere in the class: the contract test refuses a class attribute named after a BackendSpec field.
    """

    framework: str  # its key in the registry (scalebench/backends.py), with name: the facts read there
    name: str
    checkpoint_on_all_ranks = False  # saving a checkpoint is a collective every rank joins
    # the type gradients are reduced in between ranks (training.compression: none or fp16), as
    # this backend applies it: run.json records it, and the loop checks it is the one asked for
    gradient_compression = "none"
    # batches whose gradients a rank adds up locally before one reduction and optimizer step
    # (accumulation.py): 1 unless the registry says the backend accumulates (backends.backward_passes)
    backward_passes_per_step = 1
    # the step split (step_timing.py): why this backend's total communication time is not read
    # ('' where it times its collectives into the marks distribute() gets: DDP and FSDP on CPU ranks)
    untimed_comm = "this backend does not time its collectives"
    # training.profile: why only rank 0 may trace with the framework's profiler ('' where every rank may)
    untraced_ranks = ""
    # whether the rank must end through the interpreter's teardown (entry.main): where the
    # backend's processes shut down together there, a process that ends at once cuts the
    # others' last collective short
    ends_in_teardown = False

    def __init__(self, place: RankInfo, device_type: str = "cpu", share_gpu: bool = False) -> None:
        self.place = place
        self.rank, self.local_rank = place.rank, place.local_rank
        self.processes, self.local_processes = place.processes, place.local_processes
        self.replicas, self.replica_ids = place.processes, [place.rank]
        self.device_type = device_type  # "cuda" or "cpu" (training.device's words), as the device was chosen
        self.share_gpu = share_gpu  # ranks share a GPU (ProcessFacts.share_gpu)

    @property
    def spec(self) -> backends.BackendSpec:
        """This backend's registry entry (scalebench/backends.py): the facts the planner reads too.
        shards_state: each process holds only a slice of the parameters (FSDP), so the whole
        model's state comes from gather_state and evaluating needs a whole copy."""
        return backends.spec(self.framework, self.name)

    def local_devices(self) -> list[str] | None:
        """TensorFlow: the devices of this process's replicas where one process drives several
        (MirroredStrategy); None where the framework's own device is the one."""
        return None

    def scope(self) -> AbstractContextManager:
        """Where the model and optimizer are created (a tf.distribute strategy's scope)."""
        return nullcontext()

    def distribute(self, model: Any, optimizer: Any, marks: Any = None) -> tuple[Any, Any]:
        """Wrap model and optimizer so gradients are averaged over replicas, and start every
        replica from rank 0's state; returns the (possibly wrapped) pair. `marks`: the step
        split's (training.step_split), into which a backend that times its collectives notes them."""
        raise NotImplementedError

    def gather_state(self, state: dict) -> dict:
        """A model's or optimizer's state dict with every sharded tensor whole, on every process: a
        collective every rank joins where parameters are sharded; else `state` as it is."""
        return state

    def reduce_gradients(self, gradients: list) -> list:
        """Average gradients a framework computed itself (a TF tape) over the replicas.
        PyTorch backends reduce inside backward() and return them unchanged."""
        return gradients

    @contextmanager
    def gradients_reduced(self, optimizer: Any) -> Iterator[None]:
        """Inside, the gradients that backward() left are the replicas' average, so the optimizer
        (and a loss scaler unscaling them) may step. DDP: so once backward() returns."""
        yield

    def run_replicas(self, step: Callable, per_replica_args: list[tuple]) -> list:
        """Run `step` once per local replica with its arguments; the results in replica order."""
        return [step(*args) for args in per_replica_args]

    def broadcast_from_root(self, tensors: list) -> None:
        """Overwrite `tensors` (batch-norm statistics) in place with rank 0's values."""
        raise NotImplementedError

    def allreduce_sum(self, values: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def allreduce_max(self, values: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def allgather_text(self, text: str) -> list[str]:
        """Every process's `text`, in rank order."""
        raise NotImplementedError

    def versions(self) -> dict[str, str]:
        """The library and collective this backend uses, for run.json."""
        raise NotImplementedError

    def collective_bench(self, model: Any) -> Bench | str:
        """This backend's collectives for the benchmark before the first epoch (train/collectives.py),
        through the library it reduces gradients with, for `model` as distribute() returned it
        (its bucket or largest unit is the size the gradients go in); or why it has none. Called
        on every process of a cell of more than one replica."""
        return f"backend {self.name} has no collective benchmark"

    def options(self) -> dict[str, Any]:
        """This backend's training settings as it resolved them, for run.json's training record."""
        return {}

    def start_timeline(self, folder: Path) -> None:
        """training.profile: the backend's own trace of the window into `folder` (Horovod's timeline)."""

    def stop_timeline(self) -> None:
        """End the trace start_timeline began; raises if it could not be written."""

    def shutdown(self) -> None:
        pass


# What the builders return: each framework's runtime.py, model.py, data.py, steps.py,
# checkpoint.py and profiler.py define them, by these names, with these members (the contract
# test checks it).


class Device(Protocol):
    """This process's device (runtime.py), chosen before the backend joins: its clock and memory."""

    type: str  # cuda or cpu
    gpu_indices: list[int]  # the GPUs it drives, among those it sees (devices.process_gpus)
    out_of_memory: tuple[type[BaseException], ...]  # the framework's errors that mean the device ran out

    def synchronize(self) -> None:
        """Wait for queued device work, so a clock read after it is honest."""

    def reset_peak_memory(self) -> None: ...

    def peak_memory_mb(self) -> float: ...

    def model(self) -> str:
        """The model of this process's (first) device as its framework names it (run.json's devices),
        e.g. NVIDIA H100 80GB HBM3, or cpu (x86_64)."""

    def free_bytes(self, local_processes: int) -> int | None:
        """Free memory of this process's device with the least (a CPU rank: its share of the
        node's, shared by `local_processes`), or None where the framework cannot tell."""

    def describe(self) -> dict[str, Any]:
        """run.json's device, layout, tf32 and versions of the framework."""

    def out_of_memory_error(self, message: str) -> BaseException:
        """The framework's own out-of-memory error (for the fault-injection hook)."""


class Numerics(Protocol):
    """How this rank computes (runtime.py: the autocast type or Keras policy), built once the
    backend has joined; building it seeds every generator."""

    deterministic: bool  # deterministic kernels, as resolved


class Model(Protocol):
    """The model and optimizer as built, before the backend distributes them (model.py): a
    checkpoint restores into them."""

    def fields(self) -> dict[str, int]:
        """run.json's parameters and gradient_bytes."""


class Distributed(Protocol):
    """The model and optimizer as the backend distributed them (model.py distribute): what the
    steps train and the checkpointer saves."""

    wrapped: Any  # the model as the backend's distribute() returned it (the collective benchmark's)


class SampleOrder(Protocol):
    """Which samples each replica of this process takes in each epoch (data.py: DistributedSampler's
    order, cycled for training.steps_per_epoch)."""

    def replica_samples(self, epochs: int) -> list[np.ndarray]:
        """The sample indices each replica takes in any of `epochs` epochs, sorted."""


class Batches(Protocol):
    """The input pipeline in the placement decided (data.py): the batches arrive on the device as
    the model's inputs either way."""

    def epoch(self, epoch: int) -> Iterable:
        """This process's batches of `epoch` in the sampler's order."""

    def eval_batches(self, indices: list[int]) -> Iterable:
        """The samples `indices` in order, each once, as batches."""


class Steps(Protocol):
    """The training step, evaluation and predictions on the distributed model (steps.py)."""

    def start_epoch(self, epoch: int, learning_rate: float) -> None:
        """Set the rate, the test faults' delays and the marks of `epoch`, and zero the epoch's loss."""

    def train(self, batch: Any, part: Part) -> None:
        """Forward and backward on `batch`, adding its loss to the epoch's sum; where `part` says
        the batch ends its optimizer step, the reduction and the step (accumulation.py)."""

    def epoch_loss(self) -> tuple[float, int]:
        """(sum of batch losses, replica batches) of this rank's epoch, waiting for the device."""

    def observed(self) -> dict[str, Any]:
        """What the training steps so far did, read from the framework, never from the settings
        (train/observed.py): compute_dtype, the dtype of the model's output inside the step
        (None before the first), and compiled, observed.compiled_record of the framework's compiler."""

    def optimizer_lr(self) -> float:
        """The learning rate the optimizer holds now, read back from it."""

    def step_times(self) -> StepTimes | None:
        """The step split's marks of this epoch's steps (train/<framework>/step_timing.py), read
        after the epoch's synchronisation; None with training.step_split off."""

    def sync_buffers(self) -> None:
        """Give every replica rank 0's batch-norm statistics (before evaluating or saving)."""

    def evaluate(self, batches: Iterable) -> np.ndarray:
        """[loss sum, pixels, intersection, union] of the model on these batches."""

    def save_predictions(self, indices: list[int], folder: Path) -> None: ...


class Checkpointer(Protocol):
    """The cell's checkpoint of the distributed model (checkpoint.py; its restore() loads one into
    the Model before distribution)."""

    def save(self, state: dict, epoch: int) -> None:
        """Write a checkpoint with the loop's `state` (rank 0 writes; others take part where needed)."""

    def remove(self) -> None: ...


class Trace(Protocol):
    """training.profile: the framework's profiler, started when built (profiler.py)."""

    def stop(self) -> None:
        """Stop it and write the trace; raises if the trace could not be written."""


# The builders: each framework's spec.py fills FrameworkSpec's fields with functions or classes
# whose parameters are these protocols' __call__'s, name for name and kind for kind (the contract
# test checks it), so the loop can pass them positionally in either framework.


class BuildDevice(Protocol):
    """Threads and the device, before the backend joins (runtime.py)."""

    def __call__(self, run: RunSettings, process: ProcessFacts, place: RankInfo) -> Device: ...


class BuildNumerics(Protocol):
    """Precision, determinism and the seeds, once the backend has joined (runtime.py); `faults`:
    the rank's test faults (precision_off)."""

    def __call__(self, run: RunSettings, device: Device, faults: FaultPlan) -> Numerics: ...


class BuildModel(Protocol):
    """The model and optimizer, in the backend's scope (model.py)."""

    def __call__(self, run: RunSettings, device: Device, numerics: Numerics, backend: Backend) -> Model: ...


class BuildOrder(Protocol):
    """Each replica's samples per epoch, `batches` batches of them (data.py)."""

    def __call__(self, run: RunSettings, backend: Backend, train_indices: list[int], batches: int) -> SampleOrder: ...


class Restore(Protocol):
    """The loop's state of the checkpoint in `directory` loaded into `model`, or None (checkpoint.py)."""

    def __call__(self, model: Model, directory: Path, config_hash: str) -> dict | None: ...


class BuildMarks(Protocol):
    """The step split's marks of this framework (step_timing.py; training.step_split)."""

    def __call__(self, device: Device, backend: Backend) -> Any: ...


class Distribute(Protocol):
    """The backend's wrapper, compiled where asked (model.py); `delays`: the test faults' delays of
    the epoch under way, which the steps move on."""

    def __call__(
        self, run: RunSettings, model: Model, backend: Backend, marks: Any, delays: EpochDelays
    ) -> Distributed: ...


class BuildData(Protocol):
    """The input pipeline in the placement decided (data.py)."""

    def __call__(
        self,
        run: RunSettings,
        device: Device,
        backend: Backend,
        order: SampleOrder,
        where: DataPlacement,
        eval_shards: list[list[int]],
    ) -> Batches: ...


class BuildSteps(Protocol):
    """The steps on the distributed model (steps.py: the class itself)."""

    def __call__(
        self,
        run: RunSettings,
        distributed: Distributed,
        device: Device,
        numerics: Numerics,
        backend: Backend,
        marks: Any,
        delays: EpochDelays,
    ) -> Steps: ...


class BuildCheckpointer(Protocol):
    """The cell's checkpoint in `out` (checkpoint.py: the class itself)."""

    def __call__(self, out: Path, config_hash: str, distributed: Distributed, backend: Backend) -> Checkpointer: ...


class StartTrace(Protocol):
    """training.profile's trace into `folder`, started (profiler.py); raises profiling.NotTraced
    where this rank does not trace."""

    def __call__(self, folder: Path, device: Device, backend: Backend) -> Trace: ...


class OpenSummaries(Protocol):
    """The framework's TensorBoard writer into `folder` (training.tensorboard)."""

    def __call__(self, folder: Path) -> EpochWriter: ...


@dataclass(frozen=True)
class FrameworkSpec:
    """A framework as the builders of what the loop holds (each framework's spec.py). The loop's
    constructor calls them in this order; the device is built before the backend joins (entry.py)."""

    name: str  # torch or tensorflow
    build_device: BuildDevice
    build_numerics: BuildNumerics
    build_model: BuildModel
    build_order: BuildOrder
    restore: Restore
    build_marks: BuildMarks
    distribute: Distribute
    build_data: BuildData
    build_steps: BuildSteps
    build_checkpointer: BuildCheckpointer
    start_trace: StartTrace
    open_summaries: OpenSummaries
