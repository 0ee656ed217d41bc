"""Local gradient accumulation: which batches of an epoch share one optimizer step.

A backend that accumulates (Horovod: training.horovod.backward_passes_per_step = k)
makes every rank add up the gradients of k batches before the reduction across
ranks and the optimizer step. The loop tells the framework, for each batch, where
it falls in its step (a Part); both frameworks then train alike: the step uses the
mean gradient of its batches, so k batches of b images step like one batch of k*b.

An epoch whose batch count is not a multiple of k ends with a shorter step over the
remaining batches (their mean gradient too): every batch is trained on, and no
gradient is carried across the end of an epoch (where checkpoints are written).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Part:
    """Where one batch falls in its optimizer step."""

    first: bool  # the step's gradients start from zero with this batch
    last: bool  # after this batch the gradients are reduced across ranks and the optimizer steps
    count: int  # batches in this step: the step's gradient is the mean over them


ONE_BATCH_STEP = Part(first=True, last=True, count=1)


def batches_per_epoch(samples: int, replicas: int, batch: int) -> int:
    """Full batches each replica trains on in an epoch: both frameworks' samplers pad the shards
    to ceil(samples / replicas) and drop the incomplete last batch."""
    return math.ceil(samples / replicas) // batch


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
