"""TensorFlow's steps (train/interfaces.py Steps): the tf.function training step of each replica,
evaluation and predictions, and the rank's bookkeeping around them.

The same contract as the PyTorch side: same arrays, split and sample order (data.py reproduces
DistributedSampler's), same UNet, loss (binary cross-entropy on logits, mean), Adam (eps 1e-8).
The backend (native.py: tf.distribute, horovod.py) reduces inside the step; loop.py does the
timing, records, evaluation cadence and checkpoint cadence.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import tensorflow as tf
import tf_keras as keras

from scalebench.data.preprocess import load_arrays
from scalebench.settings import RunSettings
from scalebench.train.accumulation import Part
from scalebench.train.faults import EpochDelays
from scalebench.train.interfaces import Backend
from scalebench.train.step_timing import StepTimes
from scalebench.train.tf import compiled, data, step_timing
from scalebench.train.tf.model import Distributed
from scalebench.train.tf.runtime import Device, Numerics

# the test faults (faults.py) whose sleeps the step's graph holds, where SCALEBENCH_FAULT names them
DELAYS = ("reduce", "comm", "compute")


def graph_function(function, **options):
    """`function` as a tf.function without AutoGraph. The steps branch only on settings, never on
    a tensor, so AutoGraph's rewrite of every function they call (the UNet's layers too) would buy
    nothing and cost tracing time: about 0.8 CPU-s of a one-rank cell's 10 (docs/benchmarks.md)."""
    return tf.function(function, autograph=False, **options)


def bce_terms(logits: tf.Tensor, masks: tf.Tensor) -> tf.Tensor:
    """Per-pixel binary cross-entropy on logits, in float32 whatever the compute precision."""
    return tf.nn.sigmoid_cross_entropy_with_logits(labels=masks, logits=tf.cast(logits, tf.float32))


