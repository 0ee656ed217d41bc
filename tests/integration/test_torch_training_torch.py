"""PyTorch's cells where the test needs torch in its own process: a checkpoint written by torch itself
(from another config) for a cell to ignore, and the rank's message where Horovod cannot be imported
(the rest of PyTorch's training: test_torch_training.py)."""

from __future__ import annotations

import sys

import pytest
import torch
from conftest import cell_settings, launch_cell

ENVIRONMENT = "torch"

pytestmark = pytest.mark.integration


def test_checkpoint_from_another_config_or_truncated_is_ignored(prepared_data, tmp_path):
    (tmp_path / "checkpoint.pt").write_bytes(b"PK\x03\x04 truncated")
    result = launch_cell(cell_settings("torch", "native", 1, epochs=1), prepared_data, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "ignoring unreadable checkpoint" in result.stderr
    torch.save({"config_hash": "0123456789abcdef", "epoch": 1}, tmp_path / "checkpoint.pt")
    result = launch_cell(cell_settings("torch", "native", 1, epochs=1), prepared_data, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "written for config 0123456789abcdef" in result.stderr
    assert "resuming" not in result.stdout


def test_missing_horovod_names_the_fix(monkeypatch):
    from scalebench.settings import RunSettings
    from scalebench.train import rank_env
    from scalebench.train.torch import horovod as torch_horovod

    monkeypatch.setitem(sys.modules, "horovod.torch", None)  # as if Horovod were not installed
    run = RunSettings.from_json(cell_settings("torch", "horovod", 1), "data", "out")
    with pytest.raises(RuntimeError, match=r"cannot import horovod.torch .*run ./install.sh"):
        torch_horovod.create(run, rank_env.detect({}), "cpu", False)
