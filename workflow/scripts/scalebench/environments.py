"""Each framework's training environment: where its Python is, how a rank runs in it, and what it
holds, asked without importing the framework.

./install.sh makes one environment per framework beside the pipeline's: the pipeline (Snakemake,
the launcher, the analysis) in $VENV, PyPI's torch with a Horovod built against it alone in
$VENV/frameworks/torch, TensorFlow with its own Horovod in $VENV/frameworks/tensorflow, as the seed
studies had one environment per framework: each with its own CUDA build and NCCL, which one
environment cannot hold for both. Config key environments.<framework> names another interpreter
(a site's module, a conda environment) or an Apptainer/Singularity image the ranks run inside.

The planner asks each environment what it holds (`probe`: one short Python, no framework imported)
and refuses a study whose cells need what is missing, naming the install command; launch.py fills
the launcher templates' {python} and {container} from `resolve`.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# The folder of the pipeline's environment that holds the frameworks' environments
FRAMEWORKS_FOLDER = "frameworks"
REPOSITORY = Path(__file__).resolve().parents[3]
# The Python package of each framework, and the file of Horovod's extension for it (Horovod builds
# one per framework it was built with: a Horovod built for torch alone has no TensorFlow one)
PACKAGES = {"torch": "torch", "tensorflow": "tensorflow"}
HOROVOD_EXTENSIONS = {"torch": "torch/mpi_lib_v2", "tensorflow": "tensorflow/mpi_lib"}
# where each framework's profiler lives, inside its installed package (training.profile)
PROFILERS = {"torch": "profiler", "tensorflow": "python/profiler/profiler_v2.py"}
# the Python inside an image, where environments.<framework>.python does not name one
IMAGE_PYTHON = "python3"


@dataclass(frozen=True)
class Environment:
    """How a rank of `framework` runs: `python` (inside `image` where there is one), the command that
    enters the image (empty without one), and where the setting came from, for messages."""

    framework: str
    python: str
    container: tuple[str, ...] = ()
    image: str | None = None
    source: str = "made by ./install.sh"

    @property
    def command(self) -> list[str]:
        """The interpreter as a command line: through the image where there is one."""
        return [*self.container, self.python]

    def describe(self) -> str:
        """'torch's environment (/x/.venv/frameworks/torch/bin/python)', for messages."""
        where = f"{self.python} in the image {self.image}" if self.image else self.python
        return f"{self.framework}'s environment ({where}, {self.source})"


def install_root(prefix: str | None = None) -> Path:
    """The pipeline's environment made by ./install.sh: this interpreter's, or the one whose
    frameworks/ folder this interpreter's environment is in (a framework's test session)."""
    here = Path(prefix or sys.prefix)
    if here.parent.name == FRAMEWORKS_FOLDER and (here.parent.parent / "pyvenv.cfg").exists():
        return here.parent.parent
    return here


def installed_python(framework: str, root: Path | None = None) -> Path:
    """The Python of `framework`'s environment as ./install.sh makes it."""
    return (root or install_root()) / FRAMEWORKS_FOLDER / framework / "bin" / "python"


def installed_frameworks(root: Path | None = None) -> list[str]:
    """The frameworks whose environment ./install.sh made beside this pipeline."""
    return [framework for framework in PACKAGES if installed_python(framework, root).exists()]


def resolve(framework: str, section: dict | None = None) -> Environment:
    """`framework`'s environment from config key environments.<framework> (`section`: its python,
    image and container), else the one ./install.sh made."""
    section = section or {}
    image, python = section.get("image"), section.get("python")
    key = f"environments.{framework}"
    if image:
        template = section.get("container") or "apptainer exec --nv --bind {repository} {image}"
        container = tuple(part.format(image=image, repository=REPOSITORY) for part in shlex.split(template))
        return Environment(framework, python or IMAGE_PYTHON, container, image, f"config key {key}.image")
    if python:
        return Environment(framework, python, source=f"config key {key}.python")
    return Environment(framework, str(installed_python(framework)))


def install_command(frameworks: list[str] | set[str]) -> str:
    """The command that installs `frameworks` beside the ones this pipeline has."""
    root = install_root()
    wanted = [framework for framework in PACKAGES if framework in set(frameworks) | set(installed_frameworks(root))]
    venv = "" if root == REPOSITORY / ".venv" else f"VENV={root} "
    return f"SCALEBENCH_FRAMEWORKS={','.join(wanted)} {venv}./install.sh"


# What an environment holds, found without importing anything but the standard library: a
# package's folder from the import system's path finder (which runs none of its code), Horovod's
# extension for the framework by its file.
PROBE = """
import glob, importlib.machinery, json, os, sys
framework, package, extension, profiler = sys.argv[1:5]
def folders(name):
    spec = importlib.machinery.PathFinder.find_spec(name)
    return list(spec.submodule_search_locations or []) if spec else []
found, horovod = folders(package), folders("horovod")
print(json.dumps({
    "python": "%d.%d.%d" % sys.version_info[:3],
    "framework": bool(found),
    "horovod": bool(horovod),
    "horovod_framework": any(glob.glob(os.path.join(f, extension + "*.so")) for f in horovod),
    "profiler": any(os.path.exists(os.path.join(f, profiler)) for f in found),
}))
"""


@dataclass(frozen=True)
class Holds:
    """What an environment holds: its Python's version, the framework, Horovod and Horovod's
    extension for the framework, the framework's profiler; `problem` says why it could not be asked."""

    python: str = ""
    framework: bool = False
    horovod: bool = False
    horovod_framework: bool = False
    profiler: bool = False
    problem: str = ""


_asked: dict[tuple[str, ...], Holds] = {}


def probe(environment: Environment) -> Holds:
    """What `environment` holds (asked once per process and command)."""
    framework = environment.framework
    command = (
        *environment.command,
        "-I",  # no user site, no PYTHON* variables: the environment as its ranks see it
        "-c",
        PROBE,
        framework,
        PACKAGES[framework],
        HOROVOD_EXTENSIONS[framework],
        PROFILERS[framework],
    )
    if command not in _asked:
        _asked[command] = _ask(command)
    return _asked[command]


def _ask(command: tuple[str, ...]) -> Holds:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        return Holds(problem=f"{command[0]} is not there")
    except (OSError, subprocess.TimeoutExpired) as error:
        return Holds(problem=f"{shlex.join(command[:2])} did not answer ({error})")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Holds(problem=f"{shlex.join(command[: command.index('-I')])} does not run ({last})")
    try:
        return Holds(**json.loads(done.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError, TypeError):
        return Holds(problem=f"{command[0]} answered {done.stdout.strip()[-200:]!r}")
