"""training.steps_per_epoch: every replica takes that many optimizer steps per epoch whatever the
GPU count; the records say how many images each epoch saw; evaluation is unchanged. That both
frameworks cycle a shard in the same seeded order: test_steps_per_epoch_torch.py."""

from __future__ import annotations

import pytest
from conftest import read_records
from paired_cells import two_rank_native_cell

pytestmark = pytest.mark.integration

BATCH = 4  # tiny_config's batch_per_gpu


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
