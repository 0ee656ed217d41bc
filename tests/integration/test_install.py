"""./install.sh builds the Horovod that HOROVOD_GPU_OPERATIONS asks for, or says what is missing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, tool_env

pytestmark = pytest.mark.integration

VENV = str(Path(sys.executable).parent.parent)  # the environment running the tests, already installed


def install(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(REPO / "install.sh")], capture_output=True, text=True, timeout=600, env=tool_env(VENV=VENV, **env)
    )


def test_an_nccl_install_over_a_cpu_build_names_what_is_missing_and_changes_nothing():
    asked = install(HOROVOD_GPU_OPERATIONS="NCCL")
    assert asked.returncode != 0
    assert "has GPU operations 'none', HOROVOD_GPU_OPERATIONS asks for 'NCCL': replacing it" in asked.stdout
    assert "build_horovod: HOROVOD_GPU_OPERATIONS=NCCL, but torch in" in asked.stderr
    assert "is the CPU build" in asked.stderr
    again = install()  # the installed CPU build is still in place and still passes its check
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.strip().endswith("tensor operations: Gloo)")
