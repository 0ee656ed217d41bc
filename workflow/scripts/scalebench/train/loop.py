"""The one training loop, for every framework and backend.

TrainingLoop keeps what a loop is: the epochs (the clock, read only after the device is
synchronised, the slowest rank's time; the time spent waiting for data; the records; the
learning rate the optimizer held), evaluation, checkpoints and resuming from them, and stopping
(divergence, the target IOU, the final test: the only look at the test pairs). Its constructor
builds everything the epochs use, from the framework's spec of builders (train/interfaces.py
FrameworkSpec: train/torch/spec.py, train/tf/spec.py), in the order a rank needs it, and holds
each product from then on; train() runs the epochs. The run-wide concerns are components it
holds: run.json is a RunRecord's (run_record.py), the checks and decisions before the first step
are preflight.py's, the collective benchmark is collectives.py's, the profile window is a context
manager around an epoch's steps (profiling.py), energy is energy.py's and the step split's
gathering step_timing.py's. The Backend (entry.py builds it with the device) reduces.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from scalebench import measures, outcome, records
from scalebench.data.preprocess import read_manifest
from scalebench.settings import ProcessFacts, RunSettings
from scalebench.train import (
    accumulation,
    collectives,
    devices,
    energy,
    metrics,
    observed,
    preflight,
    profiling,
    resume,
    step_timing,
    summaries,
)
from scalebench.train.binding import Binding
from scalebench.train.faults import EpochDelays, FaultPlan, delayed
from scalebench.train.interfaces import Backend, Device, FrameworkSpec
from scalebench.train.lr_schedule import learning_rate
from scalebench.train.run_record import RunRecord


class Diverged(Exception):
    """The loss stopped being finite or exceeded training.max_loss."""


@dataclass
class Progress:
    """Where the loop stands; a checkpoint holds it, so a resumed run goes on from here."""

    start_epoch: int = 0
    records: list[dict] = field(default_factory=list)
    train_time_s: float = 0.0

    def add(self, seconds: float) -> float:
        """An epoch's time (the slowest rank's) added to the training time; returns the new total."""
        self.train_time_s += seconds
        return self.train_time_s

    def state(self, epoch: int, records: list[dict]) -> dict:
        return {"epoch": epoch, "records": records, "train_time_s": self.train_time_s}

    @classmethod
    def from_state(cls, state: dict | None) -> Progress:
        if state is None:
            return cls()
        return cls(state["epoch"], state["records"], state["train_time_s"])


class TrainingLoop:
    """One cell on this rank: the constructor builds what the epochs use (the setup, timed as
    setup_s less the collective benchmark), train() runs them and returns the status."""

    def __init__(
        self,
        run: RunSettings,
        spec: FrameworkSpec,
        device: Device,
        backend: Backend,
        process: ProcessFacts,
        config_hash: str,
        started: float,  # perf_counter() when the rank started: setup time counts from there
        *,
        faults: FaultPlan,  # the test faults the rank's entry read (faults.py): FaultPlan() names none
        cpu_binding: Binding | None,  # how the entry bound the rank's cores (binding.bind), for run.json
    ) -> None:
        self.run, self.device, self.backend, self.faults = run, device, backend, faults
        self.training, self.config_hash, self.out = run.training, config_hash, Path(run.out_dir)
        self.manifest = read_manifest(run.data_dir)
        self.numerics = spec.build_numerics(run, device, faults)
        preflight.check_replicas(backend, run.cell.gpus)
        preflight.check_batch(self.training.batch_per_gpu, len(self.manifest["train"]), backend.replicas)
        preflight.check_model_fits(run, backend, device.free_bytes(backend.local_processes))
        model = spec.build_model(run, device, self.numerics, backend)
        train_indices = self.manifest["train"] * self.training.dataset_repeat
        passes = backend.backward_passes_per_step
        per_epoch = accumulation.epoch_batches(self.training, len(train_indices), backend.replicas, passes)
        order = spec.build_order(run, backend, train_indices, per_epoch)
        placement = preflight.place_data(run, backend, device, order, self.eval_shards())
        self.record = RunRecord(
            run, backend, process, config_hash, framework=spec.name, model=model, device=device,
            numerics=self.numerics, placement=placement, cpu_binding=cpu_binding,
        )  # fmt: skip
        self.progress = self.resume(partial(spec.restore, model))
        marks = spec.build_marks(device, backend) if self.training.step_split else None
        delays = EpochDelays(faults, backend.rank, run.cell.path)  # the test faults' delays, which the steps read
        distributed = spec.distribute(run, model, backend, marks, delays)
        preflight.check_compression(backend, self.training.compression)
        self.collectives_s = self.measure_collectives(distributed.wrapped)  # not setup's, not training's
        self.batches = spec.build_data(run, device, backend, order, placement, self.eval_shards())
        self.steps = spec.build_steps(run, distributed, device, self.numerics, backend, marks, delays)
        self.checkpointer = spec.build_checkpointer(self.out, config_hash, distributed, backend)
        self.parts = accumulation.epoch_parts(per_epoch, passes)  # each batch's place in its optimizer step
        preflight.check_profile(self.training.profile, len(self.parts))
        self.setup_s = time.perf_counter() - started - self.collectives_s
        # instrumentation, after setup_s: TensorBoard's writer is written between epochs
        curves = summaries.start(self.out, self.training.tensorboard, spec.open_summaries) if self.is_root else None
        previous = self.progress.records
        self.metrics = metrics.MetricsWriter(self.out / "metrics.jsonl", self.is_root, previous, curves)
        self.energy = energy.RankEnergy(device.type, device.gpu_indices, process.share_gpu, backend.local_rank)
        tracer = partial(spec.start_trace, device=device, backend=backend)
        self.profile = profiling.Window(self.training.profile, self.out, tracer, backend)
        self.epoch_times = [record["epoch_time_s"] for record in previous]
        self.stopped_at_target = False

    @property
    def is_root(self) -> bool:
        return self.backend.rank == 0

    def train(self) -> str:
        status = self.run_epochs()
        final = self.final_evaluation(status)
        self.finish(final)
        return status

    def shard(self, indices: list[int]) -> list[int]:
        """This process's share of evaluation samples: one in every `processes` (from its rank), none dropped or repeated."""
        return indices[self.backend.rank :: self.backend.processes]

    def eval_shards(self) -> list[list[int]]:
        """The samples this process evaluates: its validation shard (where training validates) and test shard."""
        val = [self.shard(self.manifest["val"])] if self.training.eval_every else []
        return [*val, self.shard(self.manifest["test"])]

    def measure_collectives(self, model) -> float:
        """The backend's own collectives on this cell's ranks (collectives.benchmark) for `model` as
        it distributed it, before the first epoch; returns its time, run.json's summary included,
        which is kept out of setup_s."""
        started = time.perf_counter()
        gradient_bytes = self.record.fields["gradient_bytes"]
        result = collectives.benchmark(
            self.backend, model, self.training.collectives, gradient_bytes, self.out, faults=self.faults
        )
        self.record.add(collectives.run_fields(result, self.backend.replicas))
        return time.perf_counter() - started

    def resume(self, restore: Callable[[Path, str], dict | None]) -> Progress:
        """Where the run starts: the checkpoint every rank agrees on (resume.agreed_state; `restore`
        loads it into the model as built), or the beginning."""
        if not self.training.checkpoint_every:
            return Progress()
        folder = self.faults.checkpoint_folder(self.backend.rank, self.out)
        state = resume.agreed_state(self.backend, partial(restore, folder, self.config_hash), folder)
        progress = Progress.from_state(state)
        if state is not None:
            print(f"resuming from checkpoint after epoch {progress.start_epoch}", flush=True)
        return progress

    def run_epochs(self) -> str:
        progress, device, backend = self.progress, self.device, self.backend
        try:
            for epoch in range(progress.start_epoch, self.training.epochs):
                record = self.train_epoch(epoch)
                if epoch == progress.start_epoch:
                    self.record.first_epoch()  # the first step's observations, off the epoch's clock
                if self.evaluates_after(epoch):
                    record["val_loss"], record["val_iou"] = self.evaluate(self.manifest["val"])
                self.metrics.write(record)
                self.report(record, epoch)
                if self.reached_target(record):  # every rank has the reduced IOU, so all stop together
                    self.stopped_at_target = True
                    print(f"validation IOU reached {self.training.target_iou:g}: training stops", flush=True)
                    break
                if self.checkpoints_after(epoch):
                    self.steps.sync_buffers()  # the checkpoint holds rank 0's statistics
                    self.checkpointer.save(progress.state(epoch + 1, self.metrics.records), epoch + 1)
        except Diverged as error:
            print(f"diverged: {error}", flush=True)
            return "diverged"
        except device.out_of_memory as error:
            reason = devices.out_of_memory_reason(
                error, device.model(), device.type, backend.local_rank, self.training, self.run.image_size
            )
            outcome.mark(self.out, backend.rank, reason)
            raise outcome.CellOutOfMemory(str(error)) from error
        finally:
            self.metrics.close_curves()
        return "ok"

    def train_epoch(self, epoch: int) -> dict:
        device, backend, steps, progress = self.device, self.backend, self.steps, self.progress
        lr = learning_rate(epoch, self.training, backend.replicas)
        steps.start_epoch(epoch, self.faults.learning_rate(lr, epoch))
        epoch_data = self.batches.epoch(epoch)
        self.faults.check(backend.rank, epoch, progress.start_epoch > 0, device.out_of_memory_error)
        loader_delay = self.faults.delays(backend.rank, epoch, self.run.cell.path).loader_s
        if loader_delay:
            epoch_data = delayed(epoch_data, loader_delay)
        with self.profile.around(epoch) as window:
            device.reset_peak_memory()
            device.synchronize()
            self.energy.start()  # after the synchronisation, before the clock: off the epoch's time
            started = time.perf_counter()
            wait, seen = self.take_steps(epoch_data, window, lr, epoch)
        if seen != len(self.parts):  # a step left half-accumulated would silently drop its batches
            raise RuntimeError(f"the epoch had {seen} batches, {len(self.parts)} expected")
        loss_sum, replica_batches = steps.epoch_loss()
        device.synchronize()
        elapsed = time.perf_counter() - started
        energy_part = self.energy.stop()
        held_lr = steps.optimizer_lr()  # after the epoch's steps, off the clock
        observed.check([observed.lr_problem(held_lr, lr, epoch + 1, "after the epoch's steps")])
        sums = [loss_sum, replica_batches, *energy_part]  # one reduction for both
        loss_total, step_total, *energy_sums = backend.allreduce_sum(np.array(sums, dtype=np.float64)).tolist()
        energy_j = self.energy.epoch_joules(energy_sums)
        slowest = backend.allreduce_max(np.array([elapsed, wait, device.peak_memory_mb()], dtype=np.float64))
        mean_loss = loss_total / max(step_total, 1)
        train_time_s = progress.add(float(slowest[0]))
        self.epoch_times.append(float(slowest[0]))
        record = metrics.epoch_record(
            epoch + 1,
            mean_loss,
            (held_lr, lr),
            slowest.tolist(),
            step_total,
            self.training.batch_per_gpu,
            train_time_s,
            self.record.fields,
            sum(part.last for part in self.parts),
            energy_j,
            resumed=progress.start_epoch > 0 and epoch == progress.start_epoch,
        )
        record.update(step_timing.gather_epoch(steps.step_times(), elapsed, wait, backend, self.record.hosts))
        record.update(self.profile.fields(epoch))
        if metrics.diverged(mean_loss, self.training.max_loss):
            self.metrics.write(record)
            raise Diverged(f"loss is {mean_loss} in epoch {epoch + 1} (max_loss {self.training.max_loss})")
        return record

    def take_steps(self, epoch_data, window: profiling.Window, lr: float, epoch: int) -> tuple[float, int]:
        """The epoch's batches, each handed to the steps with its place in its optimizer step;
        returns the time spent waiting for them and their count. The run's first step is checked
        (observed.py)."""
        batches = iter(epoch_data)  # on the clock: an iterator starts its loader's prefetching
        wait, seen = 0.0, 0
        while True:
            waited = time.perf_counter()
            batch = next(batches, None)
            wait += time.perf_counter() - waited
            if batch is None:
                break
            if seen == len(self.parts):
                raise RuntimeError(f"the epoch has more batches than the {len(self.parts)} expected")
            self.steps.train(batch, self.parts[seen])  # the last batch of a step reduces and steps
            seen += 1
            if not self.record.observed:
                self.record.observe(observed.check_first_step(self.steps, self.training, lr, epoch))
            window.after_step(seen)
        return wait, seen

    def evaluates_after(self, epoch: int) -> bool:
        every = self.training.eval_every
        return bool(every) and (epoch + 1) % every == 0

    def reached_target(self, record: dict) -> bool:
        """training.stop_at_target and this epoch's validation IOU reached training.target_iou."""
        iou = record.get("val_iou")
        return self.training.stop_at_target and iou is not None and iou >= self.training.target_iou

    def checkpoints_after(self, epoch: int) -> bool:
        every = self.training.checkpoint_every
        return bool(every) and (epoch + 1) % every == 0 and epoch + 1 < self.training.epochs

    def evaluate(self, indices: list[int]) -> tuple[float, float]:
        """Loss and IOU over all of `indices` (the validation or the test pairs): process r takes
        samples r, r + processes, ... (none dropped or repeated), and the sums are reduced across processes."""
        self.steps.sync_buffers()
        sums = self.backend.allreduce_sum(self.steps.evaluate(self.batches.eval_batches(self.shard(indices))))
        loss, pixels, intersection, union = sums.tolist()
        return loss / max(pixels, 1), (intersection / union if union else 1.0)

    def report(self, record: dict, epoch: int) -> None:
        if not self.is_root:
            return
        steady = measures.steady_median(self.epoch_times)
        remaining = steady * (self.training.epochs - epoch - 1)
        print(metrics.progress_line(record, self.training.epochs, remaining), flush=True)

    def final_evaluation(self, status: str) -> dict:
        progress = self.progress
        final = records.final_record(
            status, self.setup_s, progress.train_time_s, len(self.epoch_times), self.stopped_at_target
        )
        epochs = [record for record in self.metrics.records if record["type"] == "epoch"]
        final.update(self.energy.cost(epochs, self.backend.replicas, progress.train_time_s))
        if status != "ok":
            return final
        self.device.synchronize()
        started = time.perf_counter()
        final["test_loss"], final["iou"] = self.evaluate(self.manifest["test"])
        self.device.synchronize()
        elapsed = np.array([time.perf_counter() - started], dtype=np.float64)
        final["test_time_s"] = float(self.backend.allreduce_max(elapsed)[0])
        if self.is_root and self.training.predictions:
            folder = self.out / "predictions"
            folder.mkdir(exist_ok=True)
            self.steps.save_predictions(self.manifest["test"][: self.training.predictions], folder)
        return final

    def finish(self, final: dict) -> None:
        self.metrics.write(final)
        self.record.finish(final, self.progress.start_epoch, self.steps.observed)
        if self.is_root:
            self.checkpointer.remove()
