"""The TensorFlow training contract, shared by the native (tf.distribute) and Horovod backends.

The same contract as torch_training.py: same arrays, split and sample order,
same UNet, loss (binary cross-entropy on logits, mean), Adam (eps 1e-8),
learning-rate rule, timing, evaluation, checkpoints and records. A backend
(tf_native.py, tf_horovod.py) only starts the workers, places variables and
reduces gradients and metrics, so a difference between backends in a figure
can only come from the reduction itself.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from . import tf_environment  # noqa: F401  (sets TensorFlow's environment before it is imported)

# isort: split

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

from . import records, tf_data, tf_runtime  # noqa: E402
from .preprocess import load_arrays  # noqa: E402
from .schedule import learning_rate  # noqa: E402
from .tf_model import build_unet, parameter_count  # noqa: E402


class Backend(Protocol):
    """What a TensorFlow backend module provides (see tf_native.py).

    rank/world_size count processes (as in PyTorch); replicas counts the
    replicas that train in sync (one per process, except MirroredStrategy),
    and replica_ids are the global ids of this process's replicas.
    """

    name: str
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    replicas: int
    replica_ids: list[int]
    device_type: str
    gradient_scale: float  # 1/replicas where the optimizer sums gradients, 1 where the tape averages
    checkpoint_on_all_ranks: bool  # writing distributed variables is a collective: all ranks take part

    def setup(self, training: dict, cell_ranks: int, threads: int) -> None: ...
    def scope(self) -> AbstractContextManager: ...
    def run(self, fn, per_replica_args: list[tuple]) -> list: ...
    def run_local(self, fn, args: tuple): ...
    def wrap_tape(self, tape: tf.GradientTape): ...
    def after_first_step(self, model: keras.Model, optimizer) -> None: ...
    def broadcast_from_root(self, variables: list) -> None: ...
    def allreduce_sum(self, values: np.ndarray) -> np.ndarray: ...
    def allreduce_max(self, values: np.ndarray) -> np.ndarray: ...
    def allgather_text(self, text: str) -> list[str]: ...
    def versions(self) -> dict: ...
    def shutdown(self) -> None: ...


class Diverged(Exception):
    """The loss stopped being finite."""


def amp_policy(training: dict, device_type: str) -> str | None:
    """The Keras mixed-precision policy for training.precision/amp_dtype (None for fp32)."""
    if training["precision"] != "amp":
        return None
    if training["amp_dtype"] == "float16" and device_type == "cpu":
        raise ValueError("training.amp_dtype: float16 autocast needs a GPU; use bfloat16 on CPU")
    return {"bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}[training["amp_dtype"]]


def check_fault_injection(rank: int, epoch: int, step: int) -> None:
    """Test hook: SCALEBENCH_FAULT=oom:RANK:EPOCH raises TensorFlow's out-of-memory error there."""
    fault = os.environ.get("SCALEBENCH_FAULT", "")
    if fault.startswith("oom:") and step == 0:
        _, fault_rank, fault_epoch = fault.split(":")
        if int(fault_rank) == rank and int(fault_epoch) == epoch + 1:
            raise tf.errors.ResourceExhaustedError(
                None, None, "OOM when allocating tensor (injected by SCALEBENCH_FAULT)"
            )


def bce_sum_terms(logits: tf.Tensor, masks: tf.Tensor) -> tf.Tensor:
    """Per-pixel binary cross-entropy on logits, in float32 whatever the compute precision."""
    return tf.nn.sigmoid_cross_entropy_with_logits(labels=masks, logits=tf.cast(logits, tf.float32))


