"""TF_CONFIG from the launcher's environment, and the checks that stop a bad start early."""

from __future__ import annotations

import json

import pytest
from scalebench import distenv
from scalebench.tf_cluster import ClusterMismatch, resolve_tf_config, tasks_per_node


def torchrun_env(rank: int, world: int, port: int = 29400) -> dict[str, str]:
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


def slurm_env(rank: int, ntasks: int, nodes: str, per_node: str, job: str = "4242") -> dict[str, str]:
    return {
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": "0",
        "SLURM_NTASKS": str(ntasks),
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_ID": job,
        "SLURM_JOB_NODELIST": nodes,
        "SLURM_STEP_NODELIST": nodes,
        "SLURM_STEP_TASKS_PER_NODE": per_node,
    }


def resolve(env: dict[str, str], cell_ranks: int) -> dict | None:
    return resolve_tf_config(distenv.detect(env), env, cell_ranks)


def test_torchrun_workers_get_ports_after_the_master_port():
    config = resolve(torchrun_env(1, 2, port=31000), 2)
    assert config == {
        "cluster": {"worker": ["127.0.0.1:31001", "127.0.0.1:31002"]},
        "task": {"type": "worker", "index": 1},
    }


def test_two_cells_on_one_node_never_share_a_port():
    first = resolve(torchrun_env(0, 2, port=31000), 2)["cluster"]["worker"]
    second = resolve(torchrun_env(0, 2, port=31003), 2)["cluster"]["worker"]
    assert not set(first) & set(second)


def test_slurm_ranks_are_placed_in_blocks_over_the_nodes():
    config = resolve(slurm_env(3, 4, "gpu[01-02]", "2(x2)"), 4)
    hosts = [worker.split(":")[0] for worker in config["cluster"]["worker"]]
    assert hosts == ["gpu01", "gpu01", "gpu02", "gpu02"]
    ports = [int(worker.split(":")[1]) for worker in config["cluster"]["worker"]]
    assert ports == [distenv.port_for_job("4242") + 1 + rank for rank in range(4)]
    assert config["task"] == {"type": "worker", "index": 3}


def test_tasks_per_node_expands_slurm_compression():
    assert tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    with pytest.raises(ClusterMismatch, match="tasks per node"):
        tasks_per_node("two")


def test_a_single_worker_needs_no_tf_config():
    assert resolve({}, 1) is None


@pytest.mark.parametrize(
    "env, cell, message",
    [
        (torchrun_env(0, 2), 4, "WORLD_SIZE = 2 ranks, but the cell asks for 4"),
        (slurm_env(0, 2, "n[1-2]", "1(x2)"), 1, "SLURM_NTASKS = 2 ranks, but the cell asks for 1"),
        (slurm_env(0, 4, "n[1-2]", "1(x2)"), 4, "give 2"),
        ({**torchrun_env(0, 2), "LOCAL_WORLD_SIZE": "1"}, 2, "other hosts are unknown"),
        (
            {
                **torchrun_env(1, 2),
                "TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}),
            },
            2,
            "TF_CONFIG lists 1 workers but torchrun started 2",
        ),
        (
            {
                **torchrun_env(1, 2),
                "TF_CONFIG": json.dumps(
                    {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}}
                ),
            },
            2,
            "task.index = 0 but this is rank 1",
        ),
        ({**torchrun_env(0, 2), "TF_CONFIG": "{not json"}, 2, "TF_CONFIG is not valid JSON"),
    ],
)
def test_inconsistent_environment_is_refused_naming_the_mismatch(env, cell, message):
    with pytest.raises(ClusterMismatch, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve(env, cell)


def test_a_consistent_user_tf_config_is_kept():
    user = {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}
    assert resolve({**torchrun_env(1, 2), "TF_CONFIG": json.dumps(user)}, 2) == user
