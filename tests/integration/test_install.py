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


def tool(folder: Path, name: str, script: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)


def build_horovod(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """tools/build_horovod.sh with an empty wheel cache, so it would build."""
    return subprocess.run(
        [str(REPO / "tools" / "build_horovod.sh"), sys.executable],
        capture_output=True,
        text=True,
        timeout=300,
        env=tool_env(SCALEBENCH_CACHE=str(tmp_path / "cache"), **env),
    )


def test_an_old_cmake_or_a_compiler_without_cxx17_is_named_before_building(tmp_path):
    # Stand-ins for what no longer runs on this machine (PyPI has no CMake 3.10 wheel for it, and
    # Debian's compilers all speak C++17): each answers as the old tool does.
    old = tmp_path / "old"
    old.mkdir()
    tool(old, "cmake", 'echo "cmake version 3.10.2"')
    result = build_horovod(tmp_path, PATH=f"{old}:{tool_env()['PATH']}")
    assert result.returncode == 1
    assert "CMake 3.10.2 is older than Horovod's minimum 3.13: 'module load cmake'" in result.stderr
    assert "building Horovod" not in result.stdout  # said before any download or build
    tool(old, "cmake", 'echo "cmake version 4.4.4"')
    tool(
        old,
        "g++-7",
        "case \"$*\" in *-std=c++17*) echo \"g++: error: unrecognized command line option '-std=c++17'\" >&2; exit 1;; *--version*) echo 'g++ (GCC) 4.8.5';; esac",
    )
    result = build_horovod(tmp_path, PATH=f"{old}:{tool_env()['PATH']}", CXX="g++-7")
    assert result.returncode == 1
    assert "the C++ compiler 'g++-7' (g++ (GCC) 4.8.5) cannot compile C++17: 'module load gcc'" in result.stderr
    assert "building Horovod" not in result.stdout


def test_a_failed_build_shows_its_first_error_not_the_tracebacks_after_it():
    # the log of a Horovod build CMake 4 refused (before tools/horovod_fixes.py fixed it), shortened
    log = [
        "Running CMake in build/temp.linux-x86_64-cpython-311/RelWithDebInfo:",
        "-- The CXX compiler identification is GNU 13.3.0",
        "CMake Error at third_party/gloo/CMakeLists.txt:1 (cmake_minimum_required):",
        "  Compatibility with CMake < 3.5 has been removed from CMake.",
        "-- Configuring incomplete, errors occurred!",
        *[f'  File "setup.py", line {n}, in build_extensions' for n in range(80)],
        "subprocess.CalledProcessError: Command '['cmake', ...]' returned non-zero exit status 1.",
        "error: subprocess-exited-with-error",
    ]
    sys.path.insert(0, str(REPO / "tools"))
    from first_error import first_error

    shown = first_error(log, 5)
    assert shown[1].startswith("CMake Error at third_party/gloo/CMakeLists.txt:1")
    assert "Compatibility with CMake < 3.5 has been removed" in shown[2]
    assert not any("CalledProcessError" in line for line in shown)
    compiler = [
        "[ 12%] Building CXX object ...",
        "group_table.h:36:9: error: 'string' in namespace 'std' does not name a type",
    ]
    assert first_error([*compiler, "make: *** [Makefile:136: all] Error 2"], 5)[1] == compiler[1]
