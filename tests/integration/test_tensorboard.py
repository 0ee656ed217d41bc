"""training.tensorboard: real cells of both frameworks write their epoch records as TensorBoard
curves, read back here with TensorBoard's own reader.

The cells are two-rank cells other tests train anyway, with curves and validation each epoch, each
over an earlier run's event file, once per test run: PyTorch DDP's is test_resume.py's
uninterrupted reference, TensorFlow MultiWorkerMirrored's test_tf_training.py's first reference run.
"""

from __future__ import annotations

import pytest
from conftest import assert_curves_equal_records, read_records
from paired_cells import two_rank_native_cell

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_rank_0_of_a_two_rank_cell_writes_one_curve_per_record_field(prepared_data, tmp_path_factory, framework):
    out = two_rank_native_cell(tmp_path_factory, prepared_data, framework)
    epochs, final, run = read_records(out)
    training = run["training"]
    assert (run["backend"], run["gpus"], run["processes"]) == ("native", 2, 2)
    assert run["settings"]["training"]["tensorboard"] is True and training["eval_every"] == 1
    assert final["status"] == "ok" and [e["epoch"] for e in epochs] == list(range(1, training["epochs"] + 1))
    event_files = list((out / "tensorboard").iterdir())
    # one file: the earlier run's, which the cell was trained over (a retrained cell starts fresh), is gone
    assert len(event_files) == 1 and event_files[0].name.startswith("events.out.tfevents."), event_files
    assert event_files[0].name != "events.out.tfevents.1.an-earlier-run"
    assert_curves_equal_records(out / "tensorboard", epochs)
