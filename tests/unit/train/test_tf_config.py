"""TF_CONFIG from the launcher's environment, and the checks that stop a bad start early.

The processes against the cell are the training loop's check (RankInfo.processes_source), not TF_CONFIG's.
"""

from __future__ import annotations

import json
import re

import pytest
from scalebench.cluster.ports import MAX_RANKS_PER_NODE, PORT_BLOCK, SLURM_BLOCKS, port_for_job
from scalebench.train import rank_env
from scalebench.train.tf_config import ClusterMismatch, resolve_tf_config


def torchrun_env(rank: int, world: int, port: int = 29400) -> dict[str, str]:
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


def slurm_env(rank: int, ntasks: int, nodes: str, per_node: str, job: str | int = "4242") -> dict[str, str]:
    return {
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": "0",
        "SLURM_NTASKS": str(ntasks),
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_ID": str(job),
        "SLURM_JOB_NODELIST": nodes,
        "SLURM_STEP_NODELIST": nodes,
        "SLURM_STEP_TASKS_PER_NODE": per_node,
    }


def resolve(env: dict[str, str]) -> dict | None:
    return resolve_tf_config(rank_env.detect(env), env)


def test_torchrun_workers_get_ports_after_the_master_port():
    config = resolve(torchrun_env(1, 2, port=31000))
    assert config == {
        "cluster": {"worker": ["127.0.0.1:31001", "127.0.0.1:31002"]},
        "task": {"type": "worker", "index": 1},
    }


def ports_on(config: dict, host: str) -> set[int]:
    return {int(w.rsplit(":", 1)[1]) for w in config["cluster"]["worker"] if w.rsplit(":", 1)[0] == host}


@pytest.mark.parametrize("ranks", [2, 8, 63, 64])
def test_cells_of_consecutive_jobs_on_one_node_never_share_a_port(ranks):
    """Every port a cell listens on (its rendezvous and its workers) lies in its job's block."""
    used = {}
    for job in range(9000, 9000 + SLURM_BLOCKS):
        config = resolve(slurm_env(0, ranks, "gpu01", str(ranks), job=job))
        used[job] = {port_for_job(job)} | ports_on(config, "gpu01")
        assert len(used[job]) == ranks + 1
    # SLURM_BLOCKS consecutive job ids: no port is used twice
    assert len(set().union(*used.values())) == sum(len(ports) for ports in used.values())


def test_any_number_of_ranks_fits_the_block_at_most_64_per_node():
    config = resolve(slurm_env(0, 4 * MAX_RANKS_PER_NODE, "gpu[01-04]", f"{MAX_RANKS_PER_NODE}(x4)", job=77))
    start = port_for_job(77)
    for host in ("gpu01", "gpu04"):
        assert ports_on(config, host) == set(range(start + 1, start + PORT_BLOCK))


def test_more_workers_on_a_node_than_the_block_holds_is_refused():
    with pytest.raises(ClusterMismatch, match="65 TensorFlow workers on one address"):
        resolve(slurm_env(0, 65, "gpu01", "65"))


def test_node_names_on_one_address_get_distinct_ports():
    """A test cluster runs several slurmd on one host: its node names share an address."""
    env = {**slurm_env(0, 4, "sbnode[1-2]", "2(x2)"), "SCALEBENCH_NODE_ADDRS": "sbnode1=127.0.0.1,sbnode2=127.0.0.1"}
    ports = [int(w.rsplit(":", 1)[1]) for w in resolve(env)["cluster"]["worker"]]
    assert len(set(ports)) == 4
    apart = slurm_env(0, 4, "gpu[01-02]", "2(x2)")
    assert ports_on(resolve(apart), "gpu01") == ports_on(resolve(apart), "gpu02")


def test_slurm_ranks_are_placed_in_blocks_over_the_nodes():
    config = resolve(slurm_env(3, 4, "gpu[01-02]", "2(x2)"))
    hosts = [worker.split(":")[0] for worker in config["cluster"]["worker"]]
    assert hosts == ["gpu01", "gpu01", "gpu02", "gpu02"]
    ports = [int(worker.split(":")[1]) for worker in config["cluster"]["worker"]]
    start = port_for_job("4242")
    assert ports == [start + 1, start + 2, start + 1, start + 2]  # per node: the workers of one address
    assert config["task"] == {"type": "worker", "index": 3}


def test_slurm_ranks_on_an_uneven_layout_take_their_nodes_hosts():
    config = resolve(slurm_env(9, 10, "gpu[01-03]", "4(x2),2"))
    hosts = [worker.split(":")[0] for worker in config["cluster"]["worker"]]
    assert hosts == ["gpu01"] * 4 + ["gpu02"] * 4 + ["gpu03"] * 2


def test_tasks_per_node_that_do_not_fit_the_node_list_are_a_mismatch():
    place = rank_env.RankInfo(0, 0, 6, 2, "n1", 12345, "srun")
    with pytest.raises(ClusterMismatch, match=re.escape("SLURM lists 2 nodes but tasks per node '2(x3)'")):
        resolve_tf_config(place, slurm_env(0, 6, "n[1-2]", "2(x3)"))


def test_a_single_worker_needs_no_tf_config():
    assert resolve({}) is None


@pytest.mark.parametrize(
    "env, message",
    [
        (slurm_env(0, 4, "n[1-2]", "1(x2)"), "give 2"),
        ({**torchrun_env(0, 2), "LOCAL_WORLD_SIZE": "1"}, "other hosts are unknown"),
        ({**torchrun_env(2, 2)}, "rank 2 is outside a world of 2"),
        (
            {
                **torchrun_env(1, 2),
                "TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}),
            },
            "TF_CONFIG lists 1 workers but torchrun started 2",
        ),
        (
            {
                **torchrun_env(1, 2),
                "TF_CONFIG": json.dumps(
                    {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}}
                ),
            },
            "task.index = 0 but this is rank 1",
        ),
        ({**torchrun_env(0, 2), "TF_CONFIG": "{not json"}, "TF_CONFIG is not valid JSON"),
    ],
)
def test_inconsistent_environment_is_refused_naming_the_mismatch(env, message):
    with pytest.raises(ClusterMismatch, match=re.escape(message)):
        resolve(env)


def test_a_consistent_user_tf_config_is_kept():
    user = {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}
    assert resolve({**torchrun_env(1, 2), "TF_CONFIG": json.dumps(user)}) == user
