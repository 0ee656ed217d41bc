"""Gradient accumulation (training.horovod.backward_passes_per_step): PyTorch steps on its mean
gradient with the real Horovod backend, one rank through the real loop in this process
(accumulated_steps.py; TensorFlow's: test_accumulation_steps_tensorflow.py;
tests/integration/test_horovod_accumulation.py runs two ranks)."""

from __future__ import annotations

import numpy as np
import pytest
from accumulated_steps import (
    assert_an_epoch_not_a_multiple_of_the_passes_steps_on_its_remainder,
    assert_two_accumulated_batches_step_like_one_batch_of_both,
)

ENVIRONMENT = "torch"

pytestmark = pytest.mark.integration


def weights_and_steps(loop) -> tuple[list[np.ndarray], int]:
    """The model's weights and how often its optimizer stepped."""
    distributed = loop.steps.distributed
    state = distributed.optimizer.state
    steps = {int(state[p]["step"]) for p in distributed.raw.parameters()}
    assert len(steps) == 1
    return [p.detach().numpy().copy() for p in distributed.raw.parameters()], steps.pop()


def test_two_accumulated_batches_step_like_one_batch_of_both(prepared_data, tmp_path):
    assert_two_accumulated_batches_step_like_one_batch_of_both("torch", prepared_data, tmp_path, weights_and_steps)


def test_an_epoch_not_a_multiple_of_the_passes_steps_on_its_remainder(prepared_data, tmp_path):
    assert_an_epoch_not_a_multiple_of_the_passes_steps_on_its_remainder(
        "torch", prepared_data, tmp_path, weights_and_steps
    )
