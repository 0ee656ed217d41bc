"""Reading SLURM: node lists, compressed tasks per node, srun's block distribution, derived ports."""

from __future__ import annotations

import os

import pytest
from scalebench.cluster import slurm


def test_expand_nodelist():
    assert slurm.expand_nodelist("gpu[01-03,07],login1") == ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]


@pytest.mark.parametrize(
    ("spec", "counts"),
    [("2(x3),1", [2, 2, 2, 1]), ("4(x2),2", [4, 4, 2]), ("3", [3]), ("1,2(x2)", [1, 2, 2])],
)
def test_tasks_per_node_expands_slurm_compression(spec, counts):
    assert slurm.tasks_per_node(spec) == counts


@pytest.mark.parametrize("spec", ["two", "", "2(x)", "2x3"])
def test_unreadable_tasks_per_node_is_refused(spec):
    with pytest.raises(slurm.SlurmError, match="tasks per node"):
        slurm.tasks_per_node(spec)


def test_step_tasks_prefer_the_step_and_spread_a_single_count_over_the_nodes():
    env = {"SLURM_STEP_TASKS_PER_NODE": "4(x2),2", "SLURM_TASKS_PER_NODE": "4(x3)"}
    assert slurm.step_tasks_per_node(env, 3) == [4, 4, 2]
    assert slurm.step_tasks_per_node({"SLURM_TASKS_PER_NODE": "2"}, 3) == [2, 2, 2]
    assert slurm.step_tasks_per_node({}, 2) == [1, 1]
    with pytest.raises(slurm.SlurmError, match="2 nodes"):
        slurm.step_tasks_per_node(env, 2)


def test_local_task_count_is_this_nodes_own():
    env = {"SLURM_STEP_TASKS_PER_NODE": "4(x2),2"}
    assert [slurm.local_task_count({**env, "SLURM_NODEID": str(node)}, 3) for node in range(3)] == [4, 4, 2]


def test_step_hosts_prefer_the_step_node_list():
    env = {"SLURM_STEP_NODELIST": "n[2-3]", "SLURM_JOB_NODELIST": "n[1-3]"}
    assert slurm.step_hosts(env) == ["n2", "n3"]
    assert slurm.step_hosts({"SLURM_JOB_NODELIST": "n1"}) == ["n1"]


@pytest.mark.parametrize(
    ("ranks", "nodes", "blocks"),
    [(8, 2, [4, 4]), (10, 3, [4, 4, 2]), (5, 3, [2, 2, 1]), (3, 1, [3]), (5, 4, [2, 2, 1, 0])],
)
def test_block_distribution_fills_nodes_in_order(ranks, nodes, blocks):
    assert slurm.block_distribution(ranks, nodes) == blocks


BUSY_SCONTROL = """#!/bin/sh
count=$(cat "{folder}/count" 2>/dev/null || echo 0)
echo $((count + 1)) > "{folder}/count"
if [ "$count" -lt {busy} ]; then
  echo "slurm_load_jobs error: Socket timed out on send/recv operation" >&2
  exit 1
fi
if [ "$3" = "--oneliner" ] && [ "$4" = "999" ]; then
  echo "slurm_load_jobs error: Invalid job id specified" >&2
  exit 1
fi
echo "JobId=$4 NodeList=n1"
"""


def busy_scontrol(folder, monkeypatch, busy: int):
    """An scontrol first on PATH whose controller gives no verdict to the first `busy` asks."""
    folder.mkdir()
    (folder / "scontrol").write_text(BUSY_SCONTROL.format(folder=folder, busy=busy))
    (folder / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")


def test_scontrol_asks_a_busy_controller_again_and_says_so(tmp_path, monkeypatch, capsys):
    busy_scontrol(tmp_path / "bin", monkeypatch, busy=2)
    slept = []
    assert slurm.scontrol("show", "job", "--oneliner", "41", sleep=slept.append) == "JobId=41 NodeList=n1\n"
    assert slept == [2.0, 4.0]  # slurm_answers.delays: 2, 4, 8, ... s
    said = capsys.readouterr().out
    assert (
        said.count("slurm: scontrol show job --oneliner 41 got no verdict (the controller did not answer in time") == 2
    )


def test_scontrol_stops_asking_at_a_refusal_or_once_its_patience_is_used_up(tmp_path, monkeypatch):
    busy_scontrol(tmp_path / "bin", monkeypatch, busy=0)
    with pytest.raises(slurm.SlurmError, match="Invalid job id specified"):  # refused: asked once
        slurm.scontrol("show", "job", "--oneliner", "999", sleep=pytest.fail)
    (tmp_path / "bin" / "count").write_text("-100")  # busy for the next 100 asks
    slept = []
    with pytest.raises(slurm.SlurmError, match="Socket timed out"):
        slurm.scontrol("show", "job", "--oneliner", "41", patience_s=10, sleep=slept.append)
    assert slept == [2.0, 4.0, 4.0]  # 10 s in all, then the last words
