"""Port blocks: derived from the job id under SLURM, held with a lock file locally."""

from __future__ import annotations

import socket
import subprocess
import sys

import yaml
from conftest import REPO, SCRIPTS
from scalebench.cluster import ports


def test_job_blocks_stay_in_the_slurm_range_below_the_local_one():
    starts = [ports.port_for_job(job) for job in range(10**6, 10**6 + 3 * ports.SLURM_BLOCKS)]
    assert min(starts) == ports.SLURM_BASE and max(starts) + ports.PORT_BLOCK <= ports.SLURM_END
    assert ports.SLURM_END <= ports.LOCAL_BASE and ports.LOCAL_END <= 32768  # below Linux's ephemeral range
    assert len(set(starts[: ports.SLURM_BLOCKS])) == ports.SLURM_BLOCKS


def test_schema_caps_ranks_per_node_at_what_a_block_holds():
    cluster = yaml.safe_load((REPO / "config/schema.yaml").read_text())["properties"]["cluster"]["properties"]
    assert cluster["gpus_per_node"]["maximum"] == cluster["ranks_per_node"]["maximum"] == ports.MAX_RANKS_PER_NODE


def test_local_launchers_hold_distinct_blocks(tmp_path):
    first = ports.reserve_local_block(tmp_path)
    second = ports.reserve_local_block(tmp_path)
    assert abs(first - second) >= ports.PORT_BLOCK
    assert ports.LOCAL_BASE <= min(first, second) and max(first, second) + ports.PORT_BLOCK <= ports.LOCAL_END


HOLD = "import sys, time; from scalebench.cluster import ports; print(ports.reserve_local_block(sys.argv[1]), flush=True); time.sleep(60)"


def test_a_block_is_held_until_its_launcher_exits(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True, env={"PYTHONPATH": str(SCRIPTS)}
    )
    try:
        held = int(holder.stdout.readline())
        assert ports.reserve_local_block(tmp_path) != held
    finally:
        holder.kill()
        holder.wait()
    # the lock went with the process: a later launcher may take the block again
    assert held in {ports.reserve_local_block(tmp_path) for _ in range(2)}


def test_a_block_with_a_port_in_use_is_passed_over(tmp_path):
    # hold the first port of a block that lock files do not hold, then reserve from a fresh lock folder
    probe = ports.reserve_local_block(tmp_path / "probe")
    with socket.socket() as busy:
        busy.bind(("", probe + 5))
        busy.listen()
        assert ports.reserve_local_block(tmp_path / "fresh") != probe


HOLD_SLURM = (
    "import socket, sys, time; from scalebench.cluster import ports; "
    "port = ports.reserve_slurm_block(sys.argv[2], sys.argv[1]); "
    "server = socket.create_server(('', port)); print(port, flush=True); time.sleep(60)"
)


def test_two_slurm_cells_whose_job_ids_map_to_the_same_block_take_different_ports(tmp_path):
    # two batch steps on one node, job ids SLURM_BLOCKS apart: the same block by the job id
    first_job = 4_000_123
    second_job = first_job + ports.SLURM_BLOCKS
    assert ports.port_for_job(first_job) == ports.port_for_job(second_job)
    holder = subprocess.Popen(  # the first cell: holds its block and listens on its rendezvous port
        [sys.executable, "-c", HOLD_SLURM, str(tmp_path), str(first_job)],
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(SCRIPTS)},
    )
    try:
        taken = int(holder.stdout.readline())
        second = ports.reserve_slurm_block(second_job, tmp_path)
        assert second != taken and abs(second - taken) >= ports.PORT_BLOCK
        assert ports.SLURM_BASE <= second and second + ports.PORT_BLOCK <= ports.SLURM_END
        with socket.socket() as sock:  # every port of the second block is free for its ranks
            sock.bind(("", second))
    finally:
        holder.kill()
        holder.wait()


def test_a_slurm_block_with_a_port_in_use_outside_scalebench_is_passed_over(tmp_path):
    job = 4_000_500
    own = ports.port_for_job(job)
    with socket.socket() as busy:  # e.g. another program's server on a worker port of the job's block
        busy.bind(("", own + 7))
        busy.listen()
        chosen = ports.reserve_slurm_block(job, tmp_path)
    assert chosen == own + ports.PORT_BLOCK or (own + ports.PORT_BLOCK >= ports.SLURM_END and chosen < own)


def test_a_free_slurm_block_is_the_job_ids_own(tmp_path):
    job = 4_000_777
    assert ports.reserve_slurm_block(job, tmp_path) == ports.port_for_job(job)
