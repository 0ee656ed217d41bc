"""horovod_run.py, the local Horovod cells' launcher: horovodrun without its probe of Horovod's
framework extensions, the ranks checking the build themselves.

The launcher runs in torch's environment (where the local Horovod template runs it for a torch cell,
with its horovodrun beside it), the ranks are one-line Pythons, and both frameworks are made
unimportable there for the test: horovodrun's probe (a forked process importing Horovod's extension of
each framework) then finds no Gloo and refuses the run, so a run that starts its ranks did not probe."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import SCRIPTS, framework_python, tool_env, unimportable
from scalebench.refusal import HorovodBuildError
from scalebench.train.horovod_common import check_build

# each rank prints what horovodrun told it, and rank 1 exits with the code given as argument 1
RANK = (
    "import os, sys; e = os.environ; "
    "print('rank', e['HOROVOD_RANK'], 'of', e['HOROVOD_SIZE'], e['HOROVOD_CONTROLLER'], flush=True); "
    "sys.exit(int(sys.argv[1]) if e['HOROVOD_RANK'] == '1' else 0)"
)


# the Python of the environment horovod_run.py runs in, and horovodrun beside it
PYTHON = framework_python("torch")
HOROVODRUN = str(Path(PYTHON).parent / "horovodrun")


def without_frameworks(folder: Path) -> dict[str, str]:
    """An environment in which tensorflow and torch refuse to import (packages that shadow them)."""
    return tool_env(PYTHONPATH=unimportable(folder, ["tensorflow", "torch"]))


def launch(launcher: list[str], env: dict[str, str], rank_1_exit: int = 0) -> subprocess.CompletedProcess:
    command = [*launcher, "--gloo", "-np", "2", "-H", "localhost:2", PYTHON, "-c", RANK, str(rank_1_exit)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


def test_the_ranks_start_without_horovodrun_s_probe_and_a_failed_rank_fails_the_launch(tmp_path):
    env = without_frameworks(tmp_path / "blocked")
    # horovodrun itself probes: with neither extension importable it finds no Gloo and starts nothing
    probed = launch([HOROVODRUN], env)
    assert probed.returncode != 0 and "Gloo support has not been built" in probed.stderr, probed.stderr[-2000:]
    assert "rank 0 of 2" not in probed.stdout

    started = launch([PYTHON, str(SCRIPTS / "horovod_run.py")], env)
    assert started.returncode == 0, started.stderr[-2000:]
    assert "rank 0 of 2 gloo" in started.stdout and "rank 1 of 2 gloo" in started.stdout, started.stdout

    failed = launch([PYTHON, str(SCRIPTS / "horovod_run.py")], env, rank_1_exit=3)
    assert failed.returncode != 0  # as horovodrun: one rank's failure is the launch's
    assert "exited with non-zero status" in failed.stderr, failed.stderr[-2000:]


def fake_horovod(gloo: bool, mpi: bool) -> SimpleNamespace:
    """A Horovod build's answers (this machine's real one has Gloo: the refusals cannot run for real)."""
    return SimpleNamespace(gloo_built=lambda: gloo, mpi_built=lambda: mpi)


def test_ranks_started_for_gloo_refuse_a_horovod_built_without_it():
    gloo = {"HOROVOD_CONTROLLER": "gloo"}
    with pytest.raises(HorovodBuildError, match=r"started for Gloo \(HOROVOD_CONTROLLER=gloo\).*without it"):
        check_build(fake_horovod(gloo=False, mpi=True), gloo)
    check_build(fake_horovod(gloo=False, mpi=True), {})  # started for MPI: that build can run it
    check_build(fake_horovod(gloo=True, mpi=False), gloo)
    with pytest.raises(HorovodBuildError, match="built without Gloo or MPI"):
        check_build(fake_horovod(gloo=False, mpi=False), {})
