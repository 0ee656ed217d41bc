"""The step split measured or not, PyTorch's cells train the same: read from their checkpoints in
this process (test_step_split.py trains the cells and compares; TensorFlow's: test_step_split_tensorflow.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from test_step_split import assert_measuring_the_split_changes_nothing_that_is_trained

ENVIRONMENT = "torch"

pytestmark = pytest.mark.integration


def checkpoint_tensors(outs: list[Path]) -> list[dict[str, np.ndarray]]:
    """The model's and optimizer's state in each cell's checkpoint (not the loop's records, which hold
    timings), read in this process, which has torch already."""
    found = []
    for out in outs:
        state = torch.load(out / "checkpoint.pt", weights_only=False)
        flat = {f"model.{k}": v for k, v in state["model"].items()}
        flat.update({f"optimizer.{i}.{k}": v for i, s in state["optimizer"]["state"].items() for k, v in s.items()})
        found.append({key: value.numpy() for key, value in flat.items() if torch.is_tensor(value)})
    return found


@pytest.mark.parametrize("backend", ["native", "fsdp"])
def test_measuring_the_split_changes_nothing_that_is_trained(backend, prepared_data, tmp_path):
    assert_measuring_the_split_changes_nothing_that_is_trained(
        "torch", backend, prepared_data, tmp_path, checkpoint_tensors
    )
