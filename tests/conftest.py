"""Shared fixtures: the repository, its Pythons, small datasets and a Snakemake runner; and the
environment each test module runs in.

A module that imports a framework (torch, tensorflow: in its code or through scalebench.train's
framework folders) says so at its top, `ENVIRONMENT = "torch"`, and runs in that framework's
environment (.venv/frameworks/torch), with the pipeline's packages after the framework's own
(tests/layer/sitecustomize.py); every other module runs in the pipeline's, which has neither
framework. run_tests.sh runs one pytest session per environment; a session collects only its own
modules and says how many it left to the others.
"""

from __future__ import annotations

import ast
import fcntl
import functools
import importlib.util
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "workflow" / "scripts"
sys.path.insert(0, str(SCRIPTS))

import cpu_time  # noqa: E402
from scalebench import backends, environments  # noqa: E402
from scalebench import config as sb_config  # noqa: E402
from scalebench.data import pairing, preprocess, synthetic  # noqa: E402
from scalebench.launch import launcher as sb_launch  # noqa: E402

# The pipeline's environment (Snakemake, launch.py: the train rule's Python), whichever session runs
BIN = environments.install_root() / "bin"
PYTHON = str(BIN / "python")
# This session's environment: pipeline, torch or tensorflow, as run_tests.sh names it; a pytest run
# without it (one Python of one's own: a GPU node's image, a site's module) runs the modules whose
# framework this Python imports, and the pipeline's
SESSION = os.environ.get("SCALEBENCH_TEST_ENVIRONMENT", "")


def runs_here(environment: str) -> bool:
    """Whether this session runs the test modules of `environment`."""
    if SESSION:
        return environment == SESSION
    return environment == "pipeline" or importlib.util.find_spec(environments.PACKAGES[environment]) is not None


ENVIRONMENTS = ("pipeline", *environments.PACKAGES)


def framework_python(framework: str) -> str:
    """The Python of `framework`'s environment as ./install.sh made it."""
    return str(environments.installed_python(framework))


@functools.cache
def module_environment(path: Path) -> str:
    """The environment a test module declares (`ENVIRONMENT = "torch"` at its top level), else pipeline."""
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ENVIRONMENT" for t in node.targets):
            value = getattr(node.value, "value", None)
            if value not in ENVIRONMENTS:
                raise pytest.UsageError(f"{path}: ENVIRONMENT = {value!r}; one of {', '.join(ENVIRONMENTS)}")
            return value
    return "pipeline"


LEFT: dict[str, int] = {}  # the modules this session left to the others' sessions, by environment


class OtherEnvironment(pytest.File):
    """A test module of another environment's session: nothing to collect here (importing it would
    fail on the framework this environment does not have); run_tests.sh runs it in its own."""

    def collect(self) -> list:
        wanted = module_environment(self.path)
        LEFT[wanted] = LEFT.get(wanted, 0) + 1
        if not SESSION:  # a run by hand: say why the module does not run here
            pytest.skip(
                f"runs in {wanted}'s environment, and this Python ({sys.executable}) cannot import "
                f"{environments.PACKAGES.get(wanted, wanted)}: ./run_tests.sh {self.path.relative_to(REPO)} runs it there"
            )
        return []


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.File | None:
    """Every test module, found in a folder or named on the command line, passes here before pytest
    imports it: one of another environment stays unimported."""
    if runs_here(module_environment(module_path)):
        return None
    return OtherEnvironment.from_parent(parent, path=module_path)


def pytest_terminal_summary(terminalreporter) -> None:
    if LEFT:
        said = ", ".join(f"{count} to {name}'s" for name, count in sorted(LEFT.items()))
        terminalreporter.write_line(
            f"{SESSION or 'this Python'}'s session: test modules left to other environments' sessions: {said} "
            "(./run_tests.sh runs each)"
        )


