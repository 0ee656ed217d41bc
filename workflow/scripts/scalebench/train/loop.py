"""The one training loop, for every framework and backend.

Everything measured happens here, the same way for all: the clock (device
synchronised before it is read, the slowest rank's time), the time spent
waiting for data, the records, divergence, the validation and checkpoint
cadence, the stop at the target IOU, the final test (the only look at the test
pairs). A Framework (train/torch, train/tf) builds the model and takes the
steps; its Backend starts the ranks and reduces.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scalebench import architecture, collective_table, measures, outcome, records
from scalebench.data.preprocess import read_manifest
from scalebench.records import store
from scalebench.refusal import Refused, SettingRefused
from scalebench.settings import ProfileSettings, RunSettings
from scalebench.train import (
    accumulation,
    binding,
    collectives,
    devices,
    energy,
    faults,
    flops,
    metrics,
    observed,
    placement,
    profiling,
    provenance,
    resume,
    site,
    step_timing,
    summaries,
)
from scalebench.train.interfaces import Backend, Framework
from scalebench.train.lr_schedule import learning_rate


class Diverged(Exception):
    """The loss stopped being finite or exceeded training.max_loss."""


class LaunchMismatch(Refused, RuntimeError):
    """The launcher started the ranks differently from what the cell asks for."""


@dataclass
class Progress:
    """Where the loop stands; a checkpoint holds it, so a resumed run goes on from here."""

    start_epoch: int = 0
    records: list[dict] = field(default_factory=list)
    train_time_s: float = 0.0

    def state(self, epoch: int, records: list[dict]) -> dict:
        return {"epoch": epoch, "records": records, "train_time_s": self.train_time_s}

    @classmethod
    def from_state(cls, state: dict | None) -> Progress:
        if state is None:
            return cls()
        return cls(state["epoch"], state["records"], state["train_time_s"])


def check_launch(place_world_size: int, source: str, backend: Backend, gpus: int) -> None:
    """The launcher started as many processes as the cell needs (before any rank joins the others)."""
    expected = backend.processes(gpus)
    if place_world_size == expected:
        return
    message = f"{source} = {place_world_size} ranks, but the cell asks for {gpus} GPUs"
    if expected != gpus:  # a backend that drives several devices from one process
        message += (
            f", which {backend.name} drives from {expected} process(es): the cell's launcher template must "
            "start that many (e.g. '{python} {program}')"
        )
    raise LaunchMismatch(message)


def check_compression(backend: Backend, compression: str) -> None:
    """The backend reduces gradients with the compression the cell asked for (entry.py refuses a
    backend that has none before it starts; this catches one that forgot to apply it)."""
    if backend.gradient_compression != compression:
        raise RuntimeError(
            f"training.compression: the cell asks for {compression}, but backend {backend.name} "
            f"reduces its gradients with {backend.gradient_compression}"
        )


def check_batch(batch: int, train_pairs: int, replicas: int) -> None:
    shard = train_pairs // replicas
    if batch > shard:
        raise SettingRefused(
            f"training.batch_per_gpu = {batch} is larger than the shard of the training set "
            f"({train_pairs} pairs / {replicas} ranks = {shard})"
        )


def check_profile(profile: ProfileSettings | None, steps: int) -> None:
    """training.profile's window lies inside an epoch (config checks refuse it first where the
    dataset's size is known before it is prepared: synthetic data)."""
    if profile is not None and profile.steps > steps:
        raise SettingRefused(
            f"training.profile.steps = {profile.steps} is more than the {steps} steps an epoch of this cell has"
        )


