"""Gradient accumulation (training.horovod.backward_passes_per_step): which batches share an
optimizer step (tests/integration/test_accumulation_steps_torch.py and _tensorflow.py train with it).
The batches each framework's loader yields per epoch: test_accumulation_torch.py, _tensorflow.py."""

from __future__ import annotations

import pytest
from scalebench.measures import batches_per_epoch
from scalebench.train.accumulation import (
    ONE_BATCH_STEP,
    Part,
    cycled,
    epoch_parts,
    optimizer_steps,
)

# (samples, replicas, batch): each framework's loader yields batches_per_epoch's count of whole batches
# per epoch (test_accumulation_torch.py, test_accumulation_tensorflow.py)
LOADERS = [(32, 1, 4), (32, 2, 5), (33, 2, 4), (10, 4, 2), (3, 4, 1)]


def test_batches_are_grouped_into_steps_and_the_remainder_is_a_shorter_step():
    parts = epoch_parts(5, 2)
    assert [p.count for p in parts] == [2, 2, 2, 2, 1]
    assert [p.first for p in parts] == [True, False, True, False, True]
    assert [p.last for p in parts] == [False, True, False, True, True]
    assert sum(p.last for p in parts) == optimizer_steps(5, 2) == 3


def test_one_pass_per_step_steps_on_every_batch():
    assert epoch_parts(4, 1) == [ONE_BATCH_STEP] * 4
    assert epoch_parts(2, 8) == [Part(True, False, 2), Part(False, True, 2)]  # more passes than batches


def test_a_pass_count_below_one_names_the_key():
    with pytest.raises(ValueError, match="training.horovod.backward_passes_per_step"):
        epoch_parts(4, 0)


def test_fixed_steps_give_every_replica_their_batches_at_any_replica_count():
    # training.steps_per_epoch: the steps' batches (times the passes of an accumulating backend)
    assert [batches_per_epoch(28, replicas, 4, steps_per_epoch=10) for replicas in (1, 2, 8)] == [10, 10, 10]
    assert batches_per_epoch(28, 2, 4, steps_per_epoch=10, passes=3) == 30
    assert optimizer_steps(batches_per_epoch(28, 2, 4, steps_per_epoch=10, passes=3), 3) == 10
    assert batches_per_epoch(28, 2, 4) == 3  # null: one pass over the shard, as before


def test_a_shard_is_cycled_in_its_own_order_or_cut():
    assert cycled([3, 1, 2], 7) == [3, 1, 2, 3, 1, 2, 3]
    assert cycled([3, 1, 2], 2) == [3, 1]
    with pytest.raises(ValueError, match="empty shard"):
        cycled([], 3)
