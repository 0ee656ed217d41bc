"""SCALEBENCH_FAULT's hooks (train/faults.py): the rank's plan, read once from its environment,
holds every comma-separated entry, whichever comes first."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys

import pytest
from conftest import SCRIPTS
from scalebench.train import faults

SEVERAL = "meet:/tmp/x:2,lr:2:3,collectives_fail:1,slow_loader:0.5:1,precision_off,slow_reduce:0:0.25:2"


def test_every_entry_of_several_is_read():
    plan = faults.FaultPlan.of_rank({"SCALEBENCH_FAULT": SEVERAL})
    assert [kind for kind, _ in plan.entries] == [
        "meet",
        "lr",
        "collectives_fail",
        "slow_loader",
        "precision_off",
        "slow_reduce",
    ]
    # lr and collectives_fail are not the first entry, and still apply
    assert plan.learning_rate(0.001, 1) == pytest.approx(0.003) and plan.learning_rate(0.001, 0) == 0.001
    with pytest.raises(RuntimeError, match=r"^injected by SCALEBENCH_FAULT=collectives_fail:1$"):
        plan.collective_failure(1, "all_reduce")
    plan.collective_failure(0, "all_reduce")  # another rank prepares as usual
    assert plan.precision_off()
    assert plan.delays(0, 1) == faults.Delays(reduce_s=0.25, loader_s=0.0)
    assert plan.delays(1, 0) == faults.Delays(loader_s=0.5)


def test_an_lr_entry_among_two_scales_by_each_of_its_epoch():
    plan = faults.FaultPlan.parse("lr:1:2,lr:1:5,lr:3:0.5")
    assert plan.learning_rate(1.0, 0) == pytest.approx(10.0)
    assert plan.learning_rate(1.0, 2) == pytest.approx(0.5)
    other = faults.FaultPlan.parse("stall:9")
    assert not other.precision_off() and other.learning_rate(1.0, 0) == 1.0


def test_a_rank_without_the_variable_gets_the_empty_plan_which_changes_nothing(tmp_path):
    plan = faults.FaultPlan.of_rank({})
    assert plan.entries == faults.FaultPlan.parse(",").entries == () and not plan.injects("slow_compute")
    plan.check(0, 0, resumed=False, out_of_memory=RuntimeError)  # no stall, no limit: returns at once
    plan.collective_failure(0, "all_reduce")
    assert plan.learning_rate(0.5, 0) == 0.5 and plan.delays(0, 0, "torch/dp/g1/s1") == faults.Delays()
    assert plan.checkpoint_folder(0, tmp_path) == tmp_path and not plan.precision_off()


def test_an_injected_out_of_memory_names_the_variable_and_its_entry():
    plan = faults.FaultPlan.parse("stall:9,oom:1:2")
    plan.check(1, 0, resumed=False, out_of_memory=MemoryError)  # epoch 1: not yet
    with pytest.raises(MemoryError, match=r"^out of memory \(injected by SCALEBENCH_FAULT=oom:1:2\)$"):
        plan.check(1, 1, resumed=False, out_of_memory=MemoryError)


DISK_FULL = """
import errno, os, sys
from scalebench.train import faults
plan = faults.FaultPlan.of_rank(os.environ)
plan.check(0, 1, resumed=False, out_of_memory=RuntimeError)  # epoch 2 starts: the limit applies
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


def test_slow_cell_slows_every_rank_of_the_cells_it_names_in_every_epoch():
    """The rounds' tests slow some cells of a run (analysis/rounds.py): one backend's, one seed's; the
    entries add up, with a slow host's delay too; the other cells' ranks are untouched."""
    plan = faults.FaultPlan.parse("slow_host:elsewhere:1.0,slow_cell:*/dp/*:0.5,slow_cell:*/s1:0.25", host="n1")
    assert plan.delays(0, 0, "torch/dp/g1/s2") == plan.delays(1, 7, "torch/dp/g2/s2") == faults.Delays(compute_s=0.5)
    assert plan.delays(0, 0, "torch/dp/g1/s1") == faults.Delays(compute_s=0.75)
    assert plan.delays(0, 0, "torch/native/g1/s1") == faults.Delays(compute_s=0.25)
    assert plan.delays(0, 0, "torch/native/g1/s2") == plan.delays(0, 0) == faults.Delays()
    assert plan.injects("slow_compute") and not plan.injects("slow_reduce")
    # on the node slow_host names, every cell's ranks compute longer, a slow cell's by both
    on_elsewhere = dataclasses.replace(plan, host="elsewhere")
    assert on_elsewhere.delays(0, 0, "torch/native/g1/s2") == faults.Delays(compute_s=1.0)
    assert on_elsewhere.delays(0, 0, "torch/dp/g1/s1") == faults.Delays(compute_s=1.75)


def test_the_rank_s_epoch_delays_move_on_with_the_plan_they_were_handed():
    delays = faults.EpochDelays(faults.FaultPlan.parse("slow_compute:1:0.5:2,slow_loader:0.1:2"), 1, "torch/dp/g2/s1")
    assert delays.now == faults.Delays() and delays.start_epoch(0) == faults.Delays()
    assert delays.start_epoch(1) == delays.now == faults.Delays(compute_s=0.5, loader_s=0.1)
    assert faults.EpochDelays(faults.NO_FAULTS, 1).start_epoch(1) == faults.Delays()


def test_only_the_rank_s_entry_reads_the_plan_and_no_module_below_it_names_the_variable():
    """The plan is read once, where the rank starts (entry.py run_rank), and handed to the loop and the
    builders: no other module under train/ reads it or looks the variable up itself."""
    train = SCRIPTS / "scalebench" / "train"
    sources = {str(path.relative_to(train)): path.read_text() for path in sorted(train.rglob("*.py"))}
    assert [name for name, text in sources.items() if "FaultPlan.of_rank(" in text] == ["entry.py"]
    naming = [
        name
        for name, text in sources.items()
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Constant) and node.value == faults.VARIABLE
    ]
    assert naming == ["faults.py"]
