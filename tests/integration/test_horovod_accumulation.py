"""training.horovod.backward_passes_per_step with two real Horovod ranks, for both frameworks:
accumulating two batches steps like one batch of both, reducing once per optimizer step."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import (
    allreduce_counts,
    cell_settings,
    in_framework,
    launch_cell,
    read_records,
    skip_unless_horovod_ran,
)
from scalebench.train.collectives import TENSOR_NAME

pytestmark = pytest.mark.integration


# How many gradient tensors the UNet without batch norm has (one allreduce each per step), as the
# framework builds it, asked in its own environment: this module runs in the pipeline's, which has neither
GRADIENT_TENSORS = {
    "torch": "from scalebench.train.torch.model import UNet\nprint(len(list(UNet(batch_norm=False).parameters())))",
    "tensorflow": "from scalebench.train.tf.model import build_unet\n"
    "print(len(build_unet((32, 48), batch_norm=False).trainable_variables))",
}


def gradient_tensors(framework: str) -> int:
    return in_framework(framework, GRADIENT_TENSORS[framework])


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_accumulating_two_batches_steps_like_one_batch_of_both(framework, prepared_data, tmp_path):
    # 14 pairs per rank: 4 batches of 3 in 2 steps of 2, against 2 batches of 6 (the same 12 pairs)
    runs = {}
    for name, batch, passes in (("accumulated", 3, 2), ("double_batch", 6, 1)):
        settings = cell_settings(
            framework,
            "horovod",
            2,
            epochs=2,
            batch_norm=False,
            batch_per_gpu=batch,
            predictions=0,  # no test image saved: rank 0 would trace a prediction function for nothing read
            horovod={"backward_passes_per_step": passes},
        )
        timeline = tmp_path / name / "timeline.json"
        result = launch_cell(settings, prepared_data, tmp_path / name, HOROVOD_TIMELINE=str(timeline))
        skip_unless_horovod_ran(result, tmp_path / name, framework)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        # the training's reductions: not those of the collective benchmark before the first epoch
        counts = allreduce_counts(timeline)
        runs[name] = (*read_records(tmp_path / name), {n: c for n, c in counts.items() if TENSOR_NAME not in n})
        # the benchmark went through Horovod too (TensorFlow's eager ops all take Horovod's default name)
        assert any(TENSOR_NAME in n for n in counts) or framework == "tensorflow"
    (epochs, final, run, reductions), (epochs_2b, final_2b, run_2b, _) = runs["accumulated"], runs["double_batch"]
    # the same mean gradient per step, so the same steps: the same losses
    np.testing.assert_allclose(
        [e["loss"] for e in epochs] + [final["test_loss"]],
        [e["loss"] for e in epochs_2b] + [final_2b["test_loss"]],
        rtol=0,
        atol=1e-6,
    )
    assert [(e["steps"], e["optimizer_steps"]) for e in epochs] == [(8, 2)] * 2  # 4 batches per rank
    assert [(e["steps"], e["optimizer_steps"]) for e in epochs_2b] == [(4, 2)] * 2
    assert run["training"]["global_batch"] == run_2b["training"]["global_batch"] == 12
    # every gradient is allreduced once per optimizer step (2 epochs x 2 steps), half as often as
    # there are batches (2 x 4); none once per batch. TensorFlow's unnamed reductions are the
    # loop's own scalars (epoch figures, data placement, resume, the test), all under Horovod's
    # default op name, and their count follows the loop, not the batches
    assert list(reductions.values()).count(2 * 2) == gradient_tensors(framework)
    gradients = {name: count for name, count in reductions.items() if name != "HorovodAllreduce"}
    assert max(gradients.values()) < 2 * 4
