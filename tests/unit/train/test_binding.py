"""How a rank chooses its cores from what launch.py tells it, and what run.json records of it."""

from __future__ import annotations

from conftest import REPO
from scalebench.cluster import cpu_binding, gpu_ids, nvidia_smi
from scalebench.train import binding
from scalebench.train.rank_env import RankInfo

TOPOLOGY = nvidia_smi.parse_topology((REPO / "tests/fixtures/nvidia-smi/topo-4xh100.txt").read_text())


def place(local_rank: int, ranks: int) -> RankInfo:
    return RankInfo(local_rank, local_rank, ranks, ranks, "127.0.0.1", 30000, "torchrun")


def decide(local_rank, ranks, env, mine=tuple(range(64)), per_process=1, gpu_binding="node", topology=None):
    return binding.decide(place(local_rank, ranks), per_process, gpu_binding, env, list(mine), lambda: topology)


def test_without_launch_py_or_with_none_the_os_places_the_threads():
    assert decide(0, 1, {}) == (
        binding.Binding(None, None, "started without launch.py: the OS places its threads"),
        None,
    )
    assert decide(0, 1, {cpu_binding.BIND: "none"}) == (
        binding.Binding("none", None, "cluster.cpu_binding: none"),
        None,
    )
    unbound = {cpu_binding.BIND: "cores", cpu_binding.UNBOUND: "launch.py held no cores for the ranks: ..."}
    assert decide(0, 2, unbound)[0].reason.startswith("launch.py held no cores")


def test_a_local_cell_s_ranks_share_out_the_cores_launch_py_holds():
    env = {cpu_binding.BIND: "cores", cpu_binding.SHARE: "2", cpu_binding.CELL_CPUS: "4-7"}
    assert [decide(rank, 2, env)[1] for rank in (0, 1)] == [[4, 5], [6, 7]]
    assert decide(0, 2, env)[0] == binding.Binding("cores", "launch.py")
    too_few = decide(0, 3, env)
    assert too_few[1] is None and "3 process(es) of 2 core(s) each do not fit the 4 core(s) 4-7" in too_few[0].reason


def test_each_rank_takes_the_cores_nearest_its_gpu_where_the_topology_is_known():
    # ranks of the GPUs 2 and 0 (CUDA_VISIBLE_DEVICES order): NUMA node 1 (16-31,48-63) and node 0
    env = {
        cpu_binding.BIND: "cores",
        cpu_binding.SHARE: "4",
        cpu_binding.CELL_CPUS: "0-63",
        "CUDA_VISIBLE_DEVICES": "2,0",
    }
    shares = [decide(rank, 2, env, topology=TOPOLOGY)[1] for rank in (0, 1)]
    assert shares == [[16, 17, 18, 19], [0, 1, 2, 3]]
    # a one-process backend (dp) over GPUs 0 and 2 is near the cores of both
    assert binding.near_cores(1, 2, {"CUDA_VISIBLE_DEVICES": "0,2"}, TOPOLOGY) == [set(range(64))]
    assert binding.near_cores(2, 1, {}, None) == [None, None]


def test_under_slurm_srun_s_binding_stands_and_where_srun_bound_nothing_the_rank_takes_its_share():
    env = {cpu_binding.BIND: "cores", cpu_binding.SHARE: "2"}
    assert decide(1, 2, env, mine=[6, 7]) == (binding.Binding("cores", "srun"), None)
    unbound = decide(1, 2, env, mine=range(8))
    assert unbound == (binding.Binding("cores", "rank"), [2, 3])
    # under task binding each rank sees only its own GPU: no topology, the ranks could not agree
    task = {**env, "CUDA_VISIBLE_DEVICES": "0"}
    assert decide(1, 2, task, mine=range(64), gpu_binding="task", topology=TOPOLOGY)[1] == [2, 3]


def test_run_json_records_every_rank_s_cores_as_read_back_and_the_gpu_ids_a_local_cell_held():
    gathered = []
    fields = binding.fields(
        lambda text: gathered.append(text) or [text, "1"],
        {gpu_ids.HELD: "1,2", "CUDA_VISIBLE_DEVICES": "1,2"},
        applied=binding.Binding("cores", "launch.py"),
    )
    assert gathered == [cpu_binding.format_cpus(cpu_binding.affinity())]  # this process's, from the OS
    assert fields["rank_cpus"] == [gathered[0], "1"] and fields["cpu_bound_by"] == "launch.py"
    # the writer records only the binding it is handed: none where bind() did not run
    unbound = binding.fields(lambda text: [text], {})
    assert (unbound["cpu_binding"], unbound["cpu_bound_by"]) == (None, None)
    assert unbound["cpu_binding_reason"] == "not bound: train/binding.bind did not run in this process"
    assert (fields["local_gpu_ids"], fields["local_gpu_ids_reason"]) == (["1", "2"], None)
    assert binding.local_gpu_ids({gpu_ids.HELD: ""})[1] == "the cell held no GPU of this machine (CPU ranks)"
    assert binding.local_gpu_ids({"SCALEBENCH_EXECUTOR": "slurm"}) == (
        None,
        "a SLURM cell: its allocation gives its GPUs",
    )
