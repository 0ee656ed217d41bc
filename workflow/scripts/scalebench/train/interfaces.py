"""The two interfaces the training loop drives: a framework and a distributed backend.

loop.py is the one training loop. It never touches PyTorch or TensorFlow; it
asks a Framework (train/torch/framework.py, train/tf/framework.py) to build
the model and take steps, and the framework's Backend (one module per backend:
train/<framework>/native.py, horovod.py, ...) to start the ranks and reduce. The
method names are the same in both frameworks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from scalebench import backends
from scalebench.settings import ProcessFacts, RunSettings
from scalebench.train.accumulation import Part
from scalebench.train.collectives import Bench
from scalebench.train.placement import DataPlacement
from scalebench.train.rank_env import RankInfo
from scalebench.train.step_timing import StepTimes
from scalebench.train.summaries import EpochWriter


class Backend:
    """How gradients are reduced and ranks are started; one subclass per backend module.

    rank counts processes, of which there are `processes` (`local_processes` on this node).
    replicas counts the model copies that train in sync: one per process, except where one
    process drives several devices (dp, TF MirroredStrategy); replica_ids are the global ids of
    this process's replicas.

    What the backend is (how many processes it needs, whether it shards the model's state, the
    smallest world and the most CPU devices it can run) is its registry entry's (`spec`), stated
    nowhere in the class: the contract test refuses a class attribute named after a BackendSpec field.
    """

    framework: str  # its key in the registry (scalebench/backends.py), with name: the facts read there
    name: str
    rank: int
    local_rank: int
    processes: int
    local_processes: int
    replicas: int
    replica_ids: list[int]
    checkpoint_on_all_ranks = False  # saving a checkpoint is a collective every rank joins
    # batches whose gradients a rank adds up locally before one reduction and optimizer step
    # (accumulation.py): 1 unless the registry says the backend accumulates (backends.backward_passes)
    backward_passes_per_step = 1
    device_type = "cpu"  # "cuda" or "cpu" (training.device's words): set by framework.start before setup()
    share_gpu = False  # ranks share a GPU (ProcessFacts.share_gpu): set by framework.start before setup()
    # the type gradients are reduced in between ranks (training.compression: none or fp16), as
    # this backend applies it: run.json records it, and the loop checks it is the one asked for
    gradient_compression = "none"
    # the step split (step_timing.py): why this backend's total communication time is not read
    # ('' where it times its collectives: DDP and FSDP on CPU ranks), and the framework's marks,
    # set before distribute() where training.step_split is on, for a backend that times them
    untimed_comm = "this backend does not time its collectives"
    step_marks: Any = None
    # training.profile: why only rank 0 may trace with the framework's profiler ('' where every rank may)
    untraced_ranks = ""

    def __init__(self, place: RankInfo) -> None:
        self.place = place
        self.rank, self.local_rank = place.rank, place.local_rank
        self.processes, self.local_processes = place.processes, place.local_processes
        self.replicas, self.replica_ids = place.processes, [place.rank]

    @property
    def spec(self) -> backends.BackendSpec:
        """This backend's registry entry (scalebench/backends.py): the facts the planner reads too.
        shards_state: each process holds only a slice of the parameters (FSDP), so the whole
        model's state comes from gather_state and evaluating needs a whole copy."""
        return backends.spec(self.framework, self.name)

    def setup(self, run: RunSettings) -> None:
        """Join the other ranks, with run.training.collective_timeout_s as the limit for a dead peer."""
        raise NotImplementedError

    def local_devices(self) -> list[str] | None:
        """TensorFlow: the devices of this process's replicas where one process drives several
        (MirroredStrategy); None where the framework's own device is the one."""
        return None

    def scope(self) -> AbstractContextManager:
        """Where the model and optimizer are created (a tf.distribute strategy's scope)."""
        return nullcontext()

    def distribute(self, model: Any, optimizer: Any) -> tuple[Any, Any]:
        """Wrap model and optimizer so gradients are averaged over replicas, and start
        every replica from rank 0's state; returns the (possibly wrapped) pair."""
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

    def collective_bench(self) -> Bench | str:
        """This backend's collectives for the benchmark before the first epoch (train/collectives.py),
        through the library it reduces gradients with, once it has distributed the model; or why
        it has none. Called on every process of a cell of more than one replica."""
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


