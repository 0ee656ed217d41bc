"""Shared pieces of the benchmarks: the machine, prepared synthetic data, validated cell settings,
child processes, the environment each runs in and the records the project's loops write.

Every benchmark runs its measured code in fresh child processes (this file's helpers start
them), so thread settings, determinism flags or a process group of one run never leak into
the next, and harness and bare runs alternate.

Each benchmark runs with one environment's Python (`runs_with`, at its top): a framework's
(.venv/frameworks/<framework>/bin/python) where it imports that framework in its own process, else
the pipeline's (.venv/bin/python: Snakemake, pandas, jsonschema for the cells' settings, launch.py;
no framework). The pipeline's benchmarks start what imports a framework in that framework's
environment: a child (`run_child`) with its Python, a cell's ranks through launch.py as the train
rule does.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import json
import os
import platform
import shlex
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

from scalebench import environments  # noqa: E402  (the standard library's only)

# Launcher variables that would make rank_env.detect() see a multi-rank job.
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG")

# The environments a benchmark runs with, and what a Python must import to be one: the pipeline's
# (the cells' settings need jsonschema, the studies Snakemake and pandas) or a framework's
PIPELINE = "pipeline"
HOLDS = {PIPELINE: ("jsonschema", "pandas", "snakemake"), "torch": ("torch",), "tensorflow": ("tensorflow", "tf_keras")}


def install_root() -> Path:
    """The pipeline's environment made by ./install.sh: the one this Python belongs to (itself, or
    the one whose frameworks/ holds it), else the repository's .venv (a Python of no install)."""
    root = environments.install_root()
    return root if (root / environments.FRAMEWORKS_FOLDER).is_dir() else REPO / ".venv"


def python_of(environment: str) -> Path:
    """The Python of `environment` (pipeline, torch or tensorflow) as ./install.sh makes it."""
    root = install_root()
    return root / "bin" / "python" if environment == PIPELINE else environments.installed_python(environment, root)


def shown(path: Path | str) -> str:
    """A path as a command line prints it: from the working folder where it is below it."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def runs_with(environment: str, name: str) -> None:
    """Called at a benchmark's top (`name`: its __name__), before any import beyond the standard
    library's: run as a script (not imported, not one of its own children, whose Python
    run_child chose) with a Python that cannot import what `environment` holds, it exits at once
    with the command that runs it with the right one."""
    if name != "__main__" or "--child" in sys.argv[1:]:
        return
    missing = [module for module in HOLDS[environment] if importlib.util.find_spec(module) is None]
    if not missing:
        return
    python = python_of(environment)
    whose = "the pipeline's" if environment == PIPELINE else f"{environment}'s"
    script = shown(sys.argv[0])
    said = (
        f"{script} runs with {whose} Python ({shown(python)}): this one ({sys.executable}) cannot import "
        f"{', '.join(missing)}. Run it as\n    {shlex.join([shown(python), script, *sys.argv[1:]])}"
    )
    if not python.exists():
        install = "./install.sh" if environment == PIPELINE else environments.install_command([environment])
        said += f"\n{whose} environment is not installed: {install}"
    raise SystemExit(said)


def framework_python(framework: str) -> str:
    """The Python of `framework`'s environment, which a child that imports the framework runs with;
    where it is not installed, an exit naming the command that installs it."""
    python = python_of(framework)
    if not python.exists():
        raise SystemExit(
            f"{framework}'s environment is not installed ({shown(python)}): {environments.install_command([framework])}"
        )
    return str(python)


def framework_tool(framework: str, name: str) -> str:
    """A program of `framework`'s environment (torchrun, horovodrun), beside its Python."""
    return str(Path(framework_python(framework)).parent / name)


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


def single_process_env(framework: str | None = None, **extra: str) -> dict[str, str]:
    """The environment of a child that must be rank 0 of 1 (no launcher variables), with the bin
    folder of `framework`'s environment first on PATH (default: this Python's)."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES and not k.startswith("SLURM_")}
    env.update(TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    python = framework_python(framework) if framework else sys.executable
    env["PATH"] = os.pathsep.join([str(Path(python).parent), env.get("PATH", "")])
    env.update(extra)
    return env


def run_child(
    script: str, mode: str, args: dict, env: dict[str, str] | None = None, timeout: float = 600, *, framework: str
) -> dict:
    """Run `script --child MODE --args JSON` in a fresh process of `framework`'s environment (the
    child imports it); its last stdout line is a JSON result."""
    command = [framework_python(framework), script, "--child", mode, "--args", json.dumps(args)]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, env=env or single_process_env(framework), cwd=REPO
    )
    if result.returncode:
        raise RuntimeError(f"{mode} child failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def cell_command(settings: dict, data: Path, out: Path) -> list[str]:
    """The train rule's command for a cell with the default launchers and the install's environments."""
    from scalebench import backends
    from scalebench.launch import launcher as launch

    return launch.command_line(settings, data, out, backends.default_launchers())


def read_metrics(out: Path) -> tuple[list[dict], dict]:
    """(epoch records, final record) of a cell folder's metrics.jsonl."""
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in lines if r["type"] == "epoch"], next(r for r in lines if r["type"] == "final")


def launch_cell(settings: dict, data: Path, out: Path, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
    """Start a cell's ranks the way the train rule does (workflow/scripts/launch.py, local executor):
    launch.py with the pipeline's Python, the ranks in their framework's environment."""
    command = cell_command(settings, data, out)
    child_env = single_process_env(SCALEBENCH_EXECUTOR="local", **env)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=child_env)
