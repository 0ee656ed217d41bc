"""A rank that runs out of memory ends its whole cell at once with status oom, for every backend."""

from __future__ import annotations

import pytest
from conftest import cell_settings, launch_cell, read_records

pytestmark = pytest.mark.integration

COLLECTIVE_TIMEOUT_S = 900  # far longer than the test may take: the cell must not wait for it


@pytest.mark.parametrize(
    ("framework", "backend"),
    [("torch", "native"), ("torch", "horovod"), ("tensorflow", "native"), ("tensorflow", "horovod")],
)
def test_one_rank_out_of_memory_ends_the_cell_as_oom(prepared_data, tmp_path, framework, backend):
    settings = cell_settings(framework, backend, 2, epochs=4, collective_timeout_s=COLLECTIVE_TIMEOUT_S)
    # rank 1 runs out of memory at the start of epoch 2, while rank 0 goes on into its collectives;
    # ending well before the collective timeout shows that no rank waited for it
    result = launch_cell(
        settings, prepared_data, tmp_path, timeout=COLLECTIVE_TIMEOUT_S * 2 / 3, SCALEBENCH_FAULT="oom:1:2"
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "recorded as status oom" in result.stdout
    epochs, final, run = read_records(tmp_path)
    assert (run["status"], final["status"], len(epochs)) == ("oom", "oom", 1)
    assert "rank1" in run["error"] and "injected by SCALEBENCH_FAULT" in run["error"]
    # the reason names the device and its memory, the batch and the image size
    assert "injected by SCALEBENCH_FAULT" in run["reason"] and " MB; batch_per_gpu 4, images 32x48" in run["reason"]
    assert not (tmp_path / ".oom").exists()
