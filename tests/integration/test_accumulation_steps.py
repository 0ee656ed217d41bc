"""Gradient accumulation (training.horovod.backward_passes_per_step): both frameworks step on
their mean gradient with the real Horovod backend, one rank through the real loop in this process
(tests/integration/test_horovod_accumulation.py runs two)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import in_fresh_process, train_in_process
from scalebench.train.accumulation import optimizer_steps

pytestmark = pytest.mark.integration


def train_one_epoch(framework_name: str, data, out, batch: int, passes: int):
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


def weights_and_steps(loop, framework: str) -> tuple[list[np.ndarray], int]:
    """The model's weights and how often its optimizer stepped."""
    distributed = loop.steps.distributed
    if framework == "torch":
        state = distributed.optimizer.state
        steps = {int(state[p]["step"]) for p in distributed.raw.parameters()}
        assert len(steps) == 1
        return [p.detach().numpy().copy() for p in distributed.raw.parameters()], steps.pop()
    return [w.copy() for w in distributed.network.get_weights()], int(distributed.optimizer.iterations.numpy())


@pytest.mark.parametrize("framework_name", ["torch", "tensorflow"])
def test_two_accumulated_batches_step_like_one_batch_of_both(
    framework_name, prepared_data, tmp_path, tmp_path_factory, request
):
    if framework_name == "tensorflow" and in_fresh_process(request, tmp_path_factory, "tensorflow"):
        return
    # 28 training pairs: 14 batches of 2 in 7 steps of 2 against 7 batches of 4, the same pairs in
    # the same order; each step's mean gradient is the same, so the same Adam steps follow
    halves = train_one_epoch(framework_name, prepared_data, tmp_path / "halves", batch=2, passes=2)
    whole = train_one_epoch(framework_name, prepared_data, tmp_path / "whole", batch=4, passes=1)
    (accumulated, steps), (reference, reference_steps) = (
        weights_and_steps(halves, framework_name),
        weights_and_steps(whole, framework_name),
    )
    assert steps == reference_steps == 7
    for mine, theirs in zip(accumulated, reference, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-5)
    assert halves.steps.epoch_loss()[1] == 14  # every batch trained on: the images of the epoch are all seen
    assert abs(halves.steps.epoch_loss()[0] / 14 - whole.steps.epoch_loss()[0] / 7) < 1e-5


@pytest.mark.parametrize("framework_name", ["torch", "tensorflow"])
def test_an_epoch_not_a_multiple_of_the_passes_steps_on_its_remainder(
    framework_name, prepared_data, tmp_path, tmp_path_factory, request
):
    if framework_name == "tensorflow" and in_fresh_process(request, tmp_path_factory, "tensorflow"):
        return
    loop = train_one_epoch(framework_name, prepared_data, tmp_path / "cell", batch=4, passes=3)
    _, steps = weights_and_steps(loop, framework_name)
    assert steps == optimizer_steps(7, 3) == 3  # 7 batches: steps of 3, 3 and 1
    assert loop.steps.epoch_loss()[1] == 7