class Checkpoint:
    """Atomic, rank-0-written tf.train checkpoints keyed by the config hash.

    The checkpoint folder holds one `ckpt-EPOCH` and TensorFlow's `checkpoint`
    state file, which names it and is replaced atomically after the data is
    written, so an interrupted save leaves the previous checkpoint in force.
    Python/NumPy RNG states, the epoch records and the config hash travel in a
    string variable next to model, optimizer and TensorFlow's generator.
    """

    META_KEY = "meta/.ATTRIBUTES/VARIABLE_VALUE"

    def __init__(self, directory: Path, config_hash: str, objects: dict, enabled: bool, participates: bool):
        self.directory = directory / "checkpoint"
        self.config_hash = config_hash
        self.objects = objects
        self.enabled = enabled  # writes the real checkpoint (rank 0)
        self.participates = participates  # takes part in the save (all ranks where saving is a collective)
        # Built at the first save and reused: building them walks the whole object graph (0.4 s per epoch).
        self._meta: tf.Variable | None = None
        self._checkpoint: tf.train.Checkpoint | None = None
        self._manager: tf.train.CheckpointManager | None = None

    def save(self, meta: dict, epoch: int) -> None:
        if not (self.enabled or self.participates):
            return
        if self._meta is None:
            self._meta = tf.Variable("", trainable=False)
            self._checkpoint = tf.train.Checkpoint(meta=self._meta, **self.objects)
            if self.enabled:
                self._manager = tf.train.CheckpointManager(
                    self._checkpoint, self.directory, max_to_keep=1, checkpoint_name="ckpt"
                )
        self._meta.assign(json.dumps({**meta, "config_hash": self.config_hash}))
        if self._manager is not None:
            self._manager.save(checkpoint_number=epoch)
            return
        scratch = Path(tempfile.mkdtemp(prefix="scalebench-ckpt-"))  # a participant's copy is thrown away
        try:
            self._checkpoint.write(str(scratch / "ckpt"))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def load(self) -> dict | None:
        """Restore `objects` and return the stored meta, or None (with a warning if one was unusable)."""
        path = tf.train.latest_checkpoint(str(self.directory)) if self.directory.exists() else None
        if path is None:
            if self.directory.exists() and any(self.directory.iterdir()):
                records.ignore_unreadable_checkpoint(self.directory, "no complete checkpoint")
            return None
        try:  # read every tensor first: a truncated file fails here, before any variable changes
            reader = tf.train.load_checkpoint(path)
            for key in reader.get_variable_to_shape_map():
                reader.get_tensor(key)
            meta = json.loads(reader.get_tensor(self.META_KEY))
        except Exception as error:  # corrupt or not ours
            records.ignore_unreadable_checkpoint(path, error)
            return None
        if not records.checkpoint_matches(path, meta.get("config_hash"), self.config_hash):
            return None
        tf.train.Checkpoint(**self.objects).restore(path).assert_existing_objects_matched()
        return meta

    def remove(self) -> None:
        if self.enabled:
            shutil.rmtree(self.directory, ignore_errors=True)


def rng_state() -> dict:
    kind, keys, position, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    return {
        "numpy": [kind, keys.tolist(), position, has_gauss, cached],
        "python": [version, list(internal), gauss],
    }


def set_rng_state(state: dict) -> None:
    kind, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


class Steps:
    """The tf.function steps both backends use: train, evaluate, predict."""

    def __init__(self, model: keras.Model, optimizer, backend: Backend, loss_scaled: bool, image_size):
        self.model, self.optimizer, self.backend = model, optimizer, backend
        variables = model.trainable_variables

        def replica_train(images, masks):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(bce_sum_terms(model(images, training=True), masks))
                scaled = loss * backend.gradient_scale
                if loss_scaled:
                    scaled = optimizer.get_scaled_loss(scaled)
            gradients = backend.wrap_tape(tape).gradient(scaled, variables)
            if loss_scaled:
                gradients = optimizer.get_unscaled_gradients(gradients)
            optimizer.apply_gradients(zip(gradients, variables))
            return loss

        def replica_eval(images, masks):
            logits = tf.cast(model(images, training=False), tf.float32)
            predicted, truth = logits > 0, masks > 0.5
            count = lambda t: tf.reduce_sum(tf.cast(t, tf.float64))  # noqa: E731
            return tf.stack(
                [
                    tf.reduce_sum(tf.cast(bce_sum_terms(logits, masks), tf.float64)),
                    tf.cast(tf.size(masks), tf.float64),
                    count(predicted & truth),
                    count(predicted | truth),
                ]
            )

        def train(batches):
            return backend.run(replica_train, batches)

        def evaluate(images, masks):
            return backend.run_local(replica_eval, (images, masks))

        def predict(images):
            return backend.run_local(lambda x: tf.cast(model(x, training=False), tf.float32), (images,))

        spec = tf.TensorSpec([None, *image_size, 1], tf.float32)
        self.train = tf.function(train)
        self.eval = tf.function(evaluate, input_signature=[spec, spec])
        self.predict = tf.function(predict, input_signature=[spec])


