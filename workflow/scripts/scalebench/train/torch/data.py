"""The prepared uint8 arrays as batches on the device, sharded and shuffled by DistributedSampler.

Two placements (train/placement.py), one sample order and one conversion:
- device: DeviceSamples holds the samples a replica will use as uint8 tensors on its device,
  loaded once; each step gathers its batch there by index (index_select) and converts it.
- host: a DataLoader's workers read uint8 samples from the memory-mapped arrays; the batch is
  copied as uint8 (pinned, non-blocking) and converted on the device.
`to_inputs` is the one conversion (image / 255 and the mask as float32, N x 1 x H x W,
channels-last), so both placements give the model the same numbers in the same order.

A process takes the shards of its replicas (train/interfaces.py): one for DDP, FSDP and Horovod
ranks; every replica of the cell for DataParallel, whose one process then reads per step exactly
the samples the DDP ranks read together in that step (as tf/data.py zips the shards of a
MirroredStrategy process). With device placement each DataParallel replica's samples live on its
own GPU, and its batch goes to dp.py's model already there (ReplicaInputs).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

from scalebench.data.preprocess import load_arrays
from scalebench.settings import LoaderSettings, RunSettings
from scalebench.train.accumulation import cycled
from scalebench.train.interfaces import Backend
from scalebench.train.placement import DataPlacement
from scalebench.train.torch.runtime import LAYOUT, Device

Batch = tuple[torch.Tensor, torch.Tensor]


def to_inputs(images: torch.Tensor, masks: torch.Tensor) -> Batch:
    """uint8 images and masks (N x H x W, on their device) as the model's float32 inputs there:
    the image scaled to [0, 1], the mask as 0/1, N x 1 x H x W channels-last."""
    # .to() allocates channels-last strides even for one channel (contiguous() would keep NCHW's,
    # which it also accepts as channels-last there), so the kernels see the layout the model trains in
    images = images.unsqueeze(1).to(torch.float32, memory_format=LAYOUT).div_(255.0)
    masks = masks.unsqueeze(1).to(torch.float32, memory_format=LAYOUT)
    return images, masks


@dataclass
class ReplicaInputs:
    """A step's images as the replicas of one process hold them, each on its own device
    (DataParallel with device placement: dp.py scatters nothing)."""

    parts: list[torch.Tensor]


class SegmentationArrays(Dataset):
    """uint8 items of the memory-mapped arrays; opened lazily so worker processes map them themselves."""

    def __init__(self, data_dir: str, indices: list[int]):
        self.data_dir = str(data_dir)
        self.indices = indices
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, item: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._arrays is None:
            images, masks, _ = load_arrays(self.data_dir)
            self._arrays = (images, masks)
        images, masks = self._arrays
        index = self.indices[item]
        return torch.from_numpy(np.array(images[index])), torch.from_numpy(np.array(masks[index]))


class ReplicaShards(Sampler[int]):
    """The samples of this process's replicas in an epoch, a step at a time: in each step, the next
    `batch` samples of each replica's DistributedSampler shard in replica order; `batches` full
    batches per replica (accumulation.epoch_batches, which the loop computes: one pass over the
    shard, or with training.steps_per_epoch the shard cycled in its order).

    With one replica this is DistributedSampler's order. With several (DataParallel), a step's
    batch of len(replica_ids) x batch samples is what those replicas' DDP ranks take in that step,
    and DataParallel's split along the batch gives GPU i the samples of replica_ids[i].
    """

    def __init__(
        self, dataset: SegmentationArrays, replicas: int, replica_ids: list[int], seed: int, batch: int, batches: int
    ) -> None:
        self.shards = [
            DistributedSampler(dataset, num_replicas=replicas, rank=replica, shuffle=True, seed=seed, drop_last=False)
            for replica in replica_ids
        ]
        self.dataset = dataset
        self.batch = batch
        self.steps = batches

    def set_epoch(self, epoch: int) -> None:
        for shard in self.shards:
            shard.set_epoch(epoch)

    def __len__(self) -> int:
        return self.steps * self.batch * len(self.shards)

    def __iter__(self) -> Iterator[int]:
        orders = [cycled(list(shard), self.steps * self.batch) for shard in self.shards]
        for step in range(self.steps):
            for order in orders:
                yield from order[step * self.batch : (step + 1) * self.batch]

    def replica_samples(self, epochs: int) -> list[np.ndarray]:
        """The sample indices each replica takes in any of `epochs` epochs, sorted."""
        sample_of = np.asarray(self.dataset.indices, dtype=np.int64)
        replicas = len(self.shards)
        used: list[set[int]] = [set() for _ in range(replicas)]
        for epoch in range(epochs):
            self.set_epoch(epoch)
            per_step = np.fromiter(iter(self), dtype=np.int64).reshape(self.steps, replicas, self.batch)
            for replica in range(replicas):
                used[replica].update(sample_of[per_step[:, replica, :]].ravel().tolist())
        return [np.asarray(sorted(samples), dtype=np.int64) for samples in used]


class DeviceSamples:
    """Samples of the arrays as uint8 tensors on one device, loaded once; batches gathered there."""

    def __init__(self, data_dir: str, samples: np.ndarray | list[int], device: torch.device) -> None:
        images, masks, _ = load_arrays(data_dir)
        order = np.unique(np.asarray(samples, dtype=np.int64))
        self.device = device
        self.images = torch.from_numpy(np.ascontiguousarray(images[order])).to(device)
        self.masks = torch.from_numpy(np.ascontiguousarray(masks[order])).to(device)
        self.row_of = np.full(int(order.max(initial=-1)) + 1, -1, dtype=np.int64)
        self.row_of[order] = np.arange(len(order))

    @property
    def nbytes(self) -> int:
        return self.images.nbytes + self.masks.nbytes

    def rows(self, samples: np.ndarray) -> torch.Tensor:
        """The rows of these sample indices, as one index tensor on the device (a single copy)."""
        rows = self.row_of[samples]
        if (rows < 0).any():
            raise KeyError(f"samples {samples[rows < 0][:5].tolist()} were not loaded onto {self.device}")
        return torch.from_numpy(rows).to(self.device)

    def batch(self, rows: torch.Tensor) -> Batch:
        return to_inputs(self.images.index_select(0, rows), self.masks.index_select(0, rows))


class DeviceTrainBatches:
    """The epoch's batches gathered on the devices, in the host loader's order (ReplicaShards)."""

    def __init__(self, train_indices: list[int], sampler: ReplicaShards, stores: list[DeviceSamples]) -> None:
        self.sample_of = np.asarray(train_indices, dtype=np.int64)
        self.sampler, self.stores = sampler, stores

    def __iter__(self) -> Iterator[Batch | tuple[ReplicaInputs, torch.Tensor]]:
        sampler, stores = self.sampler, self.stores
        positions = np.fromiter(iter(sampler), dtype=np.int64).reshape(sampler.steps, len(stores), sampler.batch)
        # one copy of the epoch's row indices per device; each step slices it there
        rows = [
            store.rows(self.sample_of[positions[:, r, :]].ravel()).view(sampler.steps, -1)
            for r, store in enumerate(stores)
        ]
        for step in range(sampler.steps):
            parts = [store.batch(replica_rows[step]) for store, replica_rows in zip(stores, rows)]
            if len(parts) == 1:
                yield parts[0]
            else:  # DataParallel: the images stay on their replicas' GPUs, the masks meet the outputs
                first = stores[0].device
                yield ReplicaInputs([images for images, _ in parts]), torch.cat([m.to(first) for _, m in parts])


class HostBatches:
    """A DataLoader's uint8 batches, copied to the device (non-blocking from pinned memory) and converted there."""

    def __init__(self, loader: DataLoader, device: torch.device) -> None:
        self.loader, self.device = loader, device

    def __iter__(self) -> Iterator[Batch]:
        for images, masks in self.loader:
            yield to_inputs(images.to(self.device, non_blocking=True), masks.to(self.device, non_blocking=True))