TIERS = ("unit", "integration", "cluster", "gpu")  # the folders under tests/, each its own marker


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(cpu_time, "scalebench-cpu-time")  # each test's CPU time (tests/cpu_time.py)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test is marked by the folder it lives in, so `-m` selections mean what they say without
    anyone remembering to mark it (run_tests.sh runs the cluster tier on its own, after the rest)."""
    tests = Path(__file__).resolve().parent
    for item in items:
        parts = Path(item.path).resolve().relative_to(tests).parts
        tier = parts[0] if len(parts) > 1 and parts[0] in TIERS else None
        if tier is None:
            raise pytest.UsageError(f"{item.nodeid}: tests live in one of tests/{{{','.join(TIERS)}}}/")
        item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(autouse=True)
def no_slurm_outside_the_cluster_tests(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """SLURM's client commands read /run/slurm/conf, which the cluster tests' SLURM links while it
    runs (tests/cluster/slurm_cluster.py), so on a parallel run a SLURM dry run elsewhere would be
    checked against the test cluster's 4-CPU nodes. Every other test sees no SLURM: an empty config
    makes sinfo and sbatch fail at once (a missing one makes them retry for a minute)."""
    if request.node.get_closest_marker("cluster") is None:
        monkeypatch.setenv("SLURM_CONF", "/dev/null")


# --- What the processes of one pytest run share -------------------------------------------------
# A study trained once or a SLURM cluster started once serves every test of the run that asks for
# it, whichever pytest-xdist worker runs the test: made_once() makes it under a file lock in the
# run's own folder, and at_run_end() leaves a command for the run's main process, which runs it
# once every worker is done. A test that uses one still runs alone (`pytest path::name`).


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every process of this pytest run shares: the run's base temp (an xdist worker's
    own base temp is a folder in it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def file_lock(path: Path, shared: bool = False) -> Iterator[None]:
    """Hold `path`'s lock (flock): exclusive, or shared with other shared holders."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder `name` of this run, made by `make(folder)` in the first process that asks; the
    others wait for it. Where `make` fails, the test that asked fails with its error, and every
    later test that asks fails at once saying so (it is not made again)."""
    folder = run_folder(tmp_path_factory) / name
    failed = folder.parent / f"{name}.failed"
    with file_lock(folder.parent / f"{name}.lock"):
        if failed.exists():
            pytest.fail(f"{name} could not be made, when an earlier test asked for it:\n{failed.read_text()}")
        if not (folder / ".made").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                make(folder)
            except Exception as error:
                failed.write_text(f"{type(error).__name__}: {error}"[-20000:])
                raise
            (folder / ".made").touch()
    return folder


def at_run_end(tmp_path_factory: pytest.TempPathFactory, name: str, command: list[str]) -> None:
    """Have the run's main process run `command` when the run ends, after every worker's last test."""
    folder = run_folder(tmp_path_factory) / "at-run-end"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(command))


def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):  # an xdist worker: the main process ends the run
        return
    factory = getattr(session.config, "_tmp_path_factory", None)  # pytest's own, as xdist reads it
    base = factory.getbasetemp() if factory is not None else None
    for path in sorted(base.glob("at-run-end/*.json")) if base is not None else []:
        done = subprocess.run(json.loads(path.read_text()), capture_output=True, text=True, timeout=300)
        if done.returncode:
            print(f"\nat the run's end, {path.stem} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
        path.unlink()


def tool_env(**extra: str) -> dict[str, str]:
    """The environment for subprocesses: the pipeline's bin first on PATH (snakemake, ruff)."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    # a framework session's layer (tests/layer) stays with pytest: a child runs in its own environment
    env.pop(LAYER, None)
    kept = [part for part in env.pop("PYTHONPATH", "").split(os.pathsep) if part and Path(part) != LAYER_FOLDER]
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    env.update(extra)
    return env


LAYER, LAYER_FOLDER = "SCALEBENCH_TEST_LAYER", REPO / "tests" / "layer"


def layered_env(**extra: str) -> dict[str, str]:
    """tool_env with this session's layer kept: for a child pytest of a framework's session."""
    env = tool_env(**extra)
    if os.environ.get(LAYER):
        env[LAYER] = os.environ[LAYER]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(LAYER_FOLDER), env.get("PYTHONPATH", "")]))
    return env


@functools.cache
def pipeline_packages() -> str:
    """The pipeline environment's site-packages, which a framework's session imports pytest and the
    rest from (run_tests.sh names them to it; the pipeline's session is that environment)."""
    if os.environ.get(LAYER):
        return os.environ[LAYER]
    import site

    return os.pathsep.join(site.getsitepackages())


