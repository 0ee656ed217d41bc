"""A local cell's GPU ids and cores: held by its launcher's process until it exits, never shared."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from conftest import SCRIPTS
from scalebench.launch import local_pool

HOLD = """
import sys
from scalebench.launch import local_pool
ids = local_pool.hold_gpus(int(sys.argv[2]), sys.argv[3].split(","), sys.argv[1], poll_s=0.05)
cores, _ = local_pool.hold_cores(int(sys.argv[4]), [0, 1, 2, 3], [3], sys.argv[1]) if len(sys.argv) > 4 else (None, "")
print(",".join(ids), cores, flush=True)
sys.stdin.read()  # holds them until the test closes its stdin, or kills it
"""


def holder(folder, gpus: int, ids: str, cores: int | None = None) -> tuple[subprocess.Popen, str]:
    """A process holding `gpus` of `ids` (and `cores` of cores 0-3, nearest 3 first), and what it holds."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder), str(gpus), ids, *([str(cores)] if cores else [])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SCRIPTS)},
    )
    return process, process.stdout.readline().strip()


def test_two_running_cells_hold_disjoint_gpu_ids(tmp_path):
    first, held = holder(tmp_path, 1, "0,1,2")
    try:
        assert held.split()[0] == "0"
        second, held_too = holder(tmp_path, 2, "0,1,2")
        try:
            assert held_too.split()[0] == "1,2"
        finally:
            second.kill()
            second.wait()
    finally:
        first.kill()
        first.wait()


def test_a_cell_waits_for_ids_another_holds_and_gets_those_of_a_killed_cell(tmp_path):
    first, held = holder(tmp_path, 2, "0,1")
    got: list[list[str]] = []
    waiter = threading.Thread(target=lambda: got.append(local_pool.hold_gpus(1, ["0", "1"], tmp_path, poll_s=0.05)))
    waiter.start()
    waiter.join(timeout=1.0)
    assert waiter.is_alive() and not got  # both ids held: it waits, whatever the machine's speed
    first.kill()  # killed mid-run: the kernel drops its locks
    first.wait()
    waiter.join(timeout=60)
    assert got == [["0"]]


def test_a_cell_needing_more_gpus_than_the_machine_has_takes_all_and_none_is_taken_for_cpu_ranks(tmp_path):
    assert local_pool.hold_gpus(4, ["a", "b"], tmp_path / "more") == ["a", "b"]
    assert local_pool.hold_gpus(0, ["a", "b"], tmp_path / "none") == []


def test_cores_come_nearest_first_and_a_cell_never_waits_for_them(tmp_path):
    first, held = holder(tmp_path, 1, "0", cores=2)
    try:
        assert held.split(maxsplit=1)[1] == "[0, 3]"  # core 3 is nearest its GPU, then the lowest free
        cores, why = local_pool.hold_cores(2, [0, 1, 2, 3], [], tmp_path)
        assert cores == [1, 2] and why == ""
        cores, why = local_pool.hold_cores(1, [0, 1, 2, 3], [], tmp_path)
        assert cores is None and "fewer than the 1 cores the cell's ranks need are free" in why
    finally:
        first.kill()
        first.wait()
    cores, why = local_pool.hold_cores(5, [0, 1, 2, 3], [], tmp_path / "small")
    assert cores is None and "need 5 cores and this machine lets it use 4" in why
