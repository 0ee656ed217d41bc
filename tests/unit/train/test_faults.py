"""SCALEBENCH_FAULT's hooks (train/faults.py) read every comma-separated entry, whichever comes first."""

from __future__ import annotations

import subprocess
import sys

import pytest
from scalebench.train import faults

SEVERAL = "meet:/tmp/x:2,lr:2:3,collectives_fail:1,slow_loader:0.5:1,precision_off,slow_reduce:0:0.25:2"


def test_every_entry_of_several_is_read(monkeypatch):
    monkeypatch.setenv("SCALEBENCH_FAULT", SEVERAL)
    assert [kind for kind, _ in faults.faults()] == [
        "meet",
        "lr",
        "collectives_fail",
        "slow_loader",
        "precision_off",
        "slow_reduce",
    ]
    # lr and collectives_fail are not the first entry, and still apply
    assert faults.learning_rate(0.001, 1) == pytest.approx(0.003) and faults.learning_rate(0.001, 0) == 0.001
    with pytest.raises(RuntimeError, match="collectives_fail:1"):
        faults.collective_failure(1, "all_reduce")
    faults.collective_failure(0, "all_reduce")  # another rank prepares as usual
    assert faults.precision_off()
    assert faults.delays(0, 1) == faults.Delays(reduce_s=0.25, loader_s=0.0)
    assert faults.delays(1, 0) == faults.Delays(loader_s=0.5)


def test_an_lr_entry_among_two_scales_by_each_of_its_epoch(monkeypatch):
    monkeypatch.setenv("SCALEBENCH_FAULT", "lr:1:2,lr:1:5,lr:3:0.5")
    assert faults.learning_rate(1.0, 0) == pytest.approx(10.0)
    assert faults.learning_rate(1.0, 2) == pytest.approx(0.5)
    monkeypatch.setenv("SCALEBENCH_FAULT", "stall:9")
    assert not faults.precision_off() and faults.learning_rate(1.0, 0) == 1.0


DISK_FULL = """
import errno, os, sys
from scalebench.train import faults
faults.check(0, 1, resumed=False, out_of_memory=RuntimeError)  # epoch 2 starts: the limit applies
try:
    with open(sys.argv[1], "w") as handle:
        handle.write("x" * 5000)
except OSError as error:
    print(errno.errorcode[error.errno])
"""


def test_disk_full_limits_rank_0_s_files_from_its_epoch_on(tmp_path):
    # in a process of its own: the limit stays with the process that set it
    env = {
        "SCALEBENCH_FAULT": "stall:9,disk_full:2:4096",
        "PYTHONPATH": str(faults.__file__).rsplit("/scalebench", 1)[0],
    }
    result = subprocess.run(
        [sys.executable, "-c", DISK_FULL, str(tmp_path / "big")], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "files of rank 0 limited to 4096 bytes (SCALEBENCH_FAULT=disk_full:2:4096)" in result.stdout
    assert result.stdout.strip().endswith("EFBIG"), result.stdout
    assert (tmp_path / "big").stat().st_size == 4096


def test_slow_cell_slows_every_rank_of_the_cells_it_names_in_every_epoch(monkeypatch):
    """The rounds' tests slow some cells of a run (analysis/rounds.py): one backend's, one seed's; the
    entries add up, with a slow host's delay too; the other cells' ranks are untouched."""
    monkeypatch.setenv("SCALEBENCH_FAULT", "slow_host:elsewhere:1.0,slow_cell:*/dp/*:0.5,slow_cell:*/s1:0.25")
    assert (
        faults.delays(0, 0, "torch/dp/g1/s2") == faults.delays(1, 7, "torch/dp/g2/s2") == faults.Delays(compute_s=0.5)
    )
    assert faults.delays(0, 0, "torch/dp/g1/s1") == faults.Delays(compute_s=0.75)
    assert faults.delays(0, 0, "torch/native/g1/s1") == faults.Delays(compute_s=0.25)
    assert faults.delays(0, 0, "torch/native/g1/s2") == faults.delays(0, 0) == faults.Delays()
    assert faults.injects("slow_compute") and not faults.injects("slow_reduce")