def host_train_loader(
    data_dir: str, sampler: ReplicaShards, loader: LoaderSettings, pin_memory: bool, device: torch.device
) -> HostBatches:
    """The host placement's training batches: the sampler's samples, full batches only."""
    batches = DataLoader(
        sampler.shards[0].dataset,
        batch_size=sampler.batch * len(sampler.shards),
        sampler=sampler,
        drop_last=True,
        num_workers=loader.workers,
        pin_memory=pin_memory,
        prefetch_factor=loader.prefetch_factor if loader.workers else None,
        persistent_workers=loader.workers > 0,
    )
    return HostBatches(batches, device)


def train_sampler(
    data_dir: str, indices: list[int], replicas: int, replica_ids: list[int], seed: int, batch: int, batches: int
) -> ReplicaShards:
    """These replicas' shards of the training indices (batch samples per replica and step, `batches`
    steps), shuffled by seed + epoch (set_epoch)."""
    return ReplicaShards(SegmentationArrays(data_dir, indices), replicas, replica_ids, seed, batch, batches)


def build_order(run: RunSettings, backend: Backend, train_indices: list[int], batches: int) -> ReplicaShards:
    """This process's replicas' shards of the training indices, `batches` steps per epoch
    (accumulation.epoch_batches)."""
    training = run.training
    return train_sampler(
        run.data_dir,
        train_indices,
        backend.replicas,
        backend.replica_ids,
        run.cell.seed,
        training.batch_per_gpu,
        batches,
    )


