"""cluster.network_interface through launch.py: a cell trains over the interface and records it; an
interface the node lacks refuses the cell before any rank starts."""

from __future__ import annotations

import json

import pytest
from conftest import cell_settings, launch_cell
from paired_cells import launch_output, trained_once, unmeasured_over_loopback
from scalebench.launch import accounting

pytestmark = pytest.mark.integration


def test_a_cell_trains_over_the_interface_and_records_it(prepared_data, tmp_path_factory):
    # test_data_placement's DDP host cell, which test_collectives reads for a benchmark of no budget,
    # trained once per run (paired_cells.py)
    out = trained_once(tmp_path_factory, unmeasured_over_loopback(), prepared_data)
    assert "--master-addr=127.0.0.1" in launch_output(out)
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "ok" and run["network_interface"] == "lo"
    # a local run has no SLURM accounting: empty with the reason, never 0
    assert (run["alloc_gpu_hours"], run["step_energy_j"]) == (None, None)
    assert run["alloc_gpu_hours_reason"] == run["step_energy_reason"] == accounting.NOT_SLURM


def test_an_interface_the_node_lacks_refuses_the_cell_at_its_first_attempt(prepared_data, tmp_path):
    settings = {**cell_settings("torch", "native", 2, epochs=1), "network_interface": "nosuch0"}
    result = launch_cell(settings, prepared_data, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr  # refused: recorded, not retried
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["status"] == "refused"
    assert "cluster.network_interface is 'nosuch0'" in run["reason"] and "lo (127.0.0.1)" in run["reason"]
    assert "torch.distributed.run" not in result.stdout  # no rank was started (torchrun, as torch's Python runs it)
