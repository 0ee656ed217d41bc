"""training.tensorboard: real cells of both frameworks write their epoch records as TensorBoard
curves, read back here with TensorBoard's own reader."""

from __future__ import annotations

import pytest
from conftest import assert_curves_equal_records, cell_settings, launch_cell, read_records

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_rank_0_of_a_two_rank_cell_writes_one_curve_per_record_field(prepared_data, tmp_path, framework):
    out = tmp_path / framework
    stale = out / "tensorboard" / "events.out.tfevents.1.an-earlier-run"  # a retrained cell starts fresh
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"")
    settings = cell_settings(framework, "native", 2, epochs=2, eval_every=1, tensorboard=True)
    result = launch_cell(settings, prepared_data, out)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    epochs, final, _ = read_records(out)
    assert final["status"] == "ok" and [e["epoch"] for e in epochs] == [1, 2]
    event_files = list((out / "tensorboard").iterdir())
    assert len(event_files) == 1 and event_files[0].name.startswith("events.out.tfevents."), event_files
    assert not stale.exists()
    assert_curves_equal_records(out / "tensorboard", epochs)