def in_framework(framework: str, code: str, *args: str, timeout: float = 600) -> object:
    """Run `code` in `framework`'s environment (its Python, with this suite's packages after its own
    as in that framework's session, and tests/ and workflow/scripts importable), `args` its sys.argv[1:]:
    the JSON it printed last. For what a session cannot do in its own process: the other framework's
    side of a comparison, or TensorBoard's reader in the pipeline's session."""
    env = tool_env(
        **{LAYER: pipeline_packages(), "SCALEBENCH_TEST_ENVIRONMENT": framework},
        PYTHONPATH=os.pathsep.join(map(str, [LAYER_FOLDER, REPO / "tests", SCRIPTS])),
    )
    command = [framework_python(framework), "-c", code, *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
    assert done.returncode == 0, f"in {framework}'s environment:\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def unimportable(folder: Path, packages: list[str]) -> str:
    """`folder`, holding packages of those names that refuse to import: first on a child's PYTHONPATH,
    it shadows the real ones (a framework kept out of a launcher or a rank)."""
    for package in packages:
        (folder / package).mkdir(parents=True)
        (folder / package / "__init__.py").write_text(f"raise ImportError('{package} is blocked for this test')\n")
    return str(folder)


@functools.cache
def horovod_imports(framework: str) -> bool:
    """Whether Horovod's binding for `framework` imports here, probed in a process of its own (it
    starts the framework: seconds, so it is asked only where the answer matters)."""
    module = "horovod.torch" if framework == "torch" else "horovod.tensorflow"
    probe = [framework_python(framework), "-c", f"import {module}"]
    return subprocess.run(probe, capture_output=True, env=tool_env(TF_USE_LEGACY_KERAS="1")).returncode == 0


def skip_unless_horovod_ran(result: subprocess.CompletedProcess, out: Path, framework: str) -> None:
    """Skip a Horovod cell (launch_cell's `result`, its folder `out`) that did not train because
    Horovod lacks `framework` (run ./install.sh). CI builds Horovod, so there it fails instead. The
    probe runs only for a cell that did not train: where it trained, Horovod has just shown it works."""
    run = out / "run.json"
    trained = result.returncode == 0 and run.exists() and json.loads(run.read_text())["status"] == "ok"
    if not trained and os.environ.get("CI") != "true" and not horovod_imports(framework):
        pytest.skip(f"Horovod without {framework} (run ./install.sh)")


@pytest.fixture(scope="session")
def schema() -> dict:
    return sb_config.load_schema(REPO / "config" / "schema.yaml")


def configured_image_size() -> tuple[int, int]:
    """dataset.image_size of config/config.yaml, the study this repository runs as it is."""
    config = sb_config.validate(
        yaml.safe_load((REPO / "config" / "config.yaml").read_text()),
        sb_config.load_schema(REPO / "config" / "schema.yaml"),
    )
    return tuple(config["dataset"]["image_size"])


def tiny_config(**sections: dict) -> dict:
    """A small, fast study config; keyword arguments update whole sections."""
    config = {
        "dataset": {"source": "synthetic", "image_size": [32, 48], "synthetic": {"count": 40, "size": [48, 64]}},
        "matrix": {"frameworks": ["torch"], "backends": ["native"], "gpus": [1, 2], "seeds": [1]},
        "training": {
            "epochs": 3,
            "batch_per_gpu": 4,
            "threads_per_rank": 1,
            "collective_timeout_s": 30,
            "loader": {"workers": 0},
            "predictions": 2,
            # the collective benchmark of every multi-rank cell: a short one, so the suite stays quick
            "collectives": {"budget_s": 0.5, "max_bytes": 2**20, "iterations": 3},
        },
    }
    for name, values in sections.items():
        config.setdefault(name, {}).update(values)
    return config


# The smallest study whose verdicts can be more than "one seed": two backends, two seeds, 2 epochs.
TINY_STUDY_MATRIX = {"frameworks": ["torch"], "backends": ["native", "horovod"], "gpus": [1, 2], "seeds": [1, 2]}


def tiny_study_config() -> dict:
    return tiny_config(training={"epochs": 2}, matrix=TINY_STUDY_MATRIX)


@pytest.fixture
def finished_study(tmp_path_factory) -> Path:
    """tiny_study_config() run by the real workflow (local executor) to its tables, figures and report
    (report.html in it), once per test run for every test that asks. Read it in place; a test that
    changes a study copies it first (copy_study)."""

    def make(folder: Path) -> None:
        # its prepared data as the workflow made it for every study of tiny_config()'s dataset, once per
        # run (paired_cells.study_data; imported here, where tests/integration is on the path): only the
        # cells train and the analysis runs here
        from paired_cells import study_data

        study_data(tmp_path_factory, folder, tiny_study_config())
        result = run_snakemake(folder, tiny_study_config(), "--cores", "2")
        assert result.returncode == 0, result.stderr[-3000:]
        report = run_snakemake(folder, tiny_study_config(), "--report", str(folder / "report.html"))
        assert report.returncode == 0, report.stderr[-3000:]

    return made_once(tmp_path_factory, "finished-study", make)


def copy_study(study: Path, into: Path) -> Path:
    """A copy of a finished study in `into`, its files' dates kept (Snakemake finds it up to date)."""
    shutil.copytree(study, into, copy_function=shutil.copy2, symlinks=True)
    return into


@pytest.fixture(scope="session")
def prepared_data(tmp_path_factory) -> Path:
    """40 synthetic pairs at 32 x 48, preprocessed like the pipeline does; one folder for the whole run,
    so cells trained once for several tests (made_once) read the same path as the tests' own."""

    def make(root: Path) -> None:
        synthetic.write_dataset(root / "raw", 40, 48, 64, seed=0)
        pairs, rule = pairing.find_pairs(root / "raw")
        preprocess.preprocess(pairs, root / "prepared", (32, 48), 0.2, 42, {"source": "synthetic", "pairing": rule})

    return made_once(tmp_path_factory, "prepared-data", make) / "prepared"


def snakemake_command(workdir: Path, config: dict, *args: str) -> list[str]:
    """The command that runs the real workflow in `workdir` with `config` as its only config file."""
    workdir.mkdir(parents=True, exist_ok=True)
    config_file = workdir / "test-config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    return [
        str(BIN / "snakemake"),
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(config_file),
        *args,
    ]