class Framework(Protocol):
    """PyTorch or TensorFlow: model, data, steps, device and checkpoint of one rank."""

    name: str
    backend: Backend
    out_of_memory: tuple[type[BaseException], ...]  # errors that mean the device ran out of memory
    gpu_indices: list[int]  # the GPUs it drives, among those it sees (devices.process_gpus), after start()
    process: ProcessFacts  # this rank's own facts (threads, whether it must have a GPU, may share one)

    def start(self, run: RunSettings) -> None:
        """Threads, device, the backend's setup and seeding, before anything is built."""

    def build(self) -> None:
        """Model and optimizer (in the backend's scope), before a checkpoint is restored into them."""

    def describe(self) -> dict[str, Any]:
        """run.json fields of this rank: parameters, device type, precision, layout, versions."""

    def device_model(self) -> str:
        """The model of this process's (first) device as its framework names it (run.json's devices),
        e.g. NVIDIA H100 80GB HBM3, or cpu (x86_64)."""

    def restore(self, directory: Path, config_hash: str) -> dict | None:
        """Load the cell's checkpoint into model and optimizer; its loop state, or None."""

    def distribute(self) -> None:
        """Hand model and optimizer to the backend (after a restore, so rank 0's state is shared)."""

    def input_bytes(self, train_indices: list[int], eval_shards: list[list[int]]) -> int:
        """Bytes of uint8 samples the busiest device of this process holds with placement device:
        its replica's training samples over all epochs, and on the first device the evaluated ones."""

    def free_device_bytes(self) -> int | None:
        """Free memory of this process's device with the least (a CPU rank: its share of the
        node's), or None where the framework cannot tell."""

    def prepare_data(self, train_indices: list[int], eval_shards: list[list[int]], where: DataPlacement) -> None:
        """This rank's input pipeline over the (repeated) training indices and the evaluation
        shards, placed as decided (train/placement.py): the batches arrive on the device as the
        model's inputs either way."""

    def epoch_batches(self, epoch: int, learning_rate: float) -> Iterable:
        """Set the rate and return this rank's batches of the epoch in the sampler's order."""

    def train_step(self, batch: Any, part: Part) -> None:
        """Forward and backward on `batch`, adding its loss to the epoch's sum; where `part` says
        the batch ends its optimizer step, the reduction and the step (accumulation.py)."""

    def epoch_loss(self) -> tuple[float, int]:
        """(sum of batch losses, replica batches) of this rank's epoch, waiting for the device."""

    def observed_steps(self) -> dict[str, Any]:
        """What the training steps so far did, read from the framework, never from the settings
        (train/observed.py): compute_dtype, the dtype of the model's output inside the step
        (None before the first), and compiled, observed.compiled_record of the framework's compiler."""

    def optimizer_lr(self) -> float:
        """The learning rate the optimizer holds now, read back from it."""

    def step_times(self) -> StepTimes | None:
        """The step split's marks of this epoch's steps (train/<framework>/step_timing.py), read
        after the epoch's synchronisation; None with training.step_split off."""

    def start_trace(self, folder: Path) -> None:
        """training.profile: start the framework's profiler on this rank, writing into `folder`."""

    def stop_trace(self) -> None:
        """Stop it and write the trace; raises if the trace could not be written."""

    def synchronize(self) -> None:
        """Wait for queued device work, so a clock read after it is honest."""

    def reset_peak_memory(self) -> None: ...

    def peak_memory_mb(self) -> float: ...

    def sync_buffers(self) -> None:
        """Give every replica rank 0's batch-norm statistics (before evaluating or saving)."""

    def evaluate(self, indices: list[int]) -> np.ndarray:
        """[loss sum, pixels, intersection, union] of the model on these test samples."""

    def save_predictions(self, indices: list[int], folder: Path) -> None: ...

    def save_checkpoint(self, directory: Path, config_hash: str, state: dict, epoch: int) -> None:
        """Write a checkpoint with the loop's `state` (rank 0 writes; others take part where needed)."""

    def remove_checkpoint(self, directory: Path) -> None: ...

    def summary_writer(self, folder: Path) -> EpochWriter:
        """The framework's own TensorBoard writer into `folder` (rank 0, training.tensorboard)."""

    def out_of_memory_error(self, message: str) -> BaseException:
        """The framework's own out-of-memory error (for the fault-injection hook)."""
