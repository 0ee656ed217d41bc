"""A rank that runs out of memory ends its whole cell at once with status oom, for every backend.

TensorFlow's MultiWorkerMirrored cell has rank 0 run out of memory (the rank that records the cell),
the others rank 1 (a rank whose error rank 0 must learn and record)."""

from __future__ import annotations

import pytest
from conftest import cell_settings, launch_cell, read_records

pytestmark = pytest.mark.integration

COLLECTIVE_TIMEOUT_S = 900  # far longer than the test may take: the cell must not wait for it


@pytest.mark.parametrize(
    ("framework", "backend", "rank"),
    [("torch", "native", 1), ("torch", "horovod", 1), ("tensorflow", "native", 0), ("tensorflow", "horovod", 1)],
)
def test_one_rank_out_of_memory_ends_the_cell_as_oom(prepared_data, tmp_path, framework, backend, rank):
    settings = cell_settings(framework, backend, 2, epochs=4, collective_timeout_s=COLLECTIVE_TIMEOUT_S)
    # the rank runs out of memory at the start of epoch 2, while the other goes on into its collectives;
    # ending well before the collective timeout shows that no rank waited for it
    result = launch_cell(
        settings, prepared_data, tmp_path, timeout=COLLECTIVE_TIMEOUT_S * 2 / 3, SCALEBENCH_FAULT=f"oom:{rank}:2"
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "recorded as status oom" in result.stdout
    epochs, final, run = read_records(tmp_path)
    assert (run["status"], final["status"], len(epochs)) == ("oom", "oom", 1)
    assert f"rank{rank}" in run["error"] and "injected by SCALEBENCH_FAULT" in run["error"]
    # the reason names the device and its memory, the batch and the image size
    assert "injected by SCALEBENCH_FAULT" in run["reason"] and " MB; batch_per_gpu 4, images 32x48" in run["reason"]
    assert not (tmp_path / ".oom").exists()
