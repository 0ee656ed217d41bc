"""The batches per epoch (measures.batches_per_epoch, which accumulation groups into steps) are what
TensorFlow's shard order yields in whole batches (PyTorch's loader: test_accumulation_torch.py)."""

from __future__ import annotations

import pytest
from scalebench.measures import batches_per_epoch
from scalebench.train.tf import data as tf_data
from test_accumulation import LOADERS

ENVIRONMENT = "tensorflow"


@pytest.mark.parametrize(("samples", "replicas", "batch"), LOADERS)
def test_batches_per_epoch_is_what_the_tensorflow_shards_yield(samples, replicas, batch):
    expected = batches_per_epoch(samples, replicas, batch)
    for rank in range(replicas):
        assert len(tf_data.distributed_order(samples, replicas, rank, 1, 0)) // batch == expected
