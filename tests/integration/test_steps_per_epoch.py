"""training.steps_per_epoch: every replica takes that many optimizer steps per epoch whatever the
GPU count, cycling its shard in the same seeded order in both frameworks; the records say how many
images each epoch saw; evaluation is unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import in_fresh_process, read_records, train_in_process
from paired_cells import two_rank_native_cell
from scalebench.train.tf import data as tf_data

pytestmark = pytest.mark.integration

# 28 training pairs: a one-rank epoch is 7 batches of 4, a two-rank one 3 (and a half) per rank
STEPS, BATCH = 10, 4


def step_images(loop, framework: str, epoch: int) -> list[float]:
    """The sum of each step's input images, through the framework's own pipeline of `epoch`."""
    sums = []
    for batch in loop.batches.epoch(epoch):
        if framework == "torch":
            images = batch[0].numpy()
        else:  # one replica's inputs, converted as the step converts them
            images = tf_data.model_inputs(*batch[0], image_size=loop.run.image_size)[0].numpy()
        sums.append(float(images.astype(np.float64).sum()))
    return sums


def test_both_frameworks_take_the_steps_and_see_the_same_samples_in_the_same_order(
    prepared_data, tmp_path, tmp_path_factory, request
):
    if in_fresh_process(request, tmp_path_factory):  # TensorFlow sets its threads at its first operation
        return
    orders = {}
    for name in ("torch", "tensorflow"):
        loop = train_in_process(
            name, "horovod", prepared_data, tmp_path / name, epochs=2, steps_per_epoch=STEPS, predictions=0
        )
        epochs, final, run = read_records(tmp_path / name)
        assert [e["optimizer_steps"] for e in epochs] == [STEPS, STEPS] and final["iou"] is not None
        assert [e["images"] for e in epochs] == [STEPS * BATCH] * 2 and run["training"]["steps_per_epoch"] == STEPS
        orders[name] = [step_images(loop, name, epoch) for epoch in (0, 1)]
    for epoch in (0, 1):
        assert len(orders["torch"][epoch]) == STEPS  # more than one pass over the shard: it was cycled
        np.testing.assert_allclose(orders["tensorflow"][epoch], orders["torch"][epoch], rtol=1e-6)
        assert orders["torch"][epoch][7:] == orders["torch"][epoch][:3]  # the shard again, in its order
    assert orders["torch"][0] != orders["torch"][1]  # each epoch shuffled by its seed


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_two_ranks_take_as_many_steps_per_epoch_as_one(prepared_data, tmp_path_factory, framework):
    # two-rank cells trained anyway, once per run: test_resume.py's DDP reference (ten steps per epoch),
    # test_tf_training.py's MultiWorkerMirrored reference (14)
    epochs, final, run = read_records(two_rank_native_cell(tmp_path_factory, prepared_data, framework))
    steps = run["training"]["steps_per_epoch"]
    assert (run["backend"], run["processes"]) == ("native", 2) and steps * BATCH > 14  # a rank's shard: 14 pairs
    # that many steps per replica (a pass would be three and a half): both replicas' images, and
    # evaluation as always
    assert [(e["optimizer_steps"], e["steps"], e["images"]) for e in epochs] == [
        (steps, 2 * steps, 2 * steps * BATCH)
    ] * len(epochs)
    assert all(e["val_iou"] is not None for e in epochs) and final["status"] == "ok"
