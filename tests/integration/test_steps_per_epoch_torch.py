"""training.steps_per_epoch in one rank of each framework: both take that many optimizer steps per
epoch, cycling the shard in the same seeded order. PyTorch's rank trains in this process, TensorFlow's
in a process of TensorFlow's environment (TENSORFLOW_SIDE), which answers with its records and the
images its pipeline gave each step (test_steps_per_epoch.py: two ranks of each)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import in_framework, read_records, train_in_process

ENVIRONMENT = "torch"

pytestmark = pytest.mark.integration

# 28 training pairs: a one-rank epoch is 7 batches of 4
STEPS, BATCH = 10, 4
SETTINGS = {"epochs": 2, "steps_per_epoch": STEPS, "predictions": 0}

# TensorFlow's rank of the same cell, through the real loop in a process of its own (TensorFlow sets
# its threads at its first operation): its records and the sum of each step's input images, converted
# as the step converts them (one replica's inputs)
TENSORFLOW_SIDE = """
import json, sys
from pathlib import Path
import numpy as np
from conftest import read_records, train_in_process
from scalebench.train.tf import data as tf_data

data, out, settings = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
loop = train_in_process("tensorflow", "horovod", data, out, **settings)
epochs, final, run = read_records(out)
sums = [
    [float(tf_data.model_inputs(*batch[0], image_size=loop.run.image_size)[0].numpy().astype(np.float64).sum())
     for batch in loop.batches.epoch(epoch)]
    for epoch in (0, 1)
]
print(json.dumps({"epochs": epochs, "final": final, "run": run, "sums": sums}))
"""


def torch_step_images(loop, epoch: int) -> list[float]:
    """The sum of each step's input images, through PyTorch's own pipeline of `epoch`."""
    return [float(batch[0].numpy().astype(np.float64).sum()) for batch in loop.batches.epoch(epoch)]


def assert_the_steps_taken(epochs: list[dict], final: dict, run: dict) -> None:
    assert [e["optimizer_steps"] for e in epochs] == [STEPS, STEPS] and final["iou"] is not None
    assert [e["images"] for e in epochs] == [STEPS * BATCH] * 2 and run["training"]["steps_per_epoch"] == STEPS


def test_both_frameworks_take_the_steps_and_see_the_same_samples_in_the_same_order(prepared_data, tmp_path):
    loop = train_in_process("torch", "horovod", prepared_data, tmp_path / "torch", **SETTINGS)
    assert_the_steps_taken(*read_records(tmp_path / "torch"))
    orders = {"torch": [torch_step_images(loop, epoch) for epoch in (0, 1)]}
    tensorflow = in_framework(
        "tensorflow", TENSORFLOW_SIDE, str(prepared_data), str(tmp_path / "tensorflow"), json.dumps(SETTINGS)
    )
    assert_the_steps_taken(tensorflow["epochs"], tensorflow["final"], tensorflow["run"])
    orders["tensorflow"] = tensorflow["sums"]
    for epoch in (0, 1):
        assert len(orders["torch"][epoch]) == STEPS  # more than one pass over the shard: it was cycled
        np.testing.assert_allclose(orders["tensorflow"][epoch], orders["torch"][epoch], rtol=1e-6)
        assert orders["torch"][epoch][7:] == orders["torch"][epoch][:3]  # the shard again, in its order
    assert orders["torch"][0] != orders["torch"][1]  # each epoch shuffled by its seed