def evaluate(steps: Steps, backend: Backend, data_dir: str, test: list[int], batch: int, threads: int):
    """Test loss and IOU over the whole test set: each process takes every world_size-th
    sample (none dropped or repeated), sums are reduced across processes."""
    shard = test[backend.rank :: backend.world_size]
    sums = np.zeros(4, dtype=np.float64)  # loss, pixels, intersection, union
    for images, masks in tf_data.eval_dataset(data_dir, shard, batch, threads):
        sums += steps.eval(images, masks).numpy()
    loss, pixels, intersection, union = backend.allreduce_sum(sums).tolist()
    return loss / max(pixels, 1), (intersection / union if union else 1.0)


def save_predictions(steps: Steps, data_dir: str, test: list[int], count: int, out_dir: Path) -> None:
    from PIL import Image

    folder = out_dir / "predictions"
    folder.mkdir(exist_ok=True)
    images, _, _ = load_arrays(data_dir)
    for index in test[:count]:
        image = np.asarray(images[index : index + 1], dtype=np.float32)[..., None] / np.float32(255.0)
        logits = steps.predict(tf.constant(image)).numpy()
        Image.fromarray((logits[0, :, :, 0] > 0).astype(np.uint8) * 255).save(folder / f"test_{index:05d}.png")


def run(backend: Backend, settings: dict, data_dir: str, out_dir: str, config_hash: str, clock: records.Clock) -> str:
    """Train one cell; returns its status. Raises on failures that should fail the job."""
    training, cell = settings["training"], settings["cell"]
    out = Path(out_dir)
    threads = training["threads_per_rank"] or int(os.environ.get("SLURM_CPUS_PER_TASK", 1))
    # Checks the launcher against the cell, sets threads and devices, then builds the strategy.
    backend.setup(training, cell["gpus"], threads)
    is_root = backend.rank == 0
    replicas = backend.replicas
    policy = amp_policy(training, backend.device_type)
    tf_runtime.set_determinism(cell["seed"])

    _, _, manifest = load_arrays(data_dir)
    train_idx = manifest["train"] * training["dataset_repeat"]
    batch = training["batch_per_gpu"]
    shard = len(manifest["train"]) // replicas
    if batch > shard:
        raise ValueError(
            f"training.batch_per_gpu = {batch} is larger than the shard of the training set "
            f"({len(manifest['train'])} pairs / {replicas} ranks = {shard})"
        )
    image_size = tuple(int(s) for s in np.load(Path(data_dir) / "images.npy", mmap_mode="r").shape[1:])

    if policy:
        keras.mixed_precision.set_global_policy(policy)
    with backend.scope():
        model = build_unet(image_size, batch_norm=training["batch_norm"])
        optimizer = keras.optimizers.Adam(learning_rate=learning_rate(0, training, replicas), epsilon=1e-8)
        loss_scaled = policy == "mixed_float16"
        if loss_scaled:
            optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
        optimizer.build(model.trainable_variables)  # slots exist before a checkpoint is restored into them

    provenance = records.base_provenance(cell, config_hash)
    provenance.update(
        parameters=parameter_count(model),
        world_size=replicas,
        processes=backend.world_size,
        ranks_per_node=backend.local_world_size,
        threads_per_rank=threads,
        device=backend.device_type,
        precision=training["precision"] if not policy else f"amp-{training['amp_dtype']}",
        layout="channels_last",
        versions={**tf_runtime.versions(), **backend.versions()},
    )
    hosts = backend.allgather_text(records.host_name())
    devices = backend.allgather_text(tf_runtime.device_name(backend.device_type))
    provenance.update(
        records.placement(hosts, devices, settings["dataset"]["image_size"], training, settings["peak_tflops"])
    )
    run_json = out / "run.json"
    if is_root:
        records.write_json_atomic(run_json, provenance)

    saved = {"model": model, "optimizer": optimizer, "rng": tf.random.get_global_generator()}
    every = training["checkpoint_every"]
    checkpoint = Checkpoint(
        out, config_hash, saved, enabled=is_root and every > 0, participates=backend.checkpoint_on_all_ranks
    )
    resume = checkpoint.load() if every > 0 else None
    start_epoch, previous_records, train_time = 0, [], 0.0
    if resume is not None:
        set_rng_state(resume["rng"])
        start_epoch, previous_records, train_time = resume["epoch"], resume["records"], resume["train_time_s"]
        print(f"resuming from checkpoint after epoch {start_epoch}", flush=True)

    steps = Steps(model, optimizer, backend, loss_scaled, image_size)
    buffers = model.non_trainable_variables  # batch-norm running statistics
    metrics = records.MetricsWriter(out / "metrics.jsonl", enabled=is_root, previous=previous_records)
    setup_s = clock.elapsed()
    epochs = training["epochs"]
    status = "ok"
    epoch_times: list[float] = [r["epoch_time_s"] for r in previous_records]
    first_step_done = False
    try:
        for epoch in range(start_epoch, epochs):
            lr = learning_rate(epoch, training, replicas)
            optimizer.learning_rate = lr
            dataset = tf_data.train_dataset(
                data_dir, train_idx, backend.replica_ids, replicas, batch, cell["seed"], epoch, threads
            )
            loss_sum = tf.zeros((), dtype=tf.float64)
            step_count, wait = 0, 0.0
            tf_runtime.reset_peak_memory(backend.device_type)
            tf_runtime.synchronize()
            started = time.perf_counter()
            batches = iter(dataset)
            while True:
                waited = time.perf_counter()
                item = next(batches, None)
                wait += time.perf_counter() - waited
                if item is None:
                    break
                check_fault_injection(backend.rank, epoch, step_count)
                losses = steps.train(item)
                if not first_step_done:
                    backend.after_first_step(model, optimizer)
                    first_step_done = True
                loss_sum += tf.cast(tf.add_n(losses), tf.float64)
                step_count += len(losses)
            loss_total = loss_sum.numpy()  # waits for the last step: the clock below is honest
            tf_runtime.synchronize()
            elapsed = time.perf_counter() - started
            reduced = backend.allreduce_sum(np.array([loss_total, step_count], dtype=np.float64))
            slowest = backend.allreduce_max(
                np.array([elapsed, wait, tf_runtime.peak_memory_mb(backend.device_type)], dtype=np.float64)
            ).tolist()
            mean_loss = reduced[0] / max(reduced[1], 1)
            train_time += slowest[0]
            epoch_times.append(slowest[0])
            record = records.epoch_record(epoch + 1, mean_loss, lr, slowest, reduced[1], batch, train_time, provenance)
            if records.diverged(mean_loss, training):
                metrics.write(record)
                raise Diverged(f"loss is {mean_loss} in epoch {epoch + 1} (max_loss {training['max_loss']})")
            if training["eval_every"] and (epoch + 1) % training["eval_every"] == 0:
                backend.broadcast_from_root(buffers)
                record["test_loss"], record["test_iou"] = evaluate(
                    steps, backend, data_dir, manifest["test"], batch, threads
                )
            metrics.write(record)
            steady = np.median(epoch_times[1:]) if len(epoch_times) > 1 else epoch_times[0]
            if is_root:
                print(records.progress_line(record, epochs, steady * (epochs - epoch - 1)), flush=True)
            if every and (epoch + 1) % every == 0 and epoch + 1 < epochs:
                backend.broadcast_from_root(buffers)  # the checkpoint holds rank 0's statistics, as in PyTorch
                meta = {"epoch": epoch + 1, "records": metrics.records, "train_time_s": train_time, "rng": rng_state()}
                checkpoint.save(meta, epoch + 1)
    except Diverged as error:
        status = "diverged"
        print(f"diverged: {error}", flush=True)
    except tf.errors.ResourceExhaustedError as error:
        status = "oom"
        print(f"out of memory: {error.message}", flush=True)

    final = records.final_record(status, setup_s, train_time, len(epoch_times))
    if status == "ok":
        backend.broadcast_from_root(buffers)
        tf_runtime.synchronize()
        started = time.perf_counter()
        final["test_loss"], final["iou"] = evaluate(steps, backend, data_dir, manifest["test"], batch, threads)
        tf_runtime.synchronize()
        final["test_time_s"] = float(backend.allreduce_max(np.array([time.perf_counter() - started]))[0])
        if is_root and training["predictions"]:
            save_predictions(steps, data_dir, manifest["test"], training["predictions"], out)
    metrics.write(final)
    if is_root:
        records.finish(run_json, provenance, final, start_epoch)
        checkpoint.remove()
    return status
