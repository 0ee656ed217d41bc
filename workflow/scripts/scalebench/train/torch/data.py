"""The prepared arrays as a PyTorch dataset, sharded and shuffled by DistributedSampler.

A process takes the shards of its replicas (train/interfaces.py): one for DDP,
FSDP and Horovod ranks; every replica of the cell for DataParallel, whose one
process then reads per step exactly the samples the DDP ranks read together in
that step (as tf/data.py zips the shards of a MirroredStrategy process).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

from scalebench.data.preprocess import load_arrays
from scalebench.train.settings import LoaderSettings


class SegmentationArrays(Dataset):
    """Items of the memory-mapped arrays; opened lazily so worker processes map them themselves."""

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
        image = torch.from_numpy(np.array(images[index], dtype=np.float32) / 255.0).unsqueeze(0)
        mask = torch.from_numpy(np.array(masks[index], dtype=np.float32)).unsqueeze(0)
        return image, mask


class ReplicaShards(Sampler[int]):
    """The samples of this process's replicas in an epoch, a step at a time: in each step, the next
    `batch` samples of each replica's DistributedSampler shard in replica order; full batches only.

    With one replica this is DistributedSampler's order. With several (DataParallel), a step's
    batch of len(replica_ids) x batch samples is what those replicas' DDP ranks take in that step,
    and DataParallel's split along the batch gives GPU i the samples of replica_ids[i].
    """

    def __init__(self, dataset: Dataset, replicas: int, replica_ids: list[int], seed: int, batch: int) -> None:
        self.shards = [
            DistributedSampler(dataset, num_replicas=replicas, rank=replica, shuffle=True, seed=seed, drop_last=False)
            for replica in replica_ids
        ]
        self.batch = batch
        self.steps = len(self.shards[0]) // batch  # every shard has ceil(samples / replicas) samples

    def set_epoch(self, epoch: int) -> None:
        for shard in self.shards:
            shard.set_epoch(epoch)

    def __len__(self) -> int:
        return self.steps * self.batch * len(self.shards)

    def __iter__(self) -> Iterator[int]:
        orders = [list(shard) for shard in self.shards]
        for step in range(self.steps):
            for order in orders:
                yield from order[step * self.batch : (step + 1) * self.batch]


def train_loader(
    data_dir: str,
    indices: list[int],
    replicas: int,
    replica_ids: list[int],
    seed: int,
    batch: int,
    loader: LoaderSettings,
    pin_memory: bool,
) -> tuple[DataLoader, ReplicaShards]:
    """Batches of these replicas' shards (batch samples per replica and step): shuffled by seed +
    epoch (set_epoch), full batches only."""
    sampler = ReplicaShards(SegmentationArrays(data_dir, indices), replicas, replica_ids, seed, batch)
    batches = DataLoader(
        sampler.shards[0].dataset,
        batch_size=batch * len(replica_ids),
        sampler=sampler,
        drop_last=True,
        num_workers=loader.workers,
        pin_memory=pin_memory,
        prefetch_factor=loader.prefetch_factor if loader.workers else None,
        persistent_workers=loader.workers > 0,
    )
    return batches, sampler


def eval_loader(data_dir: str, indices: list[int], batch: int) -> DataLoader:
    """The samples in order, each once (the last batch may be smaller)."""
    return DataLoader(SegmentationArrays(data_dir, indices), batch_size=batch, shuffle=False)
