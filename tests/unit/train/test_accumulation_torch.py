"""The batches per epoch (measures.batches_per_epoch, which accumulation groups into steps) are what
PyTorch's loader yields over DistributedSampler's shard (TensorFlow's: test_accumulation_tensorflow.py)."""

from __future__ import annotations

import pytest
from scalebench.measures import batches_per_epoch
from test_accumulation import LOADERS
from torch.utils.data import DataLoader, DistributedSampler

ENVIRONMENT = "torch"


@pytest.mark.parametrize(("samples", "replicas", "batch"), LOADERS)
def test_batches_per_epoch_is_what_the_torch_loader_yields(samples, replicas, batch):
    expected = batches_per_epoch(samples, replicas, batch)
    for rank in range(replicas):
        sampler = DistributedSampler(range(samples), num_replicas=replicas, rank=rank, seed=1, drop_last=False)
        assert len(DataLoader(range(samples), batch_size=batch, sampler=sampler, drop_last=True)) == expected