def run_snakemake(
    workdir: Path, config: dict, *args: str, timeout: float = 1800, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run the real workflow locally in `workdir` with `config` as its only config file (`env`: more variables)."""
    command = snakemake_command(workdir, config, *args)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=tool_env(**(env or {})))


def cell_settings(framework: str, backend: str, gpus: int, seed: int = 1, **training: object) -> dict:
    """Validated settings of one cell of tiny_config(), with training overrides."""
    schema = sb_config.load_schema(REPO / "config" / "schema.yaml")
    config = sb_config.validate(tiny_config(training=dict(training)), schema)
    return sb_config.train_settings(config, sb_config.Cell(framework, backend, gpus, seed))


def backend_run_settings(framework: str, backend: str, compression: str, gpus: int = 2):
    """A rank's settings for `backend` with `compression` set after validation (which refuses the
    pairs that cannot), to build backends the matrix would leave out."""
    from scalebench.settings import RunSettings

    settings = cell_settings(framework, "native", gpus)
    settings["cell"]["backend"] = backend
    settings["training"]["compression"] = compression
    return RunSettings.from_json(settings, "data", "out")


def training_settings(**training: object):
    """The typed training settings a rank of tiny_config() receives, with overrides."""
    from scalebench.settings import RunSettings

    return RunSettings.from_json(cell_settings("torch", "native", 1, **training), "data", "out").training


def launcher_command(settings: dict, data: Path, out: Path, sections: dict | None = None) -> list[str]:
    """The train rule's command for one cell (workflow/scripts/launch.py with the default launchers;
    `sections`: config key environments, default the install's)."""
    return sb_launch.command_line(settings, data, out, backends.default_launchers(), sections)


def rank_command(settings: dict, data: Path, out: Path) -> list[str]:
    """One rank started directly (workflow/scripts/train.py), without a launcher."""
    return sb_launch.rank_command(settings, data, out)