def host_eval_batches(data_dir: str, indices: list[int], batch: int, device: torch.device) -> HostBatches:
    """The samples in order, each once (the last batch may be smaller), from the host."""
    return HostBatches(DataLoader(SegmentationArrays(data_dir, indices), batch_size=batch, shuffle=False), device)


def device_eval_batches(store: DeviceSamples, indices: list[int], batch: int) -> Iterator[Batch]:
    """The samples in order, each once (the last batch may be smaller), gathered on the device."""
    rows = store.rows(np.asarray(indices, dtype=np.int64))
    for start in range(0, len(indices), batch):
        yield store.batch(rows[start : start + batch])


class Batches:
    """The input pipeline of a rank in its placement: each epoch's training batches in the
    sampler's order, and the evaluated samples' batches (from the device where they were loaded
    there, else from the host)."""

    def __init__(
        self,
        sampler: ReplicaShards,
        train: Iterable,
        eval_stores: dict[tuple[int, ...], DeviceSamples],
        data_dir: str,
        batch: int,
        device: torch.device,
    ) -> None:
        self.sampler, self.train, self.eval_stores = sampler, train, eval_stores
        self.data_dir, self.batch, self.device = data_dir, batch, device

    def epoch(self, epoch: int) -> Iterable:
        self.sampler.set_epoch(epoch)
        return self.train

    def eval_batches(self, indices: list[int]) -> Iterable[Batch]:
        store = self.eval_stores.get(tuple(indices))
        if store is not None:
            return device_eval_batches(store, indices, self.batch)
        return host_eval_batches(self.data_dir, indices, self.batch, self.device)


def build_data(
    run: RunSettings,
    device: Device,
    backend: Backend,
    order: ReplicaShards,
    where: DataPlacement,
    eval_shards: list[list[int]],
) -> Batches:
    """The training batches and the evaluation shards in the placement decided (train/placement.py)."""
    batch, eval_stores = run.training.batch_per_gpu, {}
    if where.kind == "device":
        per_replica = order.replica_samples(run.training.epochs)
        stores = [DeviceSamples(run.data_dir, s, d) for s, d in zip(per_replica, device.replica_devices)]
        train: Iterable = DeviceTrainBatches(order.dataset.indices, order, stores)
        eval_stores = {tuple(shard): DeviceSamples(run.data_dir, shard, device.device) for shard in eval_shards}
    else:
        loader = run.training.loader
        pin = loader.pin_memory and device.type == "cuda"
        train = host_train_loader(run.data_dir, order, loader, pin, device.device)
    return Batches(order, train, eval_stores, run.data_dir, batch, device.device)
