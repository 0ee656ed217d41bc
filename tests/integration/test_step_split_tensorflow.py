"""The step split measured or not, TensorFlow's cells train the same: read from their checkpoints in
this process (test_step_split.py trains the cells and compares; PyTorch's: test_step_split_torch.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_step_split import assert_measuring_the_split_changes_nothing_that_is_trained

ENVIRONMENT = "tensorflow"

pytestmark = pytest.mark.integration


def checkpoint_tensors(outs: list[Path]) -> list[dict[str, np.ndarray]]:
    """The model's and optimizer's state in each cell's checkpoint after epoch 2 (not the loop's
    records, which hold timings), read in this process. TensorFlow's checkpoint reader starts no
    runtime: a test of this process that sets TensorFlow's threads still can (and those that train
    it in process run in one of their own: in_fresh_process)."""
    import tensorflow as tf

    readers = [tf.train.load_checkpoint(str(out / "checkpoint" / "ckpt-2")) for out in outs]
    return [{k: r.get_tensor(k) for k in r.get_variable_to_shape_map() if "meta" not in k} for r in readers]


def test_measuring_the_split_changes_nothing_that_is_trained(prepared_data, tmp_path):
    assert_measuring_the_split_changes_nothing_that_is_trained(
        "tensorflow", "native", prepared_data, tmp_path, checkpoint_tensors
    )