def launch_cell(
    settings: dict, data: Path, out: Path, timeout: float = 600, sections: dict | None = None, **env: str
) -> subprocess.CompletedProcess:
    """Run a cell's ranks to the end exactly as the train rule does (`sections`: config key environments)."""
    return subprocess.run(
        launcher_command(settings, data, out, sections),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=tool_env(SCALEBENCH_EXECUTOR="local", **env),
    )


def start_cell(settings: dict, data: Path, out: Path, **env: str) -> subprocess.Popen:
    """Start a cell like launch_cell without waiting, in its own session (the test can kill it all)."""
    return subprocess.Popen(
        launcher_command(settings, data, out),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=tool_env(SCALEBENCH_EXECUTOR="local", **env),
        start_new_session=True,
    )


def assert_refused(result: subprocess.CompletedProcess, out: Path, message: str) -> None:
    """A cell that no retry can change ended refused at its first attempt (scalebench/refusal.py), before
    any epoch: through launch.py (the train rule) as a successful job with status refused and the
    reason in run.json; a rank started directly exits with REFUSED_EXIT_CODE and leaves its mark."""
    from scalebench import outcome

    output = result.stdout + result.stderr
    assert message in output, output[-3000:]
    run_json = out / "run.json"
    if result.returncode == 0:  # launch.py recorded the outcome
        run = json.loads(run_json.read_text())
        assert run["status"] == "refused" and message in run["reason"], run
    else:
        assert result.returncode == outcome.REFUSED_EXIT_CODE, output[-3000:]
        marks = sorted((out / outcome.MARKS["refused"]).glob("rank*"))
        assert marks and message in marks[0].read_text()
    records = (out / "metrics.jsonl").read_text() if (out / "metrics.jsonl").exists() else ""
    assert '"type": "epoch"' not in records


