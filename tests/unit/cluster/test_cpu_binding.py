"""Sharing out a node's cores among a cell's processes, and binding a process, read back from the OS."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import SCRIPTS
from scalebench.cluster import cpu_binding


def test_cpu_lists_read_and_write_as_linux_prints_them():
    assert cpu_binding.parse_cpus("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert cpu_binding.format_cpus([11, 0, 1, 2, 3, 8, 10]) == "0-3,8,10-11"
    assert cpu_binding.format_cpus([5]) == "5" and cpu_binding.format_cpus([]) == ""
    assert cpu_binding.parse_cpus(cpu_binding.format_cpus(range(0, 64, 2))) == list(range(0, 64, 2))


def test_each_process_gets_its_own_share_in_local_rank_order():
    assert cpu_binding.share(range(8), 4, 2) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert cpu_binding.share([3, 1], 2, 1) == [[1], [3]]
    assert cpu_binding.share(range(3), 2, 2) is None  # too few cores: nobody is bound
    assert cpu_binding.share(range(4), 1, 0) is None


def test_shares_come_from_the_cores_nearest_each_process_s_gpu_first():
    # two GPUs on NUMA node 1 (cores 4-7), two on node 0 (cores 0-3), ranks in GPU order
    near = [set(range(4, 8)), set(range(4, 8)), set(range(4)), set(range(4))]
    shares = cpu_binding.share(range(8), 4, 2, near)
    assert shares == [[4, 5], [6, 7], [0, 1], [2, 3]]
    # a share larger than its near cores takes the rest from the lowest free ones
    assert cpu_binding.share(range(8), 2, 3, [{6, 7}, None]) == [[0, 6, 7], [1, 2, 3]]
    flat = [cpu for share in shares for cpu in share]
    assert len(flat) == len(set(flat))


BIND = """
import json, os, sys, threading
from scalebench.cluster import cpu_binding
started = threading.Event(); stop = threading.Event()
def work():
    started.set(); stop.wait()
thread = threading.Thread(target=work); thread.start(); started.wait()  # a library's thread, started before binding
cpu_binding.bind_process([int(sys.argv[1])])
print(json.dumps({"main": sorted(os.sched_getaffinity(0)), "thread": sorted(os.sched_getaffinity(thread.native_id)),
                  "read": cpu_binding.affinity()}))
stop.set()
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to tell a binding from none")
def test_a_bound_process_and_its_earlier_threads_run_on_its_cores_as_the_os_reports():
    core = max(os.sched_getaffinity(0))
    result = subprocess.run(
        [sys.executable, "-c", BIND, str(core)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(SCRIPTS)},
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"main": [core], "thread": [core], "read": [core]}
