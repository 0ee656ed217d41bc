"""The prepared uint8 arrays as the step's inputs, in PyTorch's sample order, in two placements.

Every replica takes its shard of the (repeated) training indices in exactly the order torch's
DistributedSampler gives rank r in an epoch (shuffled by seed + epoch, padded to a multiple of
the replicas) and `batches` full batches of it (accumulation.epoch_batches, which the loop
computes: one pass, or the shard cycled in its order for training.steps_per_epoch, as
torch/data.py's sampler): ReplicaShards, the sample order. Evaluation: process r takes
test[r::processes], nothing dropped or repeated. Batches is the input pipeline of an epoch.
The conversion to float (image / 255, the mask as 0/1, a channel axis) is model_inputs, inside
the compiled step, on the replica's device, in both placements (train/placement.py):
- device: DeviceSamples holds the samples a replica uses as uint8 tensors on its device, loaded
  once; a step's inputs are (stored images, stored masks, rows), and the step gathers its batch.
- host: tf.data gathers uint8 rows from the memory-mapped arrays and prefetches them, on a GPU
  into the device's memory (prefetch_to_device), so the copy overlaps the current step.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from scalebench.data.preprocess import load_arrays
from scalebench.settings import RunSettings
from scalebench.train.accumulation import cycled
from scalebench.train.interfaces import Backend
from scalebench.train.placement import DataPlacement
from scalebench.train.tf.runtime import Device


def torch_randperm(n: int, seed: int) -> np.ndarray:
    """torch.randperm(n, generator=torch.Generator().manual_seed(seed)) on CPU, without torch.

    PyTorch shuffles with Fisher-Yates driven by 32-bit MT19937 outputs from the
    seed; NumPy's legacy RandomState produces the same outputs from the same seed.
    """
    order = np.arange(n)
    draws = np.random.RandomState(seed & 0xFFFFFFFF).randint(0, 2**32, size=max(n - 1, 0), dtype=np.uint32)
    for i in range(n - 1):
        j = i + int(draws[i]) % (n - i)
        order[i], order[j] = order[j], order[i]
    return order


def distributed_order(n: int, replicas: int, rank: int, seed: int, epoch: int) -> list[int]:
    """Positions DistributedSampler(shuffle=True, seed=seed, drop_last=False) yields for `rank` in `epoch`."""
    per_rank = math.ceil(n / replicas)
    total = per_rank * replicas
    order = torch_randperm(n, seed + epoch).tolist()
    padding = total - n
    if padding <= n:
        order += order[:padding]
    else:
        order += (order * math.ceil(padding / n))[:padding]
    return order[rank:total:replicas]


def model_inputs(*batch: tf.Tensor, image_size: tuple[int, int]) -> tuple[tf.Tensor, tf.Tensor]:
    """A step's batch as the model's float32 inputs, on the device the step runs on: from uint8
    (images, masks), or from (stored images, stored masks, rows) gathered first. Same scaling as
    the PyTorch side: image / 255, mask as 0/1, N x H x W x 1."""
    if len(batch) == 3:
        images, masks, rows = batch
        batch = tuple(from_words(tf.gather(stored, rows), image_size) for stored in (images, masks))
    images, masks = batch
    return tf.cast(images, tf.float32)[..., None] / 255.0, tf.cast(masks, tf.float32)[..., None]


def _loader(data_dir: str):
    images, masks, _ = load_arrays(data_dir)

    def load(indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(images[indices]), np.asarray(masks[indices])  # uint8: converted on the device

    height, width = images.shape[1:]
    return load, (height, width)


def _batches(data_dir: str, indices: list[int], batch: int, drop_remainder: bool, threads: int) -> tf.data.Dataset:
    load, (height, width) = _loader(data_dir)

    def gather(index_batch):
        image, mask = tf.numpy_function(load, [index_batch], (tf.uint8, tf.uint8), stateful=False)
        image.set_shape([None, height, width])
        mask.set_shape([None, height, width])
        return image, mask

    dataset = tf.data.Dataset.from_tensor_slices(np.asarray(indices, dtype=np.int64))
    dataset = dataset.batch(batch, drop_remainder=drop_remainder).map(gather)
    options = tf.data.Options()
    options.deterministic = True
    options.threading.private_threadpool_size = max(1, threads)
    return dataset.with_options(options)


def prefetched(dataset: tf.data.Dataset, device: str | None) -> tf.data.Dataset:
    """Batches prepared ahead: in host memory, or copied ahead into `device`'s (the last transformation)."""
    if device is None:
        return dataset.prefetch(tf.data.AUTOTUNE)
    return dataset.apply(tf.data.experimental.prefetch_to_device(device, buffer_size=2))


