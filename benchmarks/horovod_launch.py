"""What a local Horovod launch costs before its ranks' own work: horovodrun --gloo against
workflow/scripts/horovod_run.py, the default local template, which is horovodrun without the probe
it runs before each Gloo launch (a forked process importing TensorFlow's Horovod extension).

Both start the same two ranks on this host, Pythons that only print their Horovod rank, in
alternating rounds. The figures are the launch's CPU time (its whole process tree: user + system)
and its wall time from start to the last rank's end, the median over the rounds.

The benchmark runs with the pipeline's Python; both launchers and their ranks run in a framework's
environment, as a cell's do (default TensorFlow's: there horovodrun's probe imports TensorFlow's
Horovod extension, as it did where one environment held both frameworks; in torch's, it fails to
import TensorFlow's and imports torch's).

    .venv/bin/python benchmarks/horovod_launch.py [--rounds 5] [--ranks 2] [--framework tensorflow] [--smoke]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402  (puts workflow/scripts on the path)

_common.runs_with(_common.PIPELINE, __name__)

SMOKE = {"rounds": 1}
RANK = "import os; print('rank', os.environ['HOROVOD_RANK'], flush=True)"


def launch(launcher: list[str], ranks: int, framework: str) -> tuple[float, float]:
    """(CPU-s, wall s) of one launch of `ranks` ranks by `launcher`, which must start every one, in
    `framework`'s environment."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    python = _common.framework_python(framework)
    command = [*launcher, "--gloo", "-np", str(ranks), "-H", f"localhost:{ranks}", python, "-c", RANK]
    env = _common.single_process_env(framework)
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    wall, after = time.monotonic() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    started = sum(f"rank {rank}" in result.stdout for rank in range(ranks))
    if result.returncode or started != ranks:
        raise RuntimeError(
            f"{launcher[-1]} ended {result.returncode}, {started} ranks started:\n{result.stderr[-3000:]}"
        )
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per launcher (default 5)")
    parser.add_argument("--ranks", type=int, default=2, help="ranks per launch (default 2)")
    parser.add_argument(
        "--framework",
        choices=["tensorflow", "torch"],
        default="tensorflow",
        help="the environment whose Horovod launches (default tensorflow)",
    )
    options = _common.parse_options(parser, SMOKE)
    launchers = {
        "horovodrun": [_common.framework_tool(options.framework, "horovodrun")],
        "horovod_run.py": [_common.framework_python(options.framework), str(_common.SCRIPTS / "horovod_run.py")],
    }
    with _common.workspace(None, "horovod-launch-"):
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in launchers}
        for _ in range(options.rounds):
            for name, launcher in launchers.items():
                figures[name].append(launch(launcher, options.ranks, options.framework))
        cpu = {name: _common.median([c for c, _ in runs]) for name, runs in figures.items()}
        wall = {name: _common.median([w for _, w in runs]) for name, runs in figures.items()}
        for name in launchers:
            print(f"{name}: {cpu[name]:.2f} CPU-s, {wall[name]:.2f} s a launch of {options.ranks} ranks", flush=True)
        print(
            f"horovod_run.py saves {cpu['horovodrun'] - cpu['horovod_run.py']:.2f} CPU-s and "
            f"{wall['horovodrun'] - wall['horovod_run.py']:.2f} s a launch "
            f"(CPU ratio {cpu['horovod_run.py'] / cpu['horovodrun']:.3f}, median of {options.rounds})",
            flush=True,
        )


if __name__ == "__main__":
    main()
