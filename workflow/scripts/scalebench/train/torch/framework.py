"""PyTorch's side of the training contract (train/interfaces.py): model, data, steps, checkpoints.

The backend (native.py: DDP; fsdp.py; dp.py: DataParallel; horovod.py) joins
the ranks, wraps model and optimizer and provides the collectives; loop.py does
the timing, records, evaluation cadence and checkpoint cadence.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from scalebench import architecture, backends
from scalebench.settings import ProcessFacts, RunSettings
from scalebench.train import accumulation, devices, faults, placement, resume
from scalebench.train.accumulation import Part
from scalebench.train.interfaces import Backend
from scalebench.train.placement import DataPlacement
from scalebench.train.step_timing import StepTimes
from scalebench.train.summaries import EpochWriter
from scalebench.train.torch import checkpoint, compiled, data, profiler, runtime, step_timing
from scalebench.train.torch.checkpoint import Checkpoint
from scalebench.train.torch.model import UNet, gradient_bytes, parameter_count


class TorchFramework:
    name = "torch"
    out_of_memory = (torch.OutOfMemoryError,)

    def __init__(self, run: RunSettings, backend: Backend, process: ProcessFacts) -> None:
        self.run, self.backend, self.process = run, backend, process
        self.training = run.training
        self.channels = architecture.channels(run.model_width)
        self.marks: step_timing.StepMarks | None = None  # training.step_split (step_timing.py)
        self.delays = faults.Delays()
        self.trace: profiler.Trace | None = None

    # --- before the loop

    def start(self, run: RunSettings) -> None:
        torch.set_num_threads(self.process.threads)
        backend = self.backend
        # DataParallel: every GPU of the cell
        per_process = backends.devices_per_process(run.cell.framework, run.cell.backend, run.cell.gpus)
        self.device = runtime.choose_device(  # before NCCL starts
            run, self.process, backend.local_rank, backend.local_processes, per_process
        )
        backend.device_type = self.device.type  # cuda or cpu (runtime.choose_device)
        backend.share_gpu = self.process.share_gpu
        # each replica's device: DataParallel drives GPUs 0..n-1 (the first is self.device)
        self.gpu_indices = (
            devices.process_gpus(backend.local_rank, per_process, torch.cuda.device_count())
            if self.device.type == "cuda"
            else []
        )
        self.replica_devices = [torch.device("cuda", index) for index in self.gpu_indices] or [self.device]
        backend.setup(run)
        self.autocast = runtime.autocast_dtype(self.training.autocast_dtype, self.device)
        if faults.precision_off():  # a test hook: the steps compute in float32, which the loop must refuse
            self.autocast = None
        if self.training.compile:
            compiled.check_available(self.device)
        self.deterministic = devices.deterministic(self.training.deterministic, self.device.type == "cuda")
        runtime.set_determinism(run.cell.seed, self.deterministic)

    def build(self) -> None:
        training = self.training
        with self.backend.scope():
            self.model = UNet(training.batch_norm, self.channels).to(self.device, memory_format=runtime.LAYOUT)
            # the loop sets the rate of each epoch before its first step
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=training.base_lr, eps=1e-8)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.autocast == torch.float16)
        self.output_dtype: torch.dtype | None = None  # the model's output in the last training step
        self.raw_model = self.model
        self.gathered: torch.nn.Module | None = None  # a whole copy of a sharded model (whole_model)

    def describe(self) -> dict:
        return {
            "parameters": parameter_count(self.raw_model),
            "gradient_bytes": gradient_bytes(self.raw_model),
            "device": self.device.type,  # cuda or cpu
            "layout": runtime.LAYOUT_NAME,
            "tf32": runtime.tf32_enabled(self.device),
            "deterministic": self.deterministic,
            "versions": runtime.versions(),
        }

    def device_model(self) -> str:
        return runtime.device_model(self.device)

    def restore(self, directory: Path, config_hash: str) -> dict | None:
        state = Checkpoint(directory, config_hash).load()
        if state is None:
            return None
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        torch.set_rng_state(state["torch_rng"])
        resume.set_host_rng_state(state["host_rng"])
        return state["loop"]

    def distribute(self) -> None:
        if self.training.step_split:  # before the backend wraps the model: it may time its collectives
            self.marks = step_timing.StepMarks(self.device, self.backend.untimed_comm)
            self.backend.step_marks = self.marks
        if faults.injects("slow_reduce") and not self.backend.spec.shards_state:
            step_timing.delay_reduction(self.raw_model, lambda: self.delays.reduce_s)
        self.model, self.optimizer = self.backend.distribute(self.model, self.optimizer)
        if self.training.compile:  # the backend's wrapper included: DDP's buckets shape the graphs
            self.model = compiled.compile_model(self.model)

    def _sampler(self, train_indices: list[int]) -> data.ReplicaShards:
        run, backend, training = self.run, self.backend, self.training
        return data.train_sampler(
            run.data_dir,
            train_indices,
            backend.replicas,
            backend.replica_ids,
            run.cell.seed,
            training.batch_per_gpu,
            accumulation.epoch_batches(
                training, len(train_indices), backend.replicas, backend.backward_passes_per_step
            ),
        )

    def input_bytes(self, train_indices: list[int], eval_shards: list[list[int]]) -> int:
        per_replica = data.replica_samples(train_indices, self._sampler(train_indices), self.training.epochs)
        return placement.busiest_device_bytes(per_replica, eval_shards, self.run.image_size)

    def free_device_bytes(self) -> int | None:
        if self.device.type == "cuda":
            return min(torch.cuda.mem_get_info(device)[0] for device in self.replica_devices)
        return placement.host_free_bytes(self.backend.local_processes)

    def prepare_data(self, train_indices: list[int], eval_shards: list[list[int]], where: DataPlacement) -> None:
        run = self.run
        self.sampler = self._sampler(train_indices)
        self.eval_stores: dict[tuple[int, ...], data.DeviceSamples] = {}
        if where.kind == "device":
            per_replica = data.replica_samples(train_indices, self.sampler, self.training.epochs)
            stores = [data.DeviceSamples(run.data_dir, s, d) for s, d in zip(per_replica, self.replica_devices)]
            self.batches = data.DeviceTrainBatches(train_indices, self.sampler, stores)
            for shard in eval_shards:
                self.eval_stores[tuple(shard)] = data.DeviceSamples(run.data_dir, shard, self.device)
        else:
            loader = self.training.loader
            pin = loader.pin_memory and self.device.type == "cuda"
            self.batches = data.host_train_loader(run.data_dir, self.sampler, loader, pin, self.device)

    def eval_batches(self, indices: list[int]):
        """The batches of `indices` in order: gathered where prepare_data loaded them, else from the host."""
        store = self.eval_stores.get(tuple(indices))
        if store is not None:
            return data.device_eval_batches(store, indices, self.training.batch_per_gpu)
        return data.host_eval_batches(self.run.data_dir, indices, self.training.batch_per_gpu, self.device)

    # --- an epoch

    def epoch_batches(self, epoch: int, learning_rate: float):
        self.delays = faults.delays(self.backend.rank, epoch, self.run.cell.path)
        if self.marks is not None:
            self.marks.start_epoch()
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        self.sampler.set_epoch(epoch)
        self.model.train()
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.steps = 0
        return self.batches

    def train_step(self, batch, part: Part) -> None:
        marks = self.marks
        if marks is not None:
            marks.begin()
        if self.delays.compute_s:  # slow_compute (faults.py): this rank is a straggler
            time.sleep(self.delays.compute_s)
        images, masks = batch  # on the device, converted (data.py)
        with torch.autocast(self.device.type, dtype=self.autocast, enabled=self.autocast is not None):
            logits = self.model(images)
        self.output_dtype = logits.dtype  # what the passes computed in (observed.py): no device sync
        loss = F.binary_cross_entropy_with_logits(logits.float(), masks)
        if part.first:
            self.optimizer.zero_grad()  # set_to_none is the default; Horovod takes no argument
        # backward() adds to the gradients: divided by the step's batch count, they sum to its mean
        scaled = self.scaler.scale(loss / part.count)
        if marks is not None or self.delays_reduction_at_compute_end() or self.delays.comm_s:
            step_timing.at_compute_end(scaled, self.compute_end)
        scaled.backward()
        if part.last:
            with self.backend.gradients_reduced(self.optimizer):  # a float16 scaler unscales them in step()
                if marks is not None:
                    marks.reduced()
                self.scaler.step(self.optimizer)
            self.scaler.update()
        elif marks is not None:  # a batch that only accumulates: nothing to reduce
            marks.reduced()
        # the loss of a batch of several replicas (DataParallel) is their mean: each replica counts
        replicas = len(self.backend.replica_ids)
        self.loss_sum += loss.detach().double() * replicas
        self.steps += replicas
        if marks is not None:
            marks.end()

    def delays_reduction_at_compute_end(self) -> bool:
        """slow_reduce for FSDP2, which reduce-scatters the last units' gradients in its final callback."""
        return self.backend.spec.shards_state and bool(self.delays.reduce_s)

    def compute_end(self) -> None:
        """Every gradient of the pass is computed on this rank (step_timing.at_compute_end). The test
        faults sit on either side of the mark: a late rank's delay before it (its own compute), a slow
        reduction's after it (exposed communication on every rank, faults.py)."""
        if self.delays_reduction_at_compute_end():
            time.sleep(self.delays.reduce_s)
        if self.marks is not None:
            self.marks.computed()
        if self.delays.comm_s:
            time.sleep(self.delays.comm_s)

    def step_times(self) -> StepTimes | None:
        return self.marks.times() if self.marks is not None else None

    def start_trace(self, folder: Path) -> None:
        self.trace = profiler.Trace(folder, self.backend.rank, self.device)

    def stop_trace(self) -> None:
        trace, self.trace = self.trace, None
        if trace is not None:
            trace.stop()

    def epoch_loss(self) -> tuple[float, int]:
        return self.loss_sum.item(), self.steps

    def observed_steps(self) -> dict:
        dtype = str(self.output_dtype).removeprefix("torch.") if self.output_dtype is not None else None
        return {"compute_dtype": dtype, "compiled": compiled.observed()}

    def optimizer_lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])  # every group is set alike (epoch_batches)

    def synchronize(self) -> None:
        runtime.synchronize(self.device)

    def reset_peak_memory(self) -> None:
        runtime.reset_peak_memory(self.device)

    def peak_memory_mb(self) -> float:
        return runtime.peak_memory_mb(self.device)

    # --- evaluation and checkpoints

    def sync_buffers(self) -> None:
        self.backend.broadcast_from_root([buffer.data for buffer in self.raw_model.buffers()])

    def whole_model(self) -> torch.nn.Module:
        """The model with all its parameters in this process, for evaluation. Where the backend
        shards them (FSDP), a plain copy gathered from the shards: a collective every rank joins,
        after which each rank evaluates its own shard of the test set without the others."""
        if not self.backend.spec.shards_state:
            return self.raw_model
        state = self.backend.gather_state(self.raw_model.state_dict())
        if self.gathered is None:
            with torch.device("meta"):  # no initialisation: no draw from the generators a checkpoint holds
                copy = UNet(self.training.batch_norm, self.channels)
            self.gathered = copy.to_empty(device=self.device).to(memory_format=runtime.LAYOUT)
        self.gathered.load_state_dict(state)
        return self.gathered

    def evaluate(self, indices: list[int]) -> np.ndarray:
        sums = torch.zeros(4, dtype=torch.float64, device=self.device)  # loss, pixels, intersection, union
        model = self.whole_model()
        model.eval()
        with torch.no_grad():
            for images, masks in self.eval_batches(indices):
                with torch.autocast(self.device.type, dtype=self.autocast, enabled=self.autocast is not None):
                    logits = model(images)
                logits = logits.float()
                predicted, truth = logits > 0, masks > 0.5
                sums += torch.stack(
                    [
                        F.binary_cross_entropy_with_logits(logits, masks, reduction="sum").double(),
                        torch.tensor(float(masks.numel()), dtype=torch.float64, device=self.device),
                        (predicted & truth).sum().double(),
                        (predicted | truth).sum().double(),
                    ]
                )
        model.train()
        return sums.cpu().numpy()

    def save_predictions(self, indices: list[int], folder: Path) -> None:
        from PIL import Image

        # rank 0 alone: a sharded model predicts with the copy the final evaluation gathered
        model = self.gathered if self.backend.spec.shards_state else self.raw_model
        if model is None:
            raise RuntimeError("predictions of a sharded model need the copy an evaluation gathers first")
        model.eval()
        with torch.no_grad():
            for index, (image, _) in zip(indices, data.host_eval_batches(self.run.data_dir, indices, 1, self.device)):
                logits = model(image)
                mask = (logits[0, 0] > 0).to(torch.uint8).mul(255).cpu().numpy()
                Image.fromarray(mask).save(folder / f"test_{index:05d}.png")

    def save_checkpoint(self, directory: Path, config_hash: str, state: dict, epoch: int) -> None:
        backend = self.backend
        if backend.rank != 0 and not backend.checkpoint_on_all_ranks:
            return
        # whole tensors, as an unsharded model holds them: a checkpoint restores into the plain
        # model and optimizer before the backend distributes them (FSDP: every rank gathers)
        model_state = backend.gather_state(self.raw_model.state_dict())
        optimizer_state = backend.gather_state(self.optimizer.state_dict())
        if backend.rank != 0:
            return
        Checkpoint(directory, config_hash).save(
            {
                "model": model_state,
                "optimizer": optimizer_state,
                "scaler": self.scaler.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "host_rng": resume.host_rng_state(),
                "loop": state,
            }
        )

    def remove_checkpoint(self, directory: Path) -> None:
        checkpoint.remove(directory)

    def summary_writer(self, folder: Path) -> EpochWriter:
        # imported only where training.tensorboard is on: it needs the tensorboard package, which
        # loads TensorFlow where that is installed
        from scalebench.train.torch.summaries import TorchEpochWriter

        return TorchEpochWriter(folder)

    def out_of_memory_error(self, message: str) -> BaseException:
        return torch.OutOfMemoryError(f"CUDA {message}")


def create(run: RunSettings, backend: Backend, process: ProcessFacts) -> TorchFramework:
    return TorchFramework(run, backend, process)
