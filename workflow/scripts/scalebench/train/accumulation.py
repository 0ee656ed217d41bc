"""Local gradient accumulation: which batches of an epoch share one optimizer step.

A backend that accumulates (Horovod: training.horovod.backward_passes_per_step = k)
makes every rank add up the gradients of k batches before the reduction across
ranks and the optimizer step. The loop tells the framework, for each batch, where
it falls in its step (a Part); both frameworks then train alike: the step uses the
mean gradient of its batches, so k batches of b images step like one batch of k*b.

An epoch whose batch count is not a multiple of k ends with a shorter step over the
remaining batches (their mean gradient too): every batch is trained on, and no
gradient is carried across the end of an epoch (where checkpoints are written).

With training.steps_per_epoch every replica takes that many optimizer steps per epoch
whatever the number of replicas: its shard of the epoch is cycled in its own (seeded) order until
it has that many steps' batches (cycled), in both frameworks' samplers alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scalebench.measures import batches_per_epoch
from scalebench.settings import TrainingSettings


@dataclass(frozen=True)
class Part:
    """Where one batch falls in its optimizer step."""

    first: bool  # the step's gradients start from zero with this batch
    last: bool  # after this batch the gradients are reduced across ranks and the optimizer steps
    count: int  # batches in this step: the step's gradient is the mean over them


ONE_BATCH_STEP = Part(first=True, last=True, count=1)


def epoch_batches(training: TrainingSettings, samples: int, replicas: int, passes: int) -> int:
    """measures.batches_per_epoch with a rank's training settings (`passes`: its backend's batches per step)."""
    return batches_per_epoch(samples, replicas, training.batch_per_gpu, training.steps_per_epoch, passes)


def cycled(order: Sequence[int], count: int) -> list[int]:
    """The first `count` items of `order` repeated end to end: a replica's shard of an epoch,
    cycled in its own order (or cut, where one pass holds more than `count`)."""
    if not len(order):
        raise ValueError("an empty shard cannot be cycled")
    repeats = -(-count // len(order))
    return (list(order) * repeats)[:count]


def epoch_parts(batches: int, passes: int) -> list[Part]:
    """The Part of each of an epoch's `batches` when an optimizer step takes `passes` batches."""
    if passes < 1:
        raise ValueError(f"training.horovod.backward_passes_per_step must be at least 1, not {passes}")
    parts = []
    for start in range(0, batches, passes):
        count = min(passes, batches - start)
        parts += [Part(first=i == 0, last=i == count - 1, count=count) for i in range(count)]
    return parts


def optimizer_steps(batches: int, passes: int) -> int:
    """Optimizer steps in an epoch of `batches`: ceil(batches / passes)."""
    return math.ceil(batches / passes)
