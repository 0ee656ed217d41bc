"""Shared pieces of the benchmarks: the machine, prepared synthetic data, validated cell settings,
child processes and the records the project's loops write.

Every benchmark runs its measured code in fresh child processes (this file's helpers start
them), so thread settings, determinism flags or a process group of one run never leak into
the next, and harness and bare runs alternate.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "workflow" / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

# Launcher variables that would make rank_env.detect() see a multi-rank job.
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG")


def parse_options(parser: argparse.ArgumentParser, smoke: dict[str, object]) -> argparse.Namespace:
    """The command line, with `--smoke`: the smallest sizes and one repeat (`smoke`, the script's
    own), which tests/integration/test_benchmarks_smoke.py runs so that a change that breaks a
    benchmark fails a test. A flag given on the command line wins over its smoke value. A smoke
    run checks that the benchmark runs; its figures are not figures, and it judges no goal.

    `--parse-only` prints the options as JSON and exits: the same test checks that every command
    the docs print beside a figure is still accepted as printed."""
    parser.add_argument(
        "--smoke", action="store_true", help="smallest sizes, one repeat: checks that it runs (no figures)"
    )
    parser.add_argument("--parse-only", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    unknown = set(smoke) - set(vars(options))
    if unknown:
        raise ValueError(f"smoke values for options the parser lacks: {sorted(unknown)}")
    if options.smoke:
        parser.set_defaults(**smoke)
        options = parser.parse_args()
    if options.parse_only:
        print(json.dumps(vars(options), default=str))
        raise SystemExit(0)
    return options


def parse_options_or_run_child(
    parser: argparse.ArgumentParser, smoke: dict[str, object], child: Callable[[str, dict], None]
) -> argparse.Namespace:
    """parse_options, with the hidden `--child MODE --args JSON` that run_child starts a script with:
    there `child(MODE, args)` runs in this fresh process and the script exits after it."""
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--args", help=argparse.SUPPRESS)
    options = parse_options(parser, smoke)
    if options.child:
        child(options.child, json.loads(options.args))
        raise SystemExit(0)
    return options


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def load_average() -> float:
    return os.getloadavg()[0]


def gpu_names() -> str:
    """The machine's NVIDIA GPUs as nvidia-smi lists them, or 'no GPU'."""
    if shutil.which("nvidia-smi") is None:
        return "no GPU"
    listed = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    names = [line.strip() for line in listed.stdout.splitlines() if line.strip()]
    return ", ".join(names) if listed.returncode == 0 and names else "no GPU"


def machine_line() -> str:
    """The facts docs/benchmarks.md records with every figure."""
    return (
        f"{datetime.date.today().isoformat()}  nproc {os.cpu_count()}  {cpu_model()}  {gpu_names()}  "
        f"Python {platform.python_version()}  load average (1 min) {load_average():.2f}"
    )


@contextlib.contextmanager
def workspace(workdir: str | None, prefix: str, header: str = "") -> Iterator[Path]:
    """The benchmark's folder: `workdir` if given (kept), else a temporary one removed at the end.

    Prints the machine line before and after the run, as docs/benchmarks.md records both (the
    load can change while a benchmark runs)."""
    root = Path(workdir or tempfile.mkdtemp(prefix=prefix))
    root.mkdir(parents=True, exist_ok=True)
    print(machine_line() + header)
    try:
        yield root
    finally:
        print(machine_line())
        if not workdir:
            shutil.rmtree(root, ignore_errors=True)


def median(values: list[float]) -> float:
    return statistics.median(values)


def steady_epoch_s(epoch_times: list[float]) -> float:
    """Median of the epochs after the first (the first holds warm-up and graph tracing)."""
    return median(epoch_times[1:] if len(epoch_times) > 1 else epoch_times)


def prepare_dataset(root: Path, count: int, height: int, width: int) -> Path:
    """`count` synthetic pairs at height x width, preprocessed as the pipeline does; reused if present."""
    from scalebench.data import pairing, preprocess, synthetic

    prepared = root / f"prepared_{count}_{height}x{width}"
    if (prepared / "manifest.json").exists():
        return prepared
    raw = root / f"raw_{count}_{height}x{width}"
    synthetic.write_dataset(raw, count, height, width, seed=0)
    pairs, rule = pairing.find_pairs(raw)
    preprocess.preprocess(pairs, prepared, (height, width), 0.2, 42, {"source": "synthetic", "pairing": rule})
    return prepared


def cell_settings(
    framework: str, backend: str, gpus: int, image_size: tuple[int, int], count: int, **training: object
) -> dict:
    """Settings of one cell from a config validated against config/schema.yaml (defaults filled)."""
    from scalebench import config as sb_config

    height, width = image_size
    study = {
        "dataset": {"source": "synthetic", "image_size": [height, width], "synthetic": {"count": count}},
        "matrix": {"frameworks": [framework], "backends": [backend], "gpus": [gpus], "seeds": [1]},
        "training": dict(training),
    }
    config = sb_config.validate(study, sb_config.load_schema(REPO / "config" / "schema.yaml"))
    return sb_config.train_settings(config, sb_config.Cell(framework, backend, gpus, 1))


def single_process_env(**extra: str) -> dict[str, str]:
    """The environment of a child that must be rank 0 of 1 (no launcher variables)."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES and not k.startswith("SLURM_")}
    env.update(TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(extra)
    return env


def run_child(script: str, mode: str, args: dict, env: dict[str, str] | None = None, timeout: float = 600) -> dict:
    """Run `script --child MODE --args JSON` in a fresh process; its last stdout line is a JSON result."""
    command = [sys.executable, script, "--child", mode, "--args", json.dumps(args)]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, env=env or single_process_env(), cwd=REPO
    )
    if result.returncode:
        raise RuntimeError(f"{mode} child failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def read_metrics(out: Path) -> tuple[list[dict], dict]:
    """(epoch records, final record) of a cell folder's metrics.jsonl."""
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in lines if r["type"] == "epoch"], next(r for r in lines if r["type"] == "final")


def launch_cell(settings: dict, data: Path, out: Path, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
    """Start a cell's ranks the way the train rule does (workflow/scripts/launch.py, local executor)."""
    from scalebench import config as sb_config
    from scalebench.launch import launcher as launch

    launchers = sb_config.validate({}, sb_config.load_schema(REPO / "config" / "schema.yaml"))["launchers"]
    command = launch.command_line(settings, data, out, launchers)
    child_env = single_process_env(SCALEBENCH_EXECUTOR="local", **env)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=child_env)