def rank_pids(out: Path) -> list[int]:
    """Processes running a rank of the cell writing to `out`: Python executing train.py
    (not torchrun, local_ranks.py, horovodrun or a shell wrapper)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            args = [a.decode(errors="replace") for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
        except (OSError, ValueError):
            continue
        is_rank = len(args) >= 2 and "python" in Path(args[0]).name and str(SCRIPTS / "train.py") in args[1:3]
        if is_rank and str(out) in args:
            pids.append(int(proc.name))
    return sorted(pids)


def checkpoint_epoch(out: Path, framework: str) -> int | None:
    """The epoch of the checkpoint in force in a cell's folder (None: none yet). Both frameworks
    write atomically (a renamed file; TensorFlow's state file last), so a whole one or none is seen.
    Read without either framework, in any session: TensorFlow's state file is text, and torch's
    checkpoint.pt a zip whose pickle holds the loop's state beside tensors (read as placeholders)."""
    if framework == "tensorflow":
        state = out / "checkpoint" / "checkpoint"
        text = state.read_text() if state.exists() else ""
        found = re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', text, re.MULTILINE)
        return int(found.group(1)) if found else None
    try:
        return torch_checkpoint(out / "checkpoint.pt")["loop"]["epoch"]
    except (FileNotFoundError, zipfile.BadZipFile, KeyError, EOFError, pickle.UnpicklingError):
        return None


class _TorchPlaceholder:
    """What a torch object in a checkpoint's pickle reads as without torch (a tensor, a storage)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __setstate__(self, state: object) -> None:
        pass


class _WithoutTorch(pickle.Unpickler):
    """torch.save's pickle read without torch: its classes and functions are placeholders, its
    storages (the pickle's persistent ids) None; everything else is what it is."""

    def find_class(self, module: str, name: str) -> object:
        return _TorchPlaceholder if module.split(".")[0] == "torch" else super().find_class(module, name)

    def persistent_load(self, pid: object) -> None:
        return None


def torch_checkpoint(path: Path) -> dict:
    """A checkpoint.pt's state as torch.save wrote it, its tensors placeholders: what the loop's
    state says (its epoch), in any session, torch or not."""
    with zipfile.ZipFile(path) as archive:
        (name,) = [entry for entry in archive.namelist() if entry.endswith("/data.pkl")]
        with archive.open(name) as pickled:
            return _WithoutTorch(pickled).load()


def repository_head() -> str:
    """This checkout's HEAD as git itself says, with -dirty where tracked files differ from it:
    the commit run.json must name (train/provenance.py)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()

    return git("rev-parse", "HEAD") + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def read_report(path: Path) -> str:
    """A report's HTML; its text must render without a docutils system message (an error a reader
    would see on the page, e.g. an indented line after a Jinja tag)."""
    html = path.read_text()
    at = html.find("System Message")
    assert at < 0, f"{path.name} shows a docutils system message: {html[at - 200 : at + 600]}"
    return html


def kill_if_running(*processes: subprocess.Popen | None) -> None:
    """Kill what a test started and left running (a failed assertion must not leave it behind)."""
    for process in processes:
        if process is not None and process.poll() is None:
            process.kill()


def wait_for(predicate, timeout: float) -> bool:
    """Poll `predicate` until it holds (True) or `timeout` seconds pass (False)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def read_records(out: Path) -> tuple[list[dict], dict, dict]:
    """(epoch records, final record, run.json) of a cell folder."""

    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    epochs = [r for r in lines if r["type"] == "epoch"]
    final = next(r for r in lines if r["type"] == "final")
    run = json.loads((out / "run.json").read_text())
    # what the ranks wrote is what records/definitions.py defines (docs/records.md)
    from scalebench.records.definitions import EPOCH, FINAL, RUN

    for definition, record in [*((EPOCH, epoch) for epoch in epochs), (FINAL, final), (RUN, run)]:
        assert not definition.undefined(record), f"define in records/definitions.py: {definition.undefined(record)}"
    return epochs, final, run


# TensorBoard's reader (each framework's environment has TensorBoard, the pipeline's has not)
READ_CURVES = """
import json, sys
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.util import tensor_util

accumulator = event_accumulator.EventAccumulator(sys.argv[1])
accumulator.Reload()
tags = accumulator.Tags()
found = {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in tags["scalars"]}  # PyTorch
for tag in tags["tensors"]:  # tf.summary.scalar writes a scalar tensor
    found[tag] = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in accumulator.Tensors(tag)]
print(json.dumps(found))
"""


def read_curves(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Each scalar tag of the event files in `folder`: its (step, value) points, as TensorBoard reads
    them, in an installed framework's environment (the pipeline's has no TensorBoard)."""
    found = in_framework(environments.installed_frameworks()[0], READ_CURVES, str(folder))
    return {tag: [(step, value) for step, value in points] for tag, points in found.items()}


def expected_curves(epochs: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """The curves metrics.jsonl's epoch records give: the evaluation's tags name it as the records
    do, with points in the epochs that evaluated (none without training.eval_every)."""
    evaluation = "validation" if "val_iou" in epochs[0] else "test"
    key = "val" if evaluation == "validation" else "test"
    fields = {
        "loss/train": lambda e: e["loss"],
        "learning_rate": lambda e: e["lr"],
        "throughput/images_per_s": lambda e: e["images_per_s"],
        "data_wait/share": lambda e: e["data_wait_s"] / e["epoch_time_s"],
        f"loss/{evaluation}": lambda e: e[f"{key}_loss"],
        f"iou/{evaluation}": lambda e: e[f"{key}_iou"],
    }
    curves = {tag: [(e["epoch"], value(e)) for e in epochs if value(e) is not None] for tag, value in fields.items()}
    return {tag: points for tag, points in curves.items() if points}


def assert_curves_equal_records(folder: Path, epochs: list[dict]) -> None:
    found, expected = read_curves(folder), expected_curves(epochs)
    assert sorted(found) == sorted(expected)
    for tag, points in expected.items():
        assert [step for step, _ in found[tag]] == [step for step, _ in points], tag
        # event files hold float32
        assert [value for _, value in found[tag]] == pytest.approx([value for _, value in points], rel=1e-6), tag


def allreduce_counts(timeline: Path) -> dict[str, int]:
    """How often Horovod allreduced each named tensor, from the timeline HOROVOD_TIMELINE wrote.

    Each tensor is a `pid`, named by a process_name event; each of its reductions opens an
    ALLREDUCE phase. Horovod may leave the JSON array open while it runs.
    """
    text = timeline.read_text().strip()
    if not text.endswith("]"):
        text = text.rstrip(",") + "]"
    events = json.loads(text)
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name" and "name" in e["args"]}
    counts: dict[str, int] = {}
    for event in events:
        if event.get("ph") == "B" and event.get("name") == "ALLREDUCE":
            counts[names[event["pid"]]] = counts.get(names[event["pid"]], 0) + 1
    return counts


def rank_in_process(framework_name: str, backend: str, data: Path, out: Path, **training: object):
    """The loop of one rank of a one-GPU cell in this process, built (its device, backend and
    everything its spec builds) and not yet trained; a test shuts its backend down."""
    import time

    from scalebench.settings import ProcessFacts, RunSettings
    from scalebench.train import rank_env
    from scalebench.train.entry import build_rank, cell_hash
    from scalebench.train.faults import NO_FAULTS
    from scalebench.train.loop import TrainingLoop

    started = time.perf_counter()
    settings = cell_settings(framework_name, backend, 1, **training)
    out.mkdir(exist_ok=True)
    run = RunSettings.from_json(settings, data, out)
    process = ProcessFacts.of_rank(run, {})
    spec, device, built = build_rank(run, process, rank_env.detect({}))
    try:
        # no test fault, no binding: as a rank started without SCALEBENCH_FAULT or launch.py
        config_hash = cell_hash(settings, data)
        return TrainingLoop(run, spec, device, built, process, config_hash, started, faults=NO_FAULTS, cpu_binding=None)
    except BaseException:
        built.shutdown()
        raise


def train_in_process(framework_name: str, backend: str, data: Path, out: Path, **training: object):
    """One rank of a one-GPU cell through the real loop in this process; the loop after it (so a
    test can read the model, the optimizer and the batches it trained on: loop.steps, loop.batches)."""
    loop = rank_in_process(framework_name, backend, data, out, **training)
    try:
        assert loop.train() == "ok"
    finally:
        loop.backend.shutdown()
    return loop


FRESH = "SCALEBENCH_TEST_FRESH_PROCESS"


def in_fresh_process(request: pytest.FixtureRequest, tmp_path_factory, keyword: str = "") -> bool:
    """Run this test again in a pytest process of its own, and say so (the caller then returns): its
    outcome there is this test's.

    TensorFlow fixes its threads and devices at its first operation, and a rank sets them
    (runtime.configure) as it starts; another test of this session may have run TensorFlow first.
    With `keyword`, the tests of this test's module that pytest's `-k keyword` selects share one such
    process, made once per run (made_once): they need the same TensorFlow, and a cold import costs
    seconds. Alone (`pytest path::name`) a test still runs its process itself.
    """
    if os.environ.get(FRESH) == "1":
        return False
    selection = ["-k", keyword, str(request.node.path)] if keyword else [request.node.nodeid]
    group = f"{request.node.path.stem}-{keyword}" if keyword else request.node.nodeid

    def make(folder: Path) -> None:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={folder / 'inner'}"]
        command += [f"--junitxml={folder / 'results.xml'}", *selection]
        done = subprocess.run(
            command, cwd=REPO, capture_output=True, text=True, timeout=600, env=layered_env(**{FRESH: "1"})
        )
        (folder / "output.txt").write_text(done.stdout + done.stderr)

    folder = made_once(tmp_path_factory, "fresh-" + re.sub(r"[^\w.-]+", "_", group), make)
    output = (folder / "output.txt").read_text()
    results = folder / "results.xml"
    assert results.exists(), output[-3000:]
    cases = [case for case in ElementTree.parse(results).iter("testcase") if case.get("name") == request.node.name]
    assert cases, f"{request.node.name} did not run in its own process:\n{output[-3000:]}"
    for outcome in ("failure", "error"):
        found = cases[0].find(outcome)
        assert found is None, f"{found.get('message')}\n{(found.text or '')[-3000:]}"
    skipped = cases[0].find("skipped")
    if skipped is not None:
        pytest.skip(skipped.get("message", "skipped in its own process"))
    return True