def replica_shard(
    train_indices: list[int], replicas: int, replica: int, seed: int, epoch: int, samples: int
) -> np.ndarray:
    """The `samples` sample indices `replica` takes in `epoch`: its shard in DistributedSampler's
    order, cycled (or cut) to that many (batches x batch: accumulation.batches_per_epoch)."""
    positions = cycled(distributed_order(len(train_indices), replicas, replica, seed, epoch), samples)
    return np.asarray(train_indices, dtype=np.int64)[positions]


class ReplicaShards:
    """The samples of this process's replicas in each epoch: each replica's shard of the training
    indices in DistributedSampler's order, `batches` batches of `batch` (torch/data.py's sampler
    of the same name takes the same samples in the same order)."""

    def __init__(
        self, train_indices: list[int], replicas: int, replica_ids: list[int], seed: int, batch: int, batches: int
    ) -> None:
        self.train_indices, self.replicas, self.replica_ids = train_indices, replicas, replica_ids
        self.seed, self.batch, self.batches = seed, batch, batches

    def shard(self, replica: int, epoch: int) -> np.ndarray:
        """The sample indices `replica` takes in `epoch`, in order."""
        return replica_shard(self.train_indices, self.replicas, replica, self.seed, epoch, self.batches * self.batch)

    def replica_samples(self, epochs: int) -> list[np.ndarray]:
        """The sample indices each of this process's replicas takes in any of `epochs` epochs, sorted."""
        return [
            np.unique(np.concatenate([self.shard(replica, epoch) for epoch in range(epochs)]))
            for replica in self.replica_ids
        ]


def build_order(run: RunSettings, backend: Backend, train_indices: list[int], batches: int) -> ReplicaShards:
    """This process's replicas' shards of the training indices, `batches` batches per epoch
    (accumulation.epoch_batches), shuffled by the seed and the epoch."""
    return ReplicaShards(
        train_indices, backend.replicas, backend.replica_ids, run.cell.seed, run.training.batch_per_gpu, batches
    )


def as_words(samples: np.ndarray) -> np.ndarray:
    """uint8 samples (N x H x W) as N rows of float32 words holding the same bytes.

    TensorFlow has no GPU gather for uint8 (and keeps int32 tensors in host memory), so the
    stored samples travel as float32 words: a gather only moves their bits, and from_words
    gives the uint8 back on the device. The UNet's sizes are multiples of 16, so a row is whole words.
    """
    rows = np.ascontiguousarray(samples).reshape(len(samples), -1)
    return rows.view(np.float32)


def from_words(words: tf.Tensor, image_size: tuple[int, int]) -> tf.Tensor:
    """Gathered rows of as_words back to uint8 samples B x H x W (a bitcast and a reshape: no copy)."""
    return tf.reshape(tf.bitcast(words, tf.uint8), [-1, *image_size])


