"""tools/process_census.py: each Python process a command starts is counted with its own CPU time, and
one that ends by os._exit (as a training rank does) too, and a process that writes nothing (killed by a
signal, here) is counted as what the command used beyond the records."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO

pytestmark = pytest.mark.unit

# a process that uses 0.3 s of its own CPU, whatever the machine's speed, then ends as `end` says
BURN = "import os, time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n{end}"
KILLED = "import signal\nos.kill(os.getpid(), signal.SIGKILL)"


def test_every_python_process_is_counted_by_kind_and_one_that_writes_nothing_is_the_rest(tmp_path):
    parent = (
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, '-c', {BURN.format(end='os._exit(0)')!r}], check=True)\n"
        f"subprocess.run([sys.executable, '-c', {BURN.format(end=KILLED)!r}])\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "process_census.py"),
            "--keep",
            str(tmp_path),
            "--",
            sys.executable,
            "-c",
            parent,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = {line.split(None, 3)[3]: line.split() for line in done.stdout.splitlines()[1:] if "python -c" in line}
    written, count = float(rows["python -c"][0]), int(rows["python -c"][1])
    assert count == 2 and 0.3 <= written < 0.6, done.stdout  # the parent and the child that called os._exit
    assert len(list(tmp_path.glob("*.json"))) == 2  # the killed child wrote nothing
    rest = next(line for line in done.stdout.splitlines() if "not written" in line)
    assert float(rest.split()[0]) >= 0.25, done.stdout  # ... and its 0.3 CPU-s are the command's rest


def test_without_a_command_it_says_so():
    done = subprocess.run([sys.executable, str(REPO / "tools" / "process_census.py")], capture_output=True, text=True)
    assert done.returncode == 2 and "no command" in done.stderr