class TrainingLoop:
    """One cell on this rank: train() runs the named steps in order and returns the status."""

    def __init__(self, run: RunSettings, framework: Framework, config_hash: str, started: float) -> None:
        self.run, self.framework, self.backend = run, framework, framework.backend
        self.training = run.training
        self.config_hash = config_hash
        self.started = started  # perf_counter() when the rank started: setup time counts from there
        self.out = Path(run.out_dir)
        self.manifest = read_manifest(run.data_dir)
        self.collectives_s = 0.0  # the collective benchmark's time: not setup's, not training's

    @property
    def is_root(self) -> bool:
        return self.backend.rank == 0

    def train(self) -> str:
        self.start()
        self.check_model_fits()
        self.framework.build()
        train_indices = self.manifest["train"] * self.training.dataset_repeat
        self.placement = self.place_data(train_indices)
        self.write_provenance()
        progress = self.resume()
        self.framework.distribute()
        check_compression(self.backend, self.training.compression)
        self.measure_collectives()
        self.framework.prepare_data(train_indices, self.eval_shards(), self.placement)
        passes = self.backend.backward_passes_per_step
        batches = accumulation.epoch_batches(self.training, len(train_indices), self.backend.replicas, passes)
        self.parts = accumulation.epoch_parts(batches, passes)
        check_profile(self.training.profile, len(self.parts))
        status = self.run_epochs(progress)
        final = self.final_evaluation(status, progress)
        self.finish(final, progress)
        return status

    def start(self) -> None:
        run = self.run
        self.framework.start(run)
        if self.backend.replicas != run.cell.gpus:
            raise LaunchMismatch(
                f"{self.backend.name} has {self.backend.replicas} replicas, the cell asks for {run.cell.gpus}"
            )
        check_batch(self.training.batch_per_gpu, len(self.manifest["train"]), self.backend.replicas)

    def check_model_fits(self) -> None:
        """Refuse, before the model is built, a width whose model and batch certainly cannot fit the
        fullest device of the cell (architecture.memory_floor_bytes: a lower bound; the free memory
        the smallest among the ranks): the user's model.width, not a failure a retry could change."""
        run, backend = self.run, self.backend
        free = self.framework.free_device_bytes()
        fewest = -float(backend.allreduce_max(np.array([-(np.inf if free is None else free)], dtype=np.float64))[0])
        shards = backend.world_size if backend.shards_parameters else 1
        itemsize = 2 if self.training.autocast_dtype else 4
        batch = self.training.batch_per_gpu
        needed = architecture.memory_floor_bytes(run.model_width, batch, run.image_size, itemsize, shards)
        if needed > fewest:
            key = "matrix.model_width" if "model_width" in dict(run.cell.axes) else "model.width"
            raise SettingRefused(
                f"{key} = {run.model_width}: the UNet's {architecture.parameter_count(run.model_width):,} parameters "
                f"and a batch of {batch} need at least {needed / 2**30:.2f} GiB on each device (weights, gradients "
                f"and Adam's moments, and the convolutions' outputs), more than the {fewest / 2**30:.2f} GiB free "
                "on the fullest device of the cell: use a smaller width or batch"
            )

    def shard(self, indices: list[int]) -> list[int]:
        """This process's share of evaluation samples: every world_size-th, none dropped or repeated."""
        return indices[self.backend.rank :: self.backend.world_size]

    def eval_shards(self) -> list[list[int]]:
        """The samples this process evaluates: its validation shard (where training validates) and test shard."""
        val = [self.shard(self.manifest["val"])] if self.training.eval_every else []
        return [*val, self.shard(self.manifest["test"])]

    def place_data(self, train_indices: list[int]) -> placement.DataPlacement:
        """training.loader.placement for every rank alike: with auto, from the largest need and the
        smallest free memory among the ranks; device that cannot fit is refused before any step."""
        loader, framework = self.training.loader, self.framework
        figures = [0.0, 0.0, 0.0]
        if loader.placement != "host":
            needed = framework.input_bytes(train_indices, self.eval_shards())
            figures = placement.local_figures(needed, framework.free_device_bytes())
        reduced = self.backend.allreduce_max(np.array(figures, dtype=np.float64)).tolist()
        decided = placement.decide(loader.placement, reduced, loader.device_memory_share, self.backend.device_type)
        if self.is_root:
            print(f"data placement: {decided.kind} ({decided.reason})", flush=True)
        return decided

    def write_provenance(self) -> None:
        run, process = self.run, self.framework.process
        record = provenance.start_record(dataclasses.asdict(run.cell), self.config_hash)
        record.update(self.framework.describe())
        record.update(
            world_size=self.backend.replicas,
            processes=self.backend.world_size,
            ranks_per_node=self.backend.local_world_size,
            threads_per_rank=process.threads,
            gpu_required=process.gpu_required,
            shared_gpu=process.share_gpu,
            data_key=Path(run.data_dir).name,  # the prepared arrays' folder is named by their settings
            model_width=run.model_width,  # the UNet's channel multiplier (parameters, gradient_bytes: describe)
            collective_timeout_s=self.training.collective_timeout_s,
            network_interface=run.network_interface,  # cluster.network_interface
            precision=self.training.precision,
            data_placement=self.placement.kind,
            data_device_bytes=self.placement.device_bytes,
            data_placement_reason=self.placement.reason,
        )
        record["versions"] = {**record.get("versions", {}), **self.backend.versions()}
        record["settings"] = run.source
        record["training"] = provenance.training_record(
            self.training,
            framework=self.framework.name,
            device_type=self.backend.device_type,
            replicas=self.backend.replicas,
            threads=process.threads,
            deterministic=record["deterministic"],
            passes=self.backend.backward_passes_per_step,
            compression=self.backend.gradient_compression,
            backend_options=self.backend.options(),
        )
        hosts = self.hosts = self.backend.allgather_text(provenance.host_name())
        devices = self.backend.allgather_text(self.framework.device_name())
        record.update(provenance.rank_layout(hosts, devices, run.image_size, architecture.channels(run.model_width)))
        record.update(binding.fields(self.backend.allgather_text))  # each rank's cores, a local cell's GPU ids
        if self.is_root:  # the node's driver, GPUs, topology, network, NCCL and the ranks' variables
            record.update(site.fields())
        precision = flops.precision_key(self.training.autocast_dtype, bool(record["tf32"]))
        record.update(flops.peak_fields(devices[0], self.backend.device_type == "gpu", precision, run.peak_tflops))
        self.provenance = record
        if self.is_root:
            store.write_run(self.out / "run.json", record)

    def measure_collectives(self) -> None:
        """The backend's own collectives on this cell's ranks, before the first epoch and off its
        clock (train/collectives.py): rank 0 writes collectives.csv and run.json the summary."""
        backend, started = self.backend, time.perf_counter()
        if backend.replicas < 2:
            result = collectives.Result(reason="one replica: nothing to exchange")
        else:
            try:
                bench = backend.collective_bench()
            except Exception as error:  # the cell trains on; every rank learns of it in measure()
                bench = f"failed: {type(error).__name__}: {error}"
            gradient_bytes = self.provenance["gradient_bytes"]
            settings = self.training.collectives
            result = collectives.measure(
                bench, settings, backend.replicas, backend.rank, gradient_bytes, backend.allreduce_max
            )
            if self.is_root:
                collectives.write_table(result.rows, self.out / collective_table.TABLE)
        self.provenance.update(collectives.run_fields(result, backend.replicas))
        if self.is_root:
            store.write_run(self.out / "run.json", self.provenance)
            print(f"collectives: {collectives.describe(result)}", flush=True)
        self.collectives_s = time.perf_counter() - started

    def resume(self) -> Progress:
        """Rank 0 loads the checkpoint, if any, and tells the others its epoch; they load the same
        one or the cell fails at once with their reasons (resume.py)."""
        if not self.training.checkpoint_every:
            return Progress()
        backend = self.backend
        folder = faults.checkpoint_folder(backend.rank, self.out)
        state = self.framework.restore(folder, self.config_hash) if self.is_root else None
        mine = resume.epoch_of(state) if self.is_root else 0
        epoch = int(backend.allreduce_max(np.array([mine], dtype=np.float64))[0])
        problem = ""
        if epoch and not self.is_root:
            state = self.framework.restore(folder, self.config_hash)
            problem = resume.problem(state, epoch, folder)
        resume.check_agreement(epoch, backend.allgather_text(problem))
        progress = Progress.from_state(state)
        if state is not None:
            print(f"resuming from checkpoint after epoch {progress.start_epoch}", flush=True)
        return progress

    def run_epochs(self, progress: Progress) -> str:
        self.setup_s = time.perf_counter() - self.started - self.collectives_s
        # TensorBoard's writer is instrumentation: opened after setup_s, written between epochs
        curves = (
            summaries.start(self.out, self.training.tensorboard, self.framework.summary_writer)
            if self.is_root
            else None
        )
        self.metrics = metrics.MetricsWriter(
            self.out / "metrics.jsonl", enabled=self.is_root, previous=progress.records, curves=curves
        )
        self.start_energy_meter()
        self.profile = profiling.Window(self.training.profile, self.out, self.framework, self.backend)
        self.epoch_times = [record["epoch_time_s"] for record in progress.records]
        self.stopped_at_target = False
        self.steps_observed = False  # the first step's observation checked (check_first_step)
        try:
            for epoch in range(progress.start_epoch, self.training.epochs):
                record = self.train_epoch(epoch, progress)
                if epoch == progress.start_epoch:
                    self.write_observed()
                if self.evaluates_after(epoch):
                    record["val_loss"], record["val_iou"] = self.evaluate(self.manifest["val"])
                self.metrics.write(record)
                self.report(record, epoch)
                if self.reached_target(record):  # every rank has the reduced IOU, so all stop together
                    self.stopped_at_target = True
                    print(f"validation IOU reached {self.training.target_iou:g}: training stops", flush=True)
                    break
                if self.checkpoints_after(epoch):
                    self.framework.sync_buffers()  # the checkpoint holds rank 0's statistics
                    self.framework.save_checkpoint(
                        self.out, self.config_hash, progress.state(epoch + 1, self.metrics.records), epoch + 1
                    )
        except Diverged as error:
            print(f"diverged: {error}", flush=True)
            return "diverged"
        except self.framework.out_of_memory as error:
            outcome.mark(self.out, self.backend.rank, self.out_of_memory_reason(error))
            raise outcome.CellOutOfMemory(str(error)) from error
        finally:
            self.metrics.close_curves()
        return "ok"

    def out_of_memory_reason(self, error: BaseException) -> str:
        """What ran out: the framework's words (what it was allocating), the device and its memory,
        and the cell's batch and image size, so the reason alone says what to change."""
        backend, (height, width) = self.backend, self.run.image_size
        total = devices.memory_total_mb(backend.device_type, backend.local_rank)
        memory = f"{total:.0f} MB" if total is not None else "memory unknown"
        return (
            f"{type(error).__name__}: {str(error).strip()} [device {self.framework.device_name()} with {memory}; "
            f"batch_per_gpu {self.training.batch_per_gpu}, images {height}x{width}, "
            f"precision {self.training.precision}]"
        )

    def start_energy_meter(self) -> None:
        """This rank's energy meter (energy.py): NVML on its own GPUs, RAPL on a node's first CPU rank."""
        backend = self.backend
        self.energy = energy.meter_for(
            backend.device_type, self.framework.gpu_indices, self.framework.process.share_gpu
        )
        self.measures_energy = energy.measures_node(backend.device_type, backend.local_rank)
        self.energy_reason = self.energy.reason

    def check_first_step(self, lr: float, epoch: int) -> None:
        """After the run's first step: what the framework did, against what the cell asked; a
        mismatch ends the cell refused, naming both (observed.py). Reads no device, except
        TensorFlow's rate variable, once in the run."""
        steps = self.framework.observed_steps()
        problems = observed.step_problems(self.training, steps)
        problems.append(observed.lr_problem(self.framework.optimizer_lr(), lr, epoch + 1, "after the first step"))
        observed.check(problems)
        self.provenance.update(observed.run_fields(steps))
        self.steps_observed = True

    def write_observed(self) -> None:
        """run.json with what the first step observed, after the first epoch's clock (rank 0)."""
        if self.is_root:
            store.write_run(self.out / "run.json", self.provenance)

    def train_epoch(self, epoch: int, progress: Progress) -> dict:
        framework, backend = self.framework, self.backend
        lr = learning_rate(epoch, self.training, backend.replicas)
        epoch_data = framework.epoch_batches(epoch, faults.learning_rate(lr, epoch))
        faults.check(backend.rank, epoch, progress.start_epoch > 0, framework.out_of_memory_error)
        loader_delay = faults.delays(backend.rank, epoch).loader_s
        if loader_delay:
            epoch_data = faults.delayed(epoch_data, loader_delay)
        self.profile.start(epoch)
        framework.reset_peak_memory()
        framework.synchronize()
        self.energy.start()  # after the synchronisation, before the clock: off the epoch's time
        started = time.perf_counter()
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
            framework.train_step(batch, self.parts[seen])  # the last batch of a step reduces and steps
            seen += 1
            if not self.steps_observed:
                self.check_first_step(lr, epoch)
            self.profile.after_step(seen)
        self.profile.stop()  # a window longer than the epoch (config checks refuse it where they can)
        if seen != len(self.parts):  # a step left half-accumulated would silently drop its batches
            raise RuntimeError(f"the epoch had {seen} batches, {len(self.parts)} expected")
        loss_sum, steps = framework.epoch_loss()
        framework.synchronize()
        elapsed = time.perf_counter() - started
        joules, reason = self.energy.stop()
        held_lr = framework.optimizer_lr()  # after the epoch's steps, off the clock
        observed.check([observed.lr_problem(held_lr, lr, epoch + 1, "after the epoch's steps")])
        sums = [loss_sum, steps, *energy.contribution(joules, self.measures_energy)]  # one reduction for both
        loss_total, step_total, *energy_sums = backend.allreduce_sum(np.array(sums, dtype=np.float64)).tolist()
        energy_j, self.energy_reason = energy.total(energy_sums, reason)
        slowest = backend.allreduce_max(np.array([elapsed, wait, framework.peak_memory_mb()], dtype=np.float64))
        mean_loss = loss_total / max(step_total, 1)
        progress.train_time_s += float(slowest[0])
        self.epoch_times.append(float(slowest[0]))
        record = metrics.epoch_record(
            epoch + 1,
            mean_loss,
            (held_lr, lr),
            slowest.tolist(),
            step_total,
            self.training.batch_per_gpu,
            progress.train_time_s,
            self.provenance,
            sum(part.last for part in self.parts),
            energy_j,
            resumed=progress.start_epoch > 0 and epoch == progress.start_epoch,
        )
        record.update(self.step_split(elapsed, wait))
        record.update(self.profile.fields(epoch))
        if metrics.diverged(mean_loss, self.training.max_loss):
            self.metrics.write(record)
            raise Diverged(f"loss is {mean_loss} in epoch {epoch + 1} (max_loss {self.training.max_loss})")
        return record

    def step_split(self, elapsed: float, wait: float) -> dict:
        """The epoch record's split fields (step_timing.py): this rank's figures from its framework's
        marks, every rank's gathered by one collective."""
        steps = self.framework.step_times()
        if steps is None:
            return step_timing.unmeasured("training.step_split is off")
        backend = self.backend
        row = step_timing.rank_row(elapsed, wait, steps)
        table = backend.allreduce_sum(step_timing.placed(row, backend.rank, backend.world_size))
        fields = step_timing.epoch_fields(table, self.hosts, steps.comm_reason)
        if self.is_root:
            for problem in filter(None, map(step_timing.rest_problem, fields["ranks"])):
                print(f"warning: step split: {problem}", flush=True)
        return fields

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
        every world_size-th sample (none dropped or repeated), and the sums are reduced across processes."""
        self.framework.sync_buffers()
        sums = self.backend.allreduce_sum(self.framework.evaluate(self.shard(indices)))
        loss, pixels, intersection, union = sums.tolist()
        return loss / max(pixels, 1), (intersection / union if union else 1.0)

    def report(self, record: dict, epoch: int) -> None:
        if not self.is_root:
            return
        steady = measures.steady_median(self.epoch_times)
        print(
            metrics.progress_line(record, self.training.epochs, steady * (self.training.epochs - epoch - 1)), flush=True
        )

    def final_evaluation(self, status: str, progress: Progress) -> dict:
        final = records.final_record(
            status, self.setup_s, progress.train_time_s, len(self.epoch_times), self.stopped_at_target
        )
        final.update(self.cost(progress))
        if status != "ok":
            return final
        self.framework.synchronize()
        started = time.perf_counter()
        final["test_loss"], final["iou"] = self.evaluate(self.manifest["test"])
        self.framework.synchronize()
        elapsed = np.array([time.perf_counter() - started], dtype=np.float64)
        final["test_time_s"] = float(self.backend.allreduce_max(elapsed)[0])
        if self.is_root and self.training.predictions:
            folder = self.out / "predictions"
            folder.mkdir(exist_ok=True)
            self.framework.save_predictions(self.manifest["test"][: self.training.predictions], folder)
        return final

    def cost(self, progress: Progress) -> dict:
        """GPU-hours and energy of the epochs (a resumed run's earlier epochs included)."""
        epochs = [record for record in self.metrics.records if record["type"] == "epoch"]
        joules, reason = measures.cell_energy([record.get("energy_j") for record in epochs], self.energy_reason)
        return {
            "gpu_hours": measures.gpu_hours(self.backend.replicas, progress.train_time_s),
            "energy_j": joules,
            "energy_source": self.energy.source or None,
            "energy_reason": reason,
        }

    def finish(self, final: dict, progress: Progress) -> None:
        self.metrics.write(final)
        if self.is_root:
            site.update_libraries(self.provenance)  # NCCL as loaded by now: some load it at their first reduction
            if self.steps_observed:  # the whole run's compiles (recompiles come after the first step)
                self.provenance.update(observed.run_fields(self.framework.observed_steps()))
            provenance.finish(self.out / "run.json", self.provenance, final, progress.start_epoch)
            self.framework.remove_checkpoint(self.out)
