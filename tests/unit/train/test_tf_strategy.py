"""training.tf_strategy: auto follows the launcher (one process: mirrored; one per GPU: multiworker)."""

from __future__ import annotations

import pytest
from conftest import REPO
from scalebench import config as sb_config
from scalebench.launch import launcher, rank_env
from scalebench.launch.slurm import Allocation
from scalebench.train.loop import LaunchMismatch, check_launch
from scalebench.train.tf.native import StrategyBackend

ONE_PROCESS = rank_env.detect({})
TWO_RANKS = rank_env.detect(
    {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
)


def test_auto_is_mirrored_in_one_process_and_multiworker_in_several():
    alone, together = StrategyBackend(ONE_PROCESS, "auto"), StrategyBackend(TWO_RANKS, "auto")
    assert (alone.kind, together.kind) == ("mirrored", "multiworker")
    # a 2-GPU cell may be started either way, and the loop accepts both
    check_launch(ONE_PROCESS.world_size, ONE_PROCESS.world_size_source, alone, 2)
    check_launch(TWO_RANKS.world_size, TWO_RANKS.world_size_source, together, 2)
    with pytest.raises(LaunchMismatch, match=r"^WORLD_SIZE = 2 ranks, but the cell asks for 4 GPUs$"):
        check_launch(TWO_RANKS.world_size, TWO_RANKS.world_size_source, together, 4)


def test_explicit_strategies_do_not_follow_the_launcher():
    assert StrategyBackend(TWO_RANKS, "mirrored").kind == "mirrored"
    assert StrategyBackend(ONE_PROCESS, "multiworker").kind == "multiworker"
    with pytest.raises(LaunchMismatch, match=r"native drives from 1 process\(es\)"):
        check_launch(TWO_RANKS.world_size, TWO_RANKS.world_size_source, StrategyBackend(TWO_RANKS, "mirrored"), 2)


@pytest.mark.parametrize("executor", ["local", "slurm"])
def test_default_templates_start_one_process_per_gpu_so_auto_is_multiworker(executor):
    templates = sb_config.validate({}, sb_config.load_schema(REPO / "config" / "schema.yaml"))["launchers"]
    allocation = Allocation(executor, ["node1"], "10.0.0.1", 29500, 4)
    command = launcher.build_command(templates[executor]["tensorflow_native"], 4, allocation, [])
    assert ("--nproc-per-node=4" if executor == "local" else "--ntasks=4") in command
