"""Gradient accumulation (training.horovod.backward_passes_per_step): TensorFlow steps on its mean
gradient with the real Horovod backend, one rank through the real loop in a process of its own
(accumulated_steps.py; PyTorch's: test_accumulation_steps_torch.py;
tests/integration/test_horovod_accumulation.py runs two ranks)."""

from __future__ import annotations

import numpy as np
import pytest
from accumulated_steps import (
    assert_an_epoch_not_a_multiple_of_the_passes_steps_on_its_remainder,
    assert_two_accumulated_batches_step_like_one_batch_of_both,
)
from conftest import in_fresh_process

ENVIRONMENT = "tensorflow"

pytestmark = pytest.mark.integration


def weights_and_steps(loop) -> tuple[list[np.ndarray], int]:
    """The model's weights and how often its optimizer stepped."""
    distributed = loop.steps.distributed
    return [w.copy() for w in distributed.network.get_weights()], int(distributed.optimizer.iterations.numpy())


# TensorFlow sets its threads at its first operation: this module's tests share one process of their own
def test_two_accumulated_batches_step_like_one_batch_of_both(prepared_data, tmp_path, tmp_path_factory, request):
    if in_fresh_process(request, tmp_path_factory, "tensorflow"):
        return
    assert_two_accumulated_batches_step_like_one_batch_of_both("tensorflow", prepared_data, tmp_path, weights_and_steps)


def test_an_epoch_not_a_multiple_of_the_passes_steps_on_its_remainder(
    prepared_data, tmp_path, tmp_path_factory, request
):
    if in_fresh_process(request, tmp_path_factory, "tensorflow"):
        return
    assert_an_epoch_not_a_multiple_of_the_passes_steps_on_its_remainder(
        "tensorflow", prepared_data, tmp_path, weights_and_steps
    )