class StepFunctions:
    """The tf.function steps: train (one per local replica), evaluate and predict.

    With a backend that accumulates (backward_passes_per_step > 1), train is split in two:
    accumulate adds each batch's gradients to a sum held in variables, and apply reduces
    their mean across ranks and steps the optimizer, once per optimizer step.

    With the step split (`split`), each train function also returns its replicas' marks
    (step_timing.py: the timestamps a, b, c, d); `delays` holds the test faults' seconds
    (faults.py), whose sleeps the functions get only where SCALEBENCH_FAULT names them.

    The replica_* methods are what one replica runs (inside the backend's run_replicas); the
    tf.function attributes built from them are what Steps calls. Their Python runs only
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
        if self.accumulates and len(backend.replica_ids) != 1:
            raise ValueError(f"backend {backend.name}: gradient accumulation needs one replica per process")
        # with accumulation: the (loss-scaled) gradient sums of the current optimizer step, zero
        # between steps, and the two functions (accumulate, apply) that replace train
        self.sums = (
            [tf.Variable(tf.zeros_like(v), trainable=False, name="gradient_sum") for v in self.variables]
            if self.accumulates
            else []
        )
        self.accumulate = (
            graph_function(lambda batches: backend.run_replicas(self.replica_accumulate, batches))
            if self.accumulates
            else None
        )
        self.apply = (
            graph_function(self.apply_sums, input_signature=[tf.TensorSpec([], tf.float32)])
            if self.accumulates
            else None
        )
        samples = tf.TensorSpec([None, *image_size], tf.uint8)  # uint8 images or masks
        self.train = graph_function(self.run_train)
        self.eval = graph_function(self.run_eval, input_signature=[samples, samples])
        # device placement: (stored images, stored masks, rows) gathered in the step
        words = tf.TensorSpec([None, image_size[0] * image_size[1] // 4], tf.float32)  # data.as_words
        self.eval_gathered = graph_function(
            self.run_eval, input_signature=[words, words, tf.TensorSpec([None], tf.int64)]
        )
        self.predict = graph_function(self.run_predict, input_signature=[samples])

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


class Steps:
    """One rank's steps: the StepFunctions called per batch, the epoch's loss sum and replica
    batches, the marks and the test faults' delays (as variables the graph reads)."""

    def __init__(
        self,
        run: RunSettings,
        distributed: Distributed,
        device: Device,
        numerics: Numerics,
        backend: Backend,
        marks: step_timing.StepMarks | None,
        delays: EpochDelays,
    ) -> None:
        self.run, self.distributed, self.backend = run, distributed, backend
        self.marks, self.delays = marks, delays
        # the test faults' delays as variables the step reads, where SCALEBENCH_FAULT names them
        self.delay_variables = {
            name: tf.Variable(0.0, dtype=tf.float64, trainable=False, name=f"{name}_delay")
            for name in DELAYS
            if delays.plan.injects(f"slow_{name}")
        }
        self.functions = StepFunctions(
            distributed.network,
            distributed.optimizer,
            backend,
            distributed.loss_scaled,
            run.image_size,
            run.training.compile,
            split=marks is not None,
            gpu=device.type == "cuda",
            delays=self.delay_variables,
        )
        self.loss_sum = tf.zeros((), dtype=tf.float64)
        self.replica_batches = 0

    def start_epoch(self, epoch: int, learning_rate: float) -> None:
        delays = self.delays.start_epoch(epoch)
        for name, variable in self.delay_variables.items():
            variable.assign(getattr(delays, f"{name}_s"))
        if self.marks is not None:
            self.marks.start_epoch()
        self.distributed.optimizer.learning_rate = learning_rate
        self.loss_sum = tf.zeros((), dtype=tf.float64)
        self.replica_batches = 0

    def train(self, batch, part: Part) -> None:
        functions, marks = self.functions, self.marks
        if marks is not None:
            marks.begin()
        if functions.accumulates:
            losses = self.marked(functions.accumulate(batch))
            if part.last:
                applied = functions.apply(tf.constant(part.count, tf.float32))
                if marks is not None:
                    marks.add(applied)
        else:  # every batch is its own step: one fused function, no gradient sums to keep
            losses = self.marked(functions.train(batch))
        self.loss_sum += tf.cast(tf.add_n(losses), tf.float64)
        self.replica_batches += len(losses)
        if marks is not None:
            marks.end()

    def marked(self, results: list) -> list:
        """The replicas' losses of a train function's results, keeping their marks (step split on)."""
        if self.marks is None:
            return results
        self.marks.add([stamps for _, stamps in results])
        return [loss for loss, _ in results]

    def epoch_loss(self) -> tuple[float, int]:
        return float(self.loss_sum.numpy()), self.replica_batches  # numpy() waits for the last step

    def step_times(self) -> StepTimes | None:
        return self.marks.times() if self.marks is not None else None

    def observed(self) -> dict:
        dtypes = sorted(set(self.functions.traced_dtypes))  # one, unless replicas computed differently
        return {
            "compute_dtype": ",".join(dtypes) or None,
            "compiled": compiled.observed(self.functions.traced_for_xla, len(self.backend.replica_ids)),
        }

    def optimizer_lr(self) -> float:
        return float(keras.backend.get_value(self.distributed.optimizer.learning_rate))

    # --- evaluation and predictions

    def sync_buffers(self) -> None:
        self.backend.broadcast_from_root(self.distributed.network.non_trainable_variables)

    def evaluate(self, batches: Iterable) -> np.ndarray:
        """Batches of uint8 (images, masks) from the host, or (stored images, stored masks, rows)
        gathered on the device (data.py)."""
        sums = np.zeros(4, dtype=np.float64)  # loss, pixels, intersection, union
        for batch in batches:
            evaluate = self.functions.eval_gathered if len(batch) == 3 else self.functions.eval
            sums += evaluate(*batch).numpy()
        return sums

    def save_predictions(self, indices: list[int], folder: Path) -> None:
        from PIL import Image

        images, _, _ = load_arrays(self.run.data_dir)
        for index in indices:
            logits = self.functions.predict(tf.constant(np.asarray(images[index : index + 1]))).numpy()
            Image.fromarray((logits[0, :, :, 0] > 0).astype(np.uint8) * 255).save(folder / f"test_{index:05d}.png")
