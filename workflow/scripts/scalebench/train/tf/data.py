"""tf.data pipelines over the memory-mapped arrays, in PyTorch's sample order.

Training: every replica takes its shard of the (repeated) training indices in
exactly the order torch's DistributedSampler gives rank r in an epoch
(shuffled by seed + epoch, padded to a multiple of the world size), batches it
dropping the remainder, and prefetches: on a GPU into the device's memory, so the
host-to-device copy of the next batch overlaps the current step. The arrays are already decoded uint8,
so an epoch only gathers rows and scales them. Evaluation: replica r takes
test[r::world], nothing dropped or repeated.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from scalebench.data.preprocess import load_arrays


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


def distributed_order(n: int, world_size: int, rank: int, seed: int, epoch: int) -> list[int]:
    """Positions DistributedSampler(shuffle=True, seed=seed, drop_last=False) yields for `rank` in `epoch`."""
    per_rank = math.ceil(n / world_size)
    total = per_rank * world_size
    order = torch_randperm(n, seed + epoch).tolist()
    padding = total - n
    if padding <= n:
        order += order[:padding]
    else:
        order += (order * math.ceil(padding / n))[:padding]
    return order[rank:total:world_size]


def _loader(data_dir: str):
    images, masks, _ = load_arrays(data_dir)

    def load(indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # Same scaling as the PyTorch dataset: image / 255 in float32, mask as 0/1 float32.
        image = np.asarray(images[indices], dtype=np.float32)[..., None] / np.float32(255.0)
        mask = np.asarray(masks[indices], dtype=np.float32)[..., None]
        return image, mask

    height, width = images.shape[1:]
    return load, (height, width)


def _batches(data_dir: str, indices: list[int], batch: int, drop_remainder: bool, threads: int) -> tf.data.Dataset:
    load, (height, width) = _loader(data_dir)

    def gather(index_batch):
        image, mask = tf.numpy_function(load, [index_batch], (tf.float32, tf.float32), stateful=False)
        image.set_shape([None, height, width, 1])
        mask.set_shape([None, height, width, 1])
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


def train_dataset(
    data_dir: str,
    train_indices: list[int],
    replica_ids: list[int],
    replicas: int,
    batch: int,
    seed: int,
    epoch: int,
    threads: int,
    device: str | None = None,
) -> tf.data.Dataset:
    """One epoch: per step a tuple with one (images, masks) batch per local replica, prefetched to `device`."""
    per_replica = []
    for replica in replica_ids:
        positions = distributed_order(len(train_indices), replicas, replica, seed, epoch)
        shard = [train_indices[p] for p in positions]
        per_replica.append(_batches(data_dir, shard, batch, drop_remainder=True, threads=threads))
    return prefetched(tf.data.Dataset.zip(tuple(per_replica)), device)


def eval_dataset(
    data_dir: str, shard: list[int], batch: int, threads: int, device: str | None = None
) -> tf.data.Dataset:
    """The shard in order, every sample once (the last batch may be smaller), prefetched to `device`."""
    return prefetched(_batches(data_dir, shard, batch, drop_remainder=False, threads=threads), device)
