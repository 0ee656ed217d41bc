"""TensorFlow's side of the training contract (train/interfaces.py): model, data, steps, checkpoints.

The same contract as the PyTorch side: same arrays, split and sample order
(data.py reproduces DistributedSampler's), same UNet, loss (binary
cross-entropy on logits, mean), Adam (eps 1e-8). The backend (native.py:
tf.distribute, horovod.py) joins the workers, places variables and reduces;
loop.py does the timing, records, evaluation cadence and checkpoint cadence.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf
import tf_keras as keras

from scalebench import architecture, backends
from scalebench.data.preprocess import load_arrays
from scalebench.settings import ProcessFacts, RunSettings
from scalebench.train import accumulation, devices, faults, placement, resume
from scalebench.train.accumulation import Part
from scalebench.train.interfaces import Backend
from scalebench.train.placement import DataPlacement
from scalebench.train.profiling import NotTraced
from scalebench.train.step_timing import StepTimes
from scalebench.train.summaries import EpochWriter
from scalebench.train.tf import checkpoint, compiled, data, profiler, runtime, step_timing
from scalebench.train.tf.checkpoint import Checkpoint
from scalebench.train.tf.model import build_unet, gradient_bytes, parameter_count
from scalebench.train.tf.summaries import TensorFlowEpochWriter


def bce_terms(logits: tf.Tensor, masks: tf.Tensor) -> tf.Tensor:
    """Per-pixel binary cross-entropy on logits, in float32 whatever the compute precision."""
    return tf.nn.sigmoid_cross_entropy_with_logits(labels=masks, logits=tf.cast(logits, tf.float32))


class Steps:
    """The tf.function steps: train (one per local replica), evaluate and predict.

    With a backend that accumulates (backward_passes_per_step > 1), train is split in two:
    accumulate adds each batch's gradients to a sum held in variables, and apply reduces
    their mean across ranks and steps the optimizer, once per optimizer step.

    With the step split (`split`), each train function also returns its replicas' marks
    (step_timing.py: the timestamps a, b, c, d); `delays` holds the test faults' seconds
    (faults.py), whose sleeps the functions get only where SCALEBENCH_FAULT names them.

    The replica_* methods are what one replica runs (inside the backend's run_replicas); the
    tf.function attributes built from them are what the framework calls. Their Python runs only
    while TensorFlow traces them.
    """

    def __init__(
        self,
        model: keras.Model,
        optimizer,
        backend: Backend,
        loss_scaled: bool,
        image_size,
        compile_steps: bool,
        split: bool = False,
        gpu: bool = False,
        delays: dict[str, tf.Variable] | None = None,
    ):
        self.model, self.optimizer, self.backend = model, optimizer, backend
        self.variables = model.trainable_variables
        self.loss_scaled, self.image_size = loss_scaled, image_size
        self.split, self.gpu = split, gpu
        self.delays = delays or {}
        # per trace of the replica's training step: its output's dtype, and whether it was traced
        # for XLA (observed.py)
        self.traced_dtypes: list[str] = []
        self.traced_for_xla: list[bool] = []
        self.loss_and_gradients = self.replica_loss_and_gradients
        if compile_steps:  # XLA compiles the replica's own work; the reduction stays outside
            self.loss_and_gradients = compiled.step_function(self.replica_loss_and_gradients)
        self.accumulates = backend.backward_passes_per_step > 1
        if self.accumulates:
            self.build_accumulation()
        samples = tf.TensorSpec([None, *image_size], tf.uint8)  # uint8 images or masks
        self.train = tf.function(self.run_train)
        self.eval = tf.function(self.run_eval, input_signature=[samples, samples])
        # device placement: (stored images, stored masks, rows) gathered in the step
        words = tf.TensorSpec([None, image_size[0] * image_size[1] // 4], tf.float32)  # data.as_words
        self.eval_gathered = tf.function(self.run_eval, input_signature=[words, words, tf.TensorSpec([None], tf.int64)])
        self.predict = tf.function(self.run_predict, input_signature=[samples])

    # --- one replica's training step

    def inputs(self, *batch):
        """The batch gathered and converted here, on the replica's device."""
        return data.model_inputs(*batch, image_size=self.image_size)

    def replica_loss_and_gradients(self, *batch):
        images, masks = self.inputs(*batch)
        with tf.GradientTape() as tape:
            logits = self.model(images, training=True)
            loss = tf.reduce_mean(bce_terms(logits, masks))
            scaled = self.optimizer.get_scaled_loss(loss) if self.loss_scaled else loss
        self.traced_dtypes.append(logits.dtype.name)
        self.traced_for_xla.append(compiled.in_xla_context())
        return loss, tape.gradient(scaled, self.variables)

    def delayed(self, name: str, gradients):
        """`gradients` once the test fault `name` has slept (faults.py), where it is injected."""
        if name not in self.delays:
            return gradients
        return step_timing.after([step_timing.sleep(self.delays[name], gradients)], gradients)

    def reduce_and_apply(self, gradients):
        """The reduced gradients applied; returns them and the updated variables (for the marks).
        slow_comm sleeps first: after the mark that the gradients are computed, on every rank."""
        gradients = self.delayed("comm", gradients)
        reduced = gradients = self.backend.reduce_gradients(gradients)
        if self.loss_scaled:
            gradients = self.optimizer.get_unscaled_gradients(gradients)
        # the backend has averaged the gradients over the replicas already
        self.optimizer.apply_gradients(zip(gradients, self.variables), skip_gradients_aggregation=True)
        return reduced, [v.read_value() for v in self.variables] if self.split else []

    def start(self, batch):
        """The mark a, and the batch made to wait for it (and for a straggler's delay)."""
        split, delays = self.split, self.delays
        if not split and "compute" not in delays:
            return None, batch
        started = step_timing.stamp(batch, self.gpu) if split else None
        marks = [started] if split else []
        if "compute" in delays:
            marks.append(step_timing.sleep(delays["compute"], [*batch, *marks]))
        return started, tuple(step_timing.after(marks, list(batch)))

    def replica_train(self, *batch):
        started, batch = self.start(batch)
        loss, gradients = self.loss_and_gradients(*batch)
        gradients = self.delayed("reduce", gradients)  # slow_reduce: before the mark, as PyTorch's hook
        computed = step_timing.stamp(gradients, self.gpu) if self.split else None
        reduced, updated = self.reduce_and_apply(gradients)
        if not self.split:
            return loss
        stamps = [started, computed, step_timing.stamp(reduced, self.gpu), step_timing.stamp(updated, self.gpu)]
        return loss, tf.stack(stamps)

    def run_train(self, batches):
        return self.backend.run_replicas(self.replica_train, batches)

    # --- gradient accumulation: accumulate each batch, apply once per optimizer step

    def build_accumulation(self) -> None:
        if len(self.backend.replica_ids) != 1:
            raise ValueError(f"backend {self.backend.name}: gradient accumulation needs one replica per process")
        # the (loss-scaled) gradient sums of the current optimizer step; zero between steps
        self.sums = [tf.Variable(tf.zeros_like(v), trainable=False, name="gradient_sum") for v in self.variables]
        self.accumulate = tf.function(lambda batches: self.backend.run_replicas(self.replica_accumulate, batches))
        self.apply = tf.function(self.apply_sums, input_signature=[tf.TensorSpec([], tf.float32)])

    def replica_accumulate(self, *batch):
        started, batch = self.start(batch)
        loss, gradients = self.loss_and_gradients(*batch)
        for total, gradient in zip(self.sums, gradients):
            total.assign_add(gradient)
        if not self.split:
            return loss
        computed = step_timing.stamp(gradients, self.gpu)
        added = step_timing.stamp([total.read_value() for total in self.sums], self.gpu)
        return loss, tf.stack([started, computed, computed, added])  # nothing reduced here

    def apply_sums(self, count):
        # the loss scale is the same for every batch of a step: it changes only in apply_gradients
        split, gpu = self.split, self.gpu
        summed = [total.read_value() for total in self.sums]
        started = step_timing.stamp(summed, gpu) if split else None
        summed = self.delayed("reduce", step_timing.after([started], summed) if split else summed)
        computed = step_timing.stamp(summed, gpu) if split else None
        reduced, updated = self.reduce_and_apply([total / count for total in summed])
        for total in self.sums:
            total.assign(tf.zeros_like(total))
        if split:
            reduced_at, updated_at = step_timing.stamp(reduced, gpu), step_timing.stamp(updated, gpu)
            return [tf.stack([started, computed, reduced_at, updated_at])]
        return []

    # --- evaluation and predictions

    def replica_eval(self, *batch):
        images, masks = self.inputs(*batch)
        logits = tf.cast(self.model(images, training=False), tf.float32)
        predicted, truth = logits > 0, masks > 0.5
        count = lambda t: tf.reduce_sum(tf.cast(t, tf.float64))  # noqa: E731
        return tf.stack(
            [
                tf.reduce_sum(tf.cast(bce_terms(logits, masks), tf.float64)),
                tf.cast(tf.size(masks), tf.float64),
                count(predicted & truth),
                count(predicted | truth),
            ]
        )

    def run_eval(self, *batch):
        return self.backend.run_replicas(self.replica_eval, [batch])[0]

    def replica_predict(self, images):
        converted, _ = self.inputs(images, images)
        return tf.cast(self.model(converted, training=False), tf.float32)

    def run_predict(self, images):
        return self.backend.run_replicas(self.replica_predict, [(images,)])[0]


class TensorFlowFramework:
    name = "tensorflow"
    out_of_memory = (tf.errors.ResourceExhaustedError,)

    def __init__(self, run: RunSettings, backend: Backend, process: ProcessFacts) -> None:
        self.run, self.backend, self.process = run, backend, process
        self.training = run.training
        self.channels = architecture.channels(run.model_width)
        self.saver: Checkpoint | None = None
        self.marks: step_timing.StepMarks | None = None  # training.step_split, once the device is known
        self.delays: dict[str, tf.Variable] = {}  # the test faults' delays the step reads (distribute)
        self.trace: profiler.Trace | None = None

    # --- before the loop

    def start(self, run: RunSettings) -> None:
        backend = self.backend
        # threads and visible devices before TensorFlow's first operation, then the backend
        replicas = backends.devices_per_process(run.cell.framework, run.cell.backend, run.cell.gpus)
        self.gpu_indices = runtime.configure(run, self.process, backend.local_rank, backend.local_processes, replicas)
        self.device_type = "cuda" if self.gpu_indices else "cpu"
        if self.training.step_split:
            self.marks = step_timing.StepMarks(self.device_type == "cuda")
        backend.device_type = self.device_type
        backend.share_gpu = self.process.share_gpu
        self.input_device = runtime.input_device(self.device_type, replicas)
        backend.setup(run)
        # each local replica's device (a MirroredStrategy process has several), where device placement puts its samples
        self.replica_devices = backend.local_devices() or ["/gpu:0" if self.device_type == "cuda" else "/cpu:0"]
        self.policy = runtime.keras_policy(self.training.autocast_dtype, self.device_type)
        if faults.precision_off():  # a test hook: the steps compute in float32, which the loop must refuse
            self.policy = None
        self.deterministic = devices.deterministic(self.training.deterministic, self.device_type == "cuda")
        if self.training.compile:
            compiled.check_available()
            compiled.check_determinism(self.deterministic)
        runtime.set_determinism(run.cell.seed, self.deterministic)

    def build(self) -> None:
        if self.policy:
            keras.mixed_precision.set_global_policy(self.policy)
        with self.backend.scope():
            self.model = build_unet(self.run.image_size, self.training.batch_norm, self.channels)
            # the loop sets the rate of each epoch before its first step
            optimizer = keras.optimizers.Adam(learning_rate=self.training.base_lr, epsilon=1e-8)
            self.loss_scaled = self.policy == "mixed_float16"
            if self.loss_scaled:
                optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
            optimizer.build(self.model.trainable_variables)  # slots exist before a restore or a broadcast
        self.optimizer = optimizer

    def describe(self) -> dict:
        return {
            "parameters": parameter_count(self.model),
            "gradient_bytes": gradient_bytes(self.model),
            "device": self.device_type,  # cuda or cpu
            "layout": "channels_last",
            "tf32": runtime.tf32_enabled(self.device_type),
            "deterministic": self.deterministic,
            "versions": runtime.versions(),
        }

    def device_model(self) -> str:
        return runtime.device_model(self.device_type)

    def restore(self, directory: Path, config_hash: str) -> dict | None:
        meta = self._checkpoint(directory, config_hash).load()
        if meta is None:
            return None
        resume.set_host_rng_state(meta["host_rng"])
        return meta["loop"]

    def distribute(self) -> None:
        self.model, self.optimizer = self.backend.distribute(self.model, self.optimizer)
        # the test faults' delays (faults.py) as variables the step reads, where SCALEBENCH_FAULT names them
        self.delays = {
            name: tf.Variable(0.0, dtype=tf.float64, trainable=False, name=f"{name}_delay")
            for name in ("reduce", "comm", "compute")
            if faults.injects(f"slow_{name}")
        }
        self.steps = Steps(
            self.model,
            self.optimizer,
            self.backend,
            self.loss_scaled,
            self.run.image_size,
            self.training.compile,
            split=self.marks is not None,
            gpu=self.device_type == "cuda",
            delays=self.delays,
        )

    def epoch_batches_of(self, train_indices: list[int]) -> int:
        """Batches each replica trains on per epoch (accumulation.batches_per_epoch)."""
        backend = self.backend
        return accumulation.epoch_batches(
            self.training, len(train_indices), backend.replicas, backend.backward_passes_per_step
        )

    def replica_samples(self, train_indices: list[int]) -> list[np.ndarray]:
        backend, training = self.backend, self.training
        samples = self.epoch_batches_of(train_indices) * training.batch_per_gpu
        return data.replica_samples(
            train_indices, backend.replica_ids, backend.replicas, self.run.cell.seed, training.epochs, samples
        )

    def input_bytes(self, train_indices: list[int], eval_shards: list[list[int]]) -> int:
        per_replica = self.replica_samples(train_indices)
        return placement.busiest_device_bytes(per_replica, eval_shards, self.run.image_size)

    def free_device_bytes(self) -> int | None:
        backend = self.backend
        if self.device_type == "cuda":
            return placement.nvml_free_bytes(self.gpu_indices)
        return placement.host_free_bytes(backend.local_processes)

    def prepare_data(self, train_indices: list[int], eval_shards: list[list[int]], where: DataPlacement) -> None:
        self.train_indices = train_indices
        self.batches = self.epoch_batches_of(train_indices)
        self.stores: list[data.DeviceSamples] = []
        self.eval_stores: dict[tuple[int, ...], data.DeviceSamples] = {}
        if where.kind == "device":
            data_dir = self.run.data_dir
            per_replica = self.replica_samples(train_indices)
            self.stores = [data.DeviceSamples(data_dir, s, d) for s, d in zip(per_replica, self.replica_devices)]
            for shard in eval_shards:
                self.eval_stores[tuple(shard)] = data.DeviceSamples(data_dir, shard, self.replica_devices[0])

    # --- an epoch

    def epoch_batches(self, epoch: int, learning_rate: float):
        delays = faults.delays(self.backend.rank, epoch, self.run.cell.path)
        for name, variable in self.delays.items():
            variable.assign(getattr(delays, f"{name}_s"))
        if self.marks is not None:
            self.marks.start_epoch()
        self.optimizer.learning_rate = learning_rate
        self.loss_sum = tf.zeros((), dtype=tf.float64)
        self.replica_steps = 0
        backend = self.backend
        # this process's replicas' shards of the epoch, in DistributedSampler's order
        shards = (
            self.train_indices,
            backend.replica_ids,
            backend.replicas,
            self.training.batch_per_gpu,
            self.batches,
            self.run.cell.seed,
            epoch,
        )
        if self.stores:
            return data.device_train_batches(self.stores, *shards)
        return data.train_dataset(self.run.data_dir, *shards, self.process.threads, self.input_device)

    def train_step(self, batch, part: Part) -> None:
        if self.marks is not None:
            self.marks.begin()
        if self.steps.accumulates:
            losses = self.marked(self.steps.accumulate(batch))
            if part.last:
                applied = self.steps.apply(tf.constant(part.count, tf.float32))
                if self.marks is not None:
                    self.marks.add(applied)
        else:  # every batch is its own step: one fused function, no gradient sums to keep
            losses = self.marked(self.steps.train(batch))
        self.loss_sum += tf.cast(tf.add_n(losses), tf.float64)
        self.replica_steps += len(losses)
        if self.marks is not None:
            self.marks.end()

    def marked(self, results: list) -> list:
        """The replicas' losses of a train function's results, keeping their marks (step split on)."""
        if self.marks is None:
            return results
        self.marks.add([stamps for _, stamps in results])
        return [loss for loss, _ in results]

    def step_times(self) -> StepTimes | None:
        return self.marks.times() if self.marks is not None else None

    def start_trace(self, folder: Path) -> None:
        if self.backend.untraced_ranks and self.backend.rank != 0:
            raise NotTraced(self.backend.untraced_ranks)
        self.trace = profiler.Trace(folder, self.backend.rank)

    def stop_trace(self) -> None:
        trace, self.trace = self.trace, None
        if trace is not None:
            trace.stop()

    def epoch_loss(self) -> tuple[float, int]:
        return float(self.loss_sum.numpy()), self.replica_steps  # numpy() waits for the last step

    def observed_steps(self) -> dict:
        dtypes = sorted(set(self.steps.traced_dtypes))  # one, unless replicas computed differently
        return {
            "compute_dtype": ",".join(dtypes) or None,
            "compiled": compiled.observed(self.steps.traced_for_xla, len(self.backend.replica_ids)),
        }

    def optimizer_lr(self) -> float:
        return float(keras.backend.get_value(self.optimizer.learning_rate))

    def synchronize(self) -> None:
        runtime.synchronize()

    def reset_peak_memory(self) -> None:
        runtime.reset_peak_memory(self.device_type)

    def peak_memory_mb(self) -> float:
        return runtime.peak_memory_mb(self.device_type)

    # --- evaluation and checkpoints

    def sync_buffers(self) -> None:
        self.backend.broadcast_from_root(self.model.non_trainable_variables)

    def evaluate(self, indices: list[int]) -> np.ndarray:
        sums = np.zeros(4, dtype=np.float64)  # loss, pixels, intersection, union
        store = self.eval_stores.get(tuple(indices))
        if store is not None:
            for batch in data.device_eval_batches(store, indices, self.training.batch_per_gpu):
                sums += self.steps.eval_gathered(*batch).numpy()
            return sums
        for images, masks in data.eval_dataset(
            self.run.data_dir, indices, self.training.batch_per_gpu, self.process.threads, self.input_device
        ):
            sums += self.steps.eval(images, masks).numpy()
        return sums

    def save_predictions(self, indices: list[int], folder: Path) -> None:
        from PIL import Image

        images, _, _ = load_arrays(self.run.data_dir)
        for index in indices:
            logits = self.steps.predict(tf.constant(np.asarray(images[index : index + 1]))).numpy()
            Image.fromarray((logits[0, :, :, 0] > 0).astype(np.uint8) * 255).save(folder / f"test_{index:05d}.png")

    def _checkpoint(self, directory: Path, config_hash: str) -> Checkpoint:
        if self.saver is None:  # one object for the run: it caches TensorFlow's manager
            objects = {"model": self.model, "optimizer": self.optimizer, "rng": tf.random.get_global_generator()}
            writes = self.backend.rank == 0
            self.saver = Checkpoint(directory, config_hash, objects, writes, self.backend.checkpoint_on_all_ranks)
        return self.saver

    def save_checkpoint(self, directory: Path, config_hash: str, state: dict, epoch: int) -> None:
        self._checkpoint(directory, config_hash).save({"loop": state, "host_rng": resume.host_rng_state()}, epoch)

    def remove_checkpoint(self, directory: Path) -> None:
        checkpoint.remove(directory)

    def summary_writer(self, folder: Path) -> EpochWriter:
        return TensorFlowEpochWriter(folder)

    def out_of_memory_error(self, message: str) -> BaseException:
        return tf.errors.ResourceExhaustedError(None, None, f"OOM: {message}")


def create(run: RunSettings, backend: Backend, process: ProcessFacts) -> TensorFlowFramework:
    return TensorFlowFramework(run, backend, process)
