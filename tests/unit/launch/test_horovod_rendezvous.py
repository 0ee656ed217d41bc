"""Horovod ranks started by srun: the rendezvous plan and each rank's HOROVOD_* variables, and the
rendezvous server on the cell's port block. Horovod's runner (its rendezvous and its plan) is in each
framework's environment, not the pipeline's: these tests run in torch's."""

import json
import subprocess
import urllib.request

import pytest
from conftest import cell_settings, rank_command, tool_env
from scalebench.cluster import ports
from scalebench.cluster.slurm import block_distribution
from scalebench.train.rank_env import LayoutMismatch, adopt_srun_rank

ENVIRONMENT = "torch"  # Horovod's runner, which horovod_srun.py runs in the cell's framework's environment


def test_plan_follows_srun_block_distribution():
    assert block_distribution(4, 2) == [2, 2]
    assert block_distribution(5, 3) == [2, 2, 1]
    assert block_distribution(3, 1) == [3]


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


def horovod_variables(env):
    return {k: env[k] for k in env if k.startswith("HOROVOD_") and k != "HOROVOD_GLOO_RENDEZVOUS_ADDR"}


def test_rank_takes_its_place_from_srun():
    env = srun_env()
    assert adopt_srun_rank(env)
    assert horovod_variables(env) == {
        "HOROVOD_HOSTNAME": "localhost",
        "HOROVOD_RANK": "3",
        "HOROVOD_SIZE": "4",
        "HOROVOD_LOCAL_RANK": "1",
        "HOROVOD_LOCAL_SIZE": "2",
        "HOROVOD_CROSS_RANK": "1",
        "HOROVOD_CROSS_SIZE": "2",
        "HOROVOD_GLOO_IFACE": "lo",  # localhost resolves to the loopback interface
    }


def uneven_env(rank: int) -> dict[str, str]:
    """Rank `rank` of 10 over 3 nodes laid out 4, 4, 2 (a cell of 10 GPUs on 4-GPU nodes), as srun sets it."""
    node, local = min(rank // 4, 2), rank - 4 * min(rank // 4, 2)
    return srun_env(
        SLURMD_NODENAME=f"n{node + 1}",
        SLURM_STEP_NODELIST="n[1-3]",
        SLURM_PROCID=str(rank),
        SLURM_LOCALID=str(local),
        SLURM_NODEID=str(node),
        SLURM_STEP_NUM_TASKS="10",
        SLURM_NTASKS="10",
        SLURM_STEP_TASKS_PER_NODE="4(x2),2",
        SLURM_STEP_NUM_NODES="3",
        HOROVOD_GLOO_IFACE="lo",
    )


def test_uneven_layout_gives_each_node_its_own_local_size():
    first, last = uneven_env(0), uneven_env(9)
    assert adopt_srun_rank(first) and adopt_srun_rank(last)
    assert first["HOROVOD_LOCAL_SIZE"] == "4" and last["HOROVOD_LOCAL_SIZE"] == "2"
    # local rank 3 exists on the first two nodes only
    third_local = uneven_env(7)
    adopt_srun_rank(third_local)
    assert (third_local["HOROVOD_CROSS_RANK"], third_local["HOROVOD_CROSS_SIZE"]) == ("1", "2")
    assert (last["HOROVOD_CROSS_RANK"], last["HOROVOD_CROSS_SIZE"]) == ("2", "3")


def test_uneven_layout_agrees_with_the_rendezvous_plan():
    hosts = pytest.importorskip("horovod.runner.common.util.hosts")
    names = ["n1", "n2", "n3"]
    plan = hosts.get_host_assignments(
        [hosts.HostInfo(h, n) for h, n in zip(names, block_distribution(10, 3), strict=True)], 10
    )
    for slot in plan:
        env = uneven_env(slot.rank)
        adopt_srun_rank(env)
        expected = (slot.rank, slot.size, slot.local_rank, slot.local_size, slot.cross_rank, slot.cross_size)
        keys = ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE")
        assert tuple(int(env[f"HOROVOD_{k}"]) for k in keys) == expected


@pytest.mark.parametrize("rank", range(10))
def test_every_rank_of_an_uneven_layout_that_srun_placed_as_planned_gets_its_true_place(rank):
    env = {**uneven_env(rank), "SCALEBENCH_HOROVOD_PLAN": "n1:4,n2:4,n3:2"}  # what horovod_srun.py planned
    assert adopt_srun_rank(env)
    node, local = min(rank // 4, 2), rank - 4 * min(rank // 4, 2)
    assert env["HOROVOD_HOSTNAME"] == f"n{node + 1}"
    assert (env["HOROVOD_RANK"], env["HOROVOD_SIZE"]) == (str(rank), "10")
    assert (env["HOROVOD_LOCAL_RANK"], env["HOROVOD_LOCAL_SIZE"]) == (str(local), "2" if node == 2 else "4")


@pytest.mark.parametrize("rank", [0, 4, 9])
def test_a_layout_other_than_the_rendezvous_plan_stops_every_rank_with_both_layouts(rank):
    """An older SLURM spreads 10 tasks over three 4-task nodes as 4, 3, 3, not in blocks."""
    node = 0 if rank < 4 else 1 if rank < 7 else 2
    env = {
        **uneven_env(rank),
        "SLURM_STEP_TASKS_PER_NODE": "4,3(x2)",
        "SLURM_NODEID": str(node),
        "SLURM_LOCALID": str(rank - [0, 4, 7][node]),
        "SCALEBENCH_HOROVOD_PLAN": "n1:4,n2:4,n3:2",
    }
    with pytest.raises(LayoutMismatch, match=r"placed the ranks as n1:4,n2:3,n3:3 but .* n1:4,n2:4,n3:2"):
        adopt_srun_rank(env)
    assert "HOROVOD_RANK" not in env


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


def test_a_rank_placed_against_the_plan_fails_its_cell_before_training(tmp_path):
    """rank 0 of a real train.py, started as srun would on a SLURM that spread 10 tasks 4, 3, 3."""
    env = {
        **uneven_env(0),
        "SLURM_STEP_TASKS_PER_NODE": "4,3(x2)",
        "SLURM_STEP_ID": "0",
        "SCALEBENCH_HOROVOD_PLAN": "n1:4,n2:4,n3:2",
    }
    command = rank_command(cell_settings("torch", "horovod", 10), tmp_path / "no-data", tmp_path / "out")
    result = subprocess.run(command, env=tool_env(**env), capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "rank 0: failed: srun placed the ranks as n1:4,n2:3,n3:3" in result.stderr
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["status"] == "failed" and "LayoutMismatch" in run["error"]


def test_horovod_rendezvous_listens_on_the_cells_block(tmp_path):
    pytest.importorskip("horovod", reason="Horovod is built by ./install.sh")
    from scalebench.launch.horovod_rendezvous import start_rendezvous

    port = ports.reserve_local_block(tmp_path)
    server = start_rendezvous(port)
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/global/key", data=b"value", method="PUT")
        urllib.request.urlopen(request, timeout=10).close()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/global/key", timeout=10) as answer:
            assert answer.read() == b"value"
    finally:
        server.stop()
