"""Launcher templates, the allocation they are filled from, and config-time launcher/cluster errors."""

from __future__ import annotations

import shlex

import pytest
from conftest import tiny_config
from scalebench import config as sb_config
from scalebench import distenv
from scalebench.launch import Allocation, LaunchError, build_command, placeholders

SRUN = "srun --kill-on-bad-exit=1 --nodes={nodes} --ntasks={ranks} --ntasks-per-node={ranks_per_node} --cpus-per-task={cpus_per_rank} {python} {program}"


def slurm(hosts, cpus=8):
    return Allocation("slurm", hosts, "10.0.0.1", distenv.port_for_job("4711"), cpus)


def test_srun_command_spells_out_the_task_geometry():
    command = build_command(SRUN, 8, slurm(["gpu01", "gpu02"]), ["--out", "x y"])
    argv = shlex.split(command)
    assert argv[:6] == [
        "srun",
        "--kill-on-bad-exit=1",
        "--nodes=2",
        "--ntasks=8",
        "--ntasks-per-node=4",
        "--cpus-per-task=8",
    ]
    assert argv[-2:] == ["--out", "x y"]


def test_horovod_hosts_come_from_the_allocation_and_uneven_cells_fill_nodes_in_order():
    values = placeholders(10, slurm(["gpu01", "gpu02", "gpu03"]), "train.py")
    assert values["hosts"] == "gpu01:4,gpu02:4,gpu03:2" and values["ranks_per_node"] == 4


def test_single_node_allocation_runs_horovod_ranks_locally_without_ssh():
    assert placeholders(4, slurm(["gpu07"]), "train.py")["hosts"] == "localhost:4"


def test_more_nodes_than_ranks_is_an_error():
    with pytest.raises(LaunchError, match="2 nodes"):
        placeholders(1, slurm(["a", "b"]), "train.py")


def test_port_is_derived_from_the_job_id_and_differs_between_jobs():
    ports = {distenv.port_for_job(job) for job in range(1000, 1100)}
    assert len(ports) == 100 and all(distenv.PORT_BASE <= p < distenv.PORT_BASE + distenv.PORT_SPAN for p in ports)
    assert max(ports) < 32768  # below Linux's ephemeral range


def test_srun_rank_reads_slurm_variables_and_the_exported_rendezvous():
    env = {
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
        "SLURM_NTASKS": "4",
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_ID": "77",
        "SLURM_STEP_NODELIST": "gpu[01-02]",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "MASTER_ADDR": "10.1.1.1",
        "MASTER_PORT": "12345",
    }
    info = distenv.detect(env)
    assert (info.rank, info.local_rank, info.world_size, info.local_world_size) == (3, 1, 4, 2)
    assert (info.master_addr, info.master_port, info.launcher) == ("10.1.1.1", 12345, "srun")
    del env["MASTER_ADDR"], env["MASTER_PORT"]
    info = distenv.detect(env)
    assert (info.master_addr, info.master_port) == ("gpu01", distenv.port_for_job(77))


def test_expand_nodelist():
    assert distenv.expand_nodelist("gpu[01-03,07],login1") == ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]


def _problems(schema, **sections) -> str:
    with pytest.raises(sb_config.ConfigError) as error:
        sb_config.validate(tiny_config(**sections), schema)
    return str(error.value)


def test_unknown_launcher_placeholder_is_rejected_with_its_key(schema):
    message = _problems(schema, launchers={"slurm": {"torch_native": "srun -n {tasks} {python} {program}"}})
    assert "launchers.slurm.torch_native" in message and "{tasks}" in message


def test_gres_template_without_n_is_rejected(schema):
    assert "cluster.gres" in _problems(schema, cluster={"gres": "gpu:a100:4"})


def test_more_gpus_than_the_cluster_allows_is_rejected(schema):
    message = _problems(schema, matrix={"gpus": [1, 16]}, cluster={"max_gpus": 8})
    assert "matrix.gpus" in message and "max_gpus" in message


def test_uneven_placement_is_rejected_unless_allowed(schema):
    sections = {"matrix": {"gpus": [10]}, "dataset": {"synthetic": {"count": 200, "size": [48, 64]}}}
    message = _problems(schema, cluster={"gpus_per_node": 4}, **sections)
    assert "10 GPUs cannot be spread evenly over 3 nodes" in message and "allow_uneven" in message
    sb_config.validate(tiny_config(cluster={"gpus_per_node": 4, "allow_uneven": True}, **sections), schema)
