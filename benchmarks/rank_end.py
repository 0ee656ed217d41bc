"""What a rank's end costs: train.py, which ends by os._exit once its records are written, against
the same rank ending through the interpreter's teardown (issue 47).

One-rank native cells of two epochs at 32x48 (the test suite's size, where a rank's start and end
weigh most), each started directly as srun starts a rank, in alternating rounds: the real
workflow/scripts/train.py, and `python -c` running the same entry.main() and returning through
sys.exit, as train.py did before. The figure is each rank's CPU time (user + system, its threads
and children), the median over the rounds. The benchmark runs with the pipeline's Python (the
cells' settings), each rank with its framework's.

    .venv/bin/python benchmarks/rank_end.py [--rounds 3] [--frameworks torch,tensorflow] [--workdir DIR] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402  (puts workflow/scripts on the path)

_common.runs_with(_common.PIPELINE, __name__)

SMOKE = {"rounds": 1, "frameworks": "torch"}
# the rank as train.py ran it before: entry.main(), then the interpreter's teardown
WITH_TEARDOWN = (
    f"import sys; sys.path.insert(0, {str(_common.SCRIPTS)!r}); "
    "from scalebench.train.entry import main; sys.exit(main())"
)


def rank_cpu_s(command: list[str], out: Path, framework: str) -> float:
    """Run one rank of `framework` to its end; its CPU time, the rank's own and its children's."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = _common.single_process_env(framework)
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    status = json.loads((out / "run.json").read_text()).get("status") if (out / "run.json").exists() else None
    if result.returncode or status != "ok":
        raise RuntimeError(f"the rank ended {result.returncode}, run.json {status}:\n{result.stderr[-3000:]}")
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per way of ending (default 3)")
    parser.add_argument("--frameworks", default="torch,tensorflow", help="comma-separated (default both)")
    parser.add_argument("--workdir", help="keep the dataset and cells here (default: a temporary folder)")
    options = _common.parse_options(parser, SMOKE)
    from scalebench.launch import launcher

    with _common.workspace(options.workdir, "rank-end-") as root:
        data = _common.prepare_dataset(root, 40, 32, 48)
        for framework in options.frameworks.split(","):
            settings = _common.cell_settings(
                framework, "native", 1, (32, 48), 40, epochs=2, collectives={"budget_s": 0}
            )
            cpu: dict[str, list[float]] = {"train.py": [], "teardown": []}
            for round_ in range(options.rounds):
                for way in cpu:
                    out = root / f"{framework}-{way}-{round_}"
                    if way == "train.py":
                        command = launcher.rank_command(settings, data, out)
                    else:
                        python = _common.framework_python(framework)
                        command = [python, "-c", WITH_TEARDOWN, *launcher.cell_arguments(settings, data, out)]
                    cpu[way].append(rank_cpu_s(command, out, framework))
            ended, torn = _common.median(cpu["train.py"]), _common.median(cpu["teardown"])
            print(
                f"{framework}: train.py {ended:.2f} CPU-s, with the teardown {torn:.2f} CPU-s per rank "
                f"(median of {options.rounds}): the end saves {torn - ended:.2f} CPU-s (ratio {ended / torn:.3f})",
                flush=True,
            )


if __name__ == "__main__":
    main()
