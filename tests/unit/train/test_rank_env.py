"""A rank's place from its launcher's variables: torchrun, Horovod, srun, or none."""

from __future__ import annotations

import subprocess

import pytest
from conftest import SCRIPTS, framework_python
from scalebench.cluster.slurm import SlurmError, port_for_job
from scalebench.train import rank_env


def srun_env(**extra: str) -> dict[str, str]:
    return {
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "1",
        "SLURM_NTASKS": "4",
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_ID": "77",
        "SLURM_STEP_NODELIST": "gpu[01-02]",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "MASTER_ADDR": "10.1.1.1",
        "MASTER_PORT": "12345",
        **extra,
    }


def place(info: rank_env.RankInfo) -> tuple:
    return info.rank, info.local_rank, info.processes, info.local_processes, info.launcher


def test_srun_rank_reads_slurm_variables_and_the_exported_rendezvous():
    env = srun_env()
    info = rank_env.detect(env)
    assert place(info) == (3, 1, 4, 2, "srun")
    assert (info.master_addr, info.master_port) == ("10.1.1.1", 12345)
    del env["MASTER_ADDR"], env["MASTER_PORT"]
    info = rank_env.detect(env)
    assert (info.master_addr, info.master_port) == ("gpu01", port_for_job(77))


def test_srun_rank_on_the_short_node_of_an_uneven_layout_gets_its_true_local_size():
    env = srun_env(
        SLURM_PROCID="9",
        SLURM_LOCALID="1",
        SLURM_NODEID="2",
        SLURM_NTASKS="10",
        SLURM_STEP_NODELIST="gpu[01-03]",
        SLURM_STEP_TASKS_PER_NODE="4(x2),2",
    )
    assert place(rank_env.detect(env)) == (9, 1, 10, 2, "srun")
    assert rank_env.detect({**env, "SLURM_NODEID": "0"}).local_processes == 4


def test_unreadable_tasks_per_node_is_refused():
    with pytest.raises(SlurmError, match="tasks per node 'two'"):
        rank_env.detect(srun_env(SLURM_STEP_TASKS_PER_NODE="two"))


def test_horovod_variables_are_read_before_srun_and_after_torchrun():
    horovod = {"HOROVOD_RANK": "5", "HOROVOD_SIZE": "10", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "4"}
    assert place(rank_env.detect({**srun_env(), **horovod})) == (5, 1, 10, 4, "horovod")
    torchrun = {"RANK": "0", "WORLD_SIZE": "2"}
    assert rank_env.detect({**horovod, **torchrun}).launcher == "torchrun"
    info = rank_env.detect({"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2"})
    assert place(info) == (0, 0, 2, 2, "horovod")
    assert (info.master_addr, info.master_port) == ("127.0.0.1", 29500)


@pytest.mark.parametrize(
    ("env", "source"),
    [
        ({"RANK": "0", "WORLD_SIZE": "2"}, "WORLD_SIZE"),
        ({"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2"}, "HOROVOD_SIZE"),
        (srun_env(), "SLURM_NTASKS"),
        ({}, "the launcher"),
    ],
)
def test_the_process_count_names_its_source(env, source):
    info = rank_env.detect(env)
    assert info.processes_source == source == rank_env.PROCESSES_SOURCES[info.launcher]


def test_one_process_without_launcher_is_rank_0_of_1():
    assert place(rank_env.detect({})) == (0, 0, 1, 1, "single")


def test_a_rank_imports_neither_the_launcher_nor_the_rendezvous():
    # in a rank's own environment, torch's, where Horovod is installed and could be imported
    code = (
        "import sys; import scalebench.train.rank_env, scalebench.train.tf_config; "
        "print(sorted(m for m in sys.modules if m.startswith(('scalebench', 'horovod'))))"
    )
    loaded = subprocess.run(
        [framework_python("torch"), "-c", code], capture_output=True, text=True, check=True, cwd=SCRIPTS
    ).stdout
    assert "launcher" not in loaded and "horovod_rendezvous" not in loaded and "horovod'" not in loaded
