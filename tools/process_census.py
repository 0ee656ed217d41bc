#!/usr/bin/env python3
"""Every Python process a command starts, with its CPU time: where a test run's CPU goes, by kind.

    .venv/bin/python tools/process_census.py -- .venv/bin/python -m pytest -m "not cluster" tests/integration -n 2
    .venv/bin/python tools/process_census.py --tests 10 -- .venv/bin/python -m pytest tests/integration/test_resume.py

On two cores the suite's integration tier is its CPU time over two, and that CPU goes mostly into
starting processes (ranks, launchers, Snakemake and its jobs), which tests/cpu_time.py's per-test
figure does not split. The command runs with a folder of this tool's first on PYTHONPATH, holding a
sitecustomize module: each Python process that inherits the environment writes, at its exit, its
command line, its own CPU time (user + system, all its threads), the test it ran for
(PYTEST_CURRENT_TEST) and which of the frameworks it had imported; one that ends by os._exit (a
training rank) writes first. A process stopped by a signal writes nothing, nor does a program that
is not Python, nor a process started with an environment of its own: the table puts the command's
whole CPU time (its process tree, as the kernel counts what it waited for) beside what was written,
so that what is missing is counted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

VARIABLE = "SCALEBENCH_CENSUS"
WATCHED = ("torch", "torch._dynamo", "tensorflow", "snakemake", "matplotlib")

SITECUSTOMIZE = f'''"""Written by tools/process_census.py: this process's command and CPU time, at its exit."""
import os

if os.environ.get({VARIABLE!r}):
    import atexit
    import json
    import resource
    import sys
    import time

    def _census_write(folder=os.environ[{VARIABLE!r}]):
        usage = resource.getrusage(resource.RUSAGE_SELF)
        record = {{
            "argv": sys.argv[:6],
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
            "imported": [name for name in {WATCHED!r} if name in sys.modules],
        }}
        with open(os.path.join(folder, f"{{os.getpid()}}-{{time.time_ns()}}.json"), "w") as handle:
            json.dump(record, handle)

    atexit.register(_census_write)

    # a training rank ends by os._exit (workflow/scripts/train.py), which runs no atexit handler
    _os_exit = os._exit

    def _exit_written(code):
        try:
            _census_write()
        finally:  # the process ends as it asked, whether or not its record could be written
            _os_exit(code)

    os._exit = _exit_written
'''


def kind(record: dict) -> str:
    """What a process was, from its command line and what it imported."""
    argv, imported = record["argv"], set(record["imported"])
    program = Path(argv[0]).name if argv else "python"
    framework = "TensorFlow" if "tensorflow" in imported else "PyTorch" if "torch" in imported else ""
    if program == "train.py":
        return f"rank ({framework or 'no framework'})"
    job = re.fullmatch(r"tmp\w+\.(\w+\.py)", program)  # Snakemake's copy of a rule's script
    if job:
        return f"Snakemake job: {job.group(1)}"
    if program == "__main__.py":  # python -m PACKAGE
        return f"python -m {Path(argv[0]).parent.name}"
    if program == "-c":
        return f"python -c ({framework})" if framework else "python -c"
    return program


def read_records(folder: Path) -> list[dict]:
    records = []
    for path in folder.glob("*.json"):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):  # a process that died while writing
            continue
    return records


def table(records: list[dict], command_cpu_s: float, top_tests: int) -> str:
    """The processes by kind, most CPU first, with what the command used but no process wrote."""
    kinds: dict[str, list[float]] = defaultdict(list)
    for record in records:
        kinds[kind(record)].append(record["cpu_s"])
    written = sum(record["cpu_s"] for record in records)
    lines = [f"{'CPU-s':>8} {'count':>6} {'each':>6}  process"]
    for name, seconds in sorted(kinds.items(), key=lambda item: -sum(item[1])):
        lines.append(f"{sum(seconds):8.1f} {len(seconds):6d} {sum(seconds) / len(seconds):6.2f}  {name}")
    lines.append(
        f"{written:8.1f} {len(records):6d}          written, of {command_cpu_s:.1f} CPU-s the command's tree used"
    )
    lines.append(
        f"{max(command_cpu_s - written, 0.0):8.1f}                 not written (stopped by a signal, not Python, own environment)"
    )
    if top_tests:
        tests: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for record in records:
            if record["test"]:
                tests[record["test"]][kind(record)].append(record["cpu_s"])
        total = lambda item: sum(sum(seconds) for seconds in item[1].values())  # noqa: E731
        for test, by_kind in sorted(tests.items(), key=total, reverse=True)[:top_tests]:
            lines.append(f"\n{total((test, by_kind)):8.1f}  {test}")
            for name, seconds in sorted(by_kind.items(), key=lambda item: -sum(item[1])):
                lines.append(f"{sum(seconds):8.1f} {len(seconds):6d}          {name}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=0, help="also the N tests whose processes used the most CPU")
    parser.add_argument("--keep", type=Path, help="keep each process's record in this folder")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    options = parser.parse_args(argv)
    command = options.command[1:] if options.command[:1] == ["--"] else options.command
    if not command:
        parser.error("no command: give it after --")
    hook = Path(tempfile.mkdtemp(prefix="census-hook-"))
    folder = options.keep or Path(tempfile.mkdtemp(prefix="census-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
        env = dict(os.environ, **{VARIABLE: str(folder.resolve())})
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hook), env.get("PYTHONPATH")]))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        returncode = subprocess.run(command, env=env).returncode
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        command_cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        print(table(read_records(folder), command_cpu_s, options.tests))
        return returncode
    finally:
        shutil.rmtree(hook, ignore_errors=True)
        if options.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
