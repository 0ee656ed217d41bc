"""The suite's CPU report (tests/cpu_time.py) charges each test the CPU of what it ran, its
subprocesses' included, across pytest-xdist's workers, and only where --durations asks."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import REPO, tool_env

pytestmark = pytest.mark.unit

BURN = "import time\nstart = time.process_time()\nwhile time.process_time() - start < {seconds}: pass\n"
TESTS = f"""
import subprocess, sys

def test_burns_in_a_subprocess():
    subprocess.run([sys.executable, "-c", {BURN.format(seconds=1.0)!r}], check=True)

def test_burns_in_its_own_process():
    exec({BURN.format(seconds=0.3)!r})

def test_idles():
    pass
"""


def run(folder, *args: str) -> str:
    (folder / "test_burn.py").write_text(TESTS)
    command = [sys.executable, "-m", "pytest", "-p", "cpu_time", "-p", "no:cacheprovider", str(folder), *args]
    env = tool_env(PYTHONPATH=str(REPO / "tests"))
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=folder, env=env)
    assert result.returncode == 0, result.stdout[-3000:]
    return result.stdout


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "two workers"])
def test_each_test_is_charged_its_own_and_its_subprocesses_cpu(tmp_path, workers):
    output = run(tmp_path, "--durations=1", *workers)
    assert "most CPU: 3 of 3 tests" in output, output
    charged = dict(
        (name, float(seconds)) for seconds, name in re.findall(r"^\s*([\d.]+) CPU-s  \S+::(\w+)$", output, re.M)
    )
    assert list(charged) == ["test_burns_in_a_subprocess", "test_burns_in_its_own_process", "test_idles"], output
    assert charged["test_burns_in_a_subprocess"] >= 1.0 and 0.3 <= charged["test_burns_in_its_own_process"] < 1.0
    assert charged["test_idles"] < 0.3


def test_without_durations_nothing_is_printed(tmp_path):
    assert "most CPU" not in run(tmp_path)
