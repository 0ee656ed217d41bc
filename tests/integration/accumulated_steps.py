"""Gradient accumulation (training.horovod.backward_passes_per_step) in one rank of a Horovod cell
through the real loop in the test's own process, and what each framework's test asserts of it
(test_accumulation_steps_torch.py, test_accumulation_steps_tensorflow.py, each in its framework's
session, with its own reading of the model's weights and optimizer steps)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from conftest import train_in_process
from scalebench.train.accumulation import optimizer_steps

# the model's weights and how often its optimizer stepped, as the framework's test reads them from the loop
WeightsAndSteps = Callable[[object], tuple[list[np.ndarray], int]]


def train_one_epoch(framework_name: str, data: Path, out: Path, batch: int, passes: int):
    """One epoch of a one-rank Horovod cell through the real loop; the loop after it."""
    return train_in_process(
        framework_name,
        "horovod",
        data,
        out,
        epochs=1,
        batch_per_gpu=batch,
        batch_norm=False,  # batch statistics would differ between a batch and its halves
        checkpoint_every=0,
        predictions=0,
        horovod={"backward_passes_per_step": passes},
    )


def assert_two_accumulated_batches_step_like_one_batch_of_both(
    framework_name: str, data: Path, folder: Path, weights_and_steps: WeightsAndSteps
) -> None:
    # 28 training pairs: 14 batches of 2 in 7 steps of 2 against 7 batches of 4, the same pairs in
    # the same order; each step's mean gradient is the same, so the same Adam steps follow
    halves = train_one_epoch(framework_name, data, folder / "halves", batch=2, passes=2)
    whole = train_one_epoch(framework_name, data, folder / "whole", batch=4, passes=1)
    (accumulated, steps), (reference, reference_steps) = weights_and_steps(halves), weights_and_steps(whole)
    assert steps == reference_steps == 7
    for mine, theirs in zip(accumulated, reference, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-5)
    assert halves.steps.epoch_loss()[1] == 14  # every batch trained on: the images of the epoch are all seen
    assert abs(halves.steps.epoch_loss()[0] / 14 - whole.steps.epoch_loss()[0] / 7) < 1e-5


def assert_an_epoch_not_a_multiple_of_the_passes_steps_on_its_remainder(
    framework_name: str, data: Path, folder: Path, weights_and_steps: WeightsAndSteps
) -> None:
    loop = train_one_epoch(framework_name, data, folder / "cell", batch=4, passes=3)
    _, steps = weights_and_steps(loop)
    assert steps == optimizer_steps(7, 3) == 3  # 7 batches: steps of 3, 3 and 1
    assert loop.steps.epoch_loss()[1] == 7