class DeviceSamples:
    """Samples of the arrays as uint8 bytes on one device (as_words), loaded once."""

    def __init__(self, data_dir: str, samples: np.ndarray | list[int], device: str) -> None:
        images, masks, _ = load_arrays(data_dir)
        order = np.unique(np.asarray(samples, dtype=np.int64))
        self.device = device
        with tf.device(device):
            self.images = tf.identity(as_words(images[order]))
            self.masks = tf.identity(as_words(masks[order]))
        self.row_of = np.full(int(order.max(initial=-1)) + 1, -1, dtype=np.int64)
        self.row_of[order] = np.arange(len(order))

    @property
    def nbytes(self) -> int:
        return 4 * int(self.images.shape.num_elements() + self.masks.shape.num_elements())  # float32 words

    def rows(self, samples: np.ndarray) -> tf.Tensor:
        """The rows of these sample indices, as one index tensor on the device (a single copy)."""
        rows = self.row_of[samples]
        if (rows < 0).any():
            raise KeyError(f"samples {samples[rows < 0][:5].tolist()} were not loaded onto {self.device}")
        with tf.device(self.device):
            return tf.identity(rows)

    def inputs(self, rows: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """A step's inputs that model_inputs gathers."""
        return self.images, self.masks, rows


def device_train_batches(stores: list[DeviceSamples], order: ReplicaShards, epoch: int):
    """One epoch with device placement: per step a tuple with each local replica's inputs (its
    stored samples and the step's rows), the same samples in the same order as train_dataset."""
    rows = []
    for store, replica in zip(stores, order.replica_ids, strict=True):
        rows.append(tf.reshape(store.rows(order.shard(replica, epoch)), [order.batches, order.batch]))  # one copy
    for step in range(int(rows[0].shape[0])):
        yield tuple(store.inputs(replica_rows[step]) for store, replica_rows in zip(stores, rows))


def device_eval_batches(store: DeviceSamples, shard: list[int], batch: int):
    """The shard in order, every sample once (the last batch may be smaller), gathered on the device."""
    rows = store.rows(np.asarray(shard, dtype=np.int64))
    for start in range(0, len(shard), batch):
        yield store.inputs(rows[start : start + batch])


def train_dataset(
    data_dir: str, order: ReplicaShards, epoch: int, threads: int, device: str | None = None
) -> tf.data.Dataset:
    """One epoch with host placement: per step a tuple with one uint8 (images, masks) batch per
    local replica (`order.batches` of them), prefetched to `device`."""
    per_replica = []
    for replica in order.replica_ids:
        shard = order.shard(replica, epoch).tolist()
        per_replica.append(_batches(data_dir, shard, order.batch, drop_remainder=True, threads=threads))
    return prefetched(tf.data.Dataset.zip(tuple(per_replica)), device)


def eval_dataset(
    data_dir: str, shard: list[int], batch: int, threads: int, device: str | None = None
) -> tf.data.Dataset:
    """The shard in order, every sample once (the last batch may be smaller), prefetched to `device`."""
    return prefetched(_batches(data_dir, shard, batch, drop_remainder=False, threads=threads), device)


class Batches:
    """The input pipeline of a rank in its placement: each epoch's training batches in the order's
    sequence, and the evaluated samples' batches (from the device where they were loaded there,
    else from the host)."""

    def __init__(
        self,
        order: ReplicaShards,
        stores: list[DeviceSamples],
        eval_stores: dict[tuple[int, ...], DeviceSamples],
        data_dir: str,
        threads: int,
        input_device: str | None,
    ) -> None:
        self.order, self.stores, self.eval_stores = order, stores, eval_stores
        self.data_dir, self.threads, self.input_device = data_dir, threads, input_device

    def epoch(self, epoch: int):
        if self.stores:
            return device_train_batches(self.stores, self.order, epoch)
        return train_dataset(self.data_dir, self.order, epoch, self.threads, self.input_device)

    def eval_batches(self, indices: list[int]):
        store = self.eval_stores.get(tuple(indices))
        if store is not None:
            return device_eval_batches(store, indices, self.order.batch)
        return eval_dataset(self.data_dir, indices, self.order.batch, self.threads, self.input_device)


def build_data(
    run: RunSettings,
    device: Device,
    backend: Backend,
    order: ReplicaShards,
    where: DataPlacement,
    eval_shards: list[list[int]],
) -> Batches:
    """The training batches and the evaluation shards in the placement decided (train/placement.py):
    with device placement, each local replica's samples on its device (a MirroredStrategy process
    has several), the evaluated ones on the first."""
    stores: list[DeviceSamples] = []
    eval_stores: dict[tuple[int, ...], DeviceSamples] = {}
    if where.kind == "device":
        replica_devices = backend.local_devices() or ["/gpu:0" if device.type == "cuda" else "/cpu:0"]
        per_replica = order.replica_samples(run.training.epochs)
        stores = [DeviceSamples(run.data_dir, s, d) for s, d in zip(per_replica, replica_devices)]
        eval_stores = {tuple(shard): DeviceSamples(run.data_dir, shard, replica_devices[0]) for shard in eval_shards}
    return Batches(order, stores, eval_stores, run.data_dir, device.threads, device.input_device)
