"""The prepared arrays as a PyTorch dataset, sharded and shuffled by DistributedSampler."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

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


def train_loader(
    data_dir: str,
    indices: list[int],
    replicas: int,
    replica: int,
    seed: int,
    batch: int,
    loader: LoaderSettings,
    pin_memory: bool,
) -> tuple[DataLoader, DistributedSampler]:
    """Batches of this replica's shard: shuffled by seed + epoch (set_epoch), full batches only."""
    sampler = DistributedSampler(
        SegmentationArrays(data_dir, indices),
        num_replicas=replicas,
        rank=replica,
        shuffle=True,
        seed=seed,
        drop_last=False,
    )
    batches = DataLoader(
        sampler.dataset,
        batch_size=batch,
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
