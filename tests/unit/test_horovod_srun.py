"""Horovod ranks started by srun: the plan and each rank's HOROVOD_* variables."""

import pytest
from scalebench.horovod_srun import adopt_srun_rank, host_plan


def test_plan_follows_srun_block_distribution():
    assert host_plan(["n1", "n2"], 4) == [("n1", 2), ("n2", 2)]
    assert host_plan(["n1", "n2", "n3"], 5) == [("n1", 2), ("n2", 2), ("n3", 1)]
    assert host_plan(["n1"], 3) == [("n1", 3)]


def srun_env(**extra):
    return {
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1",
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "1",
        "SLURM_STEP_NUM_TASKS": "4",
        "SLURM_NTASKS": "4",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "SLURM_STEP_NUM_NODES": "2",
        "SLURMD_NODENAME": "localhost",
        **extra,
    }


def test_rank_takes_its_place_from_srun():
    env = srun_env()
    assert adopt_srun_rank(env)
    assert {k: env[k] for k in env if k.startswith("HOROVOD_") and k != "HOROVOD_GLOO_RENDEZVOUS_ADDR"} == {
        "HOROVOD_HOSTNAME": "localhost",
        "HOROVOD_RANK": "3",
        "HOROVOD_SIZE": "4",
        "HOROVOD_LOCAL_RANK": "1",
        "HOROVOD_LOCAL_SIZE": "2",
        "HOROVOD_CROSS_RANK": "1",
        "HOROVOD_CROSS_SIZE": "2",
        "HOROVOD_GLOO_IFACE": "lo",  # localhost resolves to the loopback interface
    }


@pytest.mark.parametrize("present", ["HOROVOD_RANK", "no-rendezvous", "no-srun"])
def test_other_launchers_are_left_alone(present):
    env = srun_env(HOROVOD_RANK="0") if present == "HOROVOD_RANK" else srun_env()
    if present == "no-rendezvous":
        del env["HOROVOD_GLOO_RENDEZVOUS_ADDR"]
    if present == "no-srun":
        del env["SLURM_PROCID"]
    before = dict(env)
    assert not adopt_srun_rank(env)
    assert env == before
