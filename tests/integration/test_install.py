"""./install.sh: the Pythons it accepts and refuses, an environment made by another Python, an
install without Horovod (and the study it then refuses), the Horovod that HOROVOD_GPU_OPERATIONS asks
for, and pins that have a wheel for every supported Python."""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from conftest import REPO, snakemake_command, tiny_config, tool_env

pytestmark = pytest.mark.integration

sys.path.insert(0, str(REPO / "tools"))
from pins import pins_for, supported_pythons  # noqa: E402

VENV = str(Path(sys.executable).parent.parent)  # the environment running the tests, already installed
ENVS = [str(REPO / "envs" / name) for name in ("train.yaml", "pipeline.yaml", "dev.yaml")]
SUPPORTED = "scalebench supports CPython 3.11 to 3.13 (its pinned packages have wheels for them)"
GET_ONE = ("module load python/3.13", "conda create -p ~/py3.13 python=3.13", "uv python install 3.13")


def install(venv: str = VENV, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(REPO / "install.sh")], capture_output=True, text=True, timeout=600, env=tool_env(VENV=venv, **env)
    )


def stand_in_python(folder: Path, answer: str, name: str = "") -> str:
    """A command that answers install.sh's one question to a Python (which one are you) as `answer`
    ("CPython 3.14") does: none of 3.10, 3.12 to 3.14 is on this machine's PATH."""
    folder.mkdir(exist_ok=True)
    path = folder / (name or "python" + answer.split()[1])
    path.write_text(f'#!/bin/sh\necho "{answer}"\n')
    path.chmod(0o755)
    return str(path)


def test_a_python_outside_3_11_to_3_13_is_refused_at_once_naming_the_range_and_how_to_get_one(tmp_path):
    venv = tmp_path / "venv"
    for answer in ("CPython 3.10", "CPython 3.14", "PyPy 3.11"):
        python = stand_in_python(tmp_path / "bin", answer)
        asked = install(str(venv), PYTHON=python)
        assert asked.returncode == 1
        assert f"install.sh: PYTHON={python} is {answer}; {SUPPORTED}" in asked.stderr
        assert all(way in asked.stderr for way in GET_ONE), asked.stderr
        assert f"and run PYTHON=/path/to/python VENV={venv} ./install.sh" in asked.stderr
        assert not venv.exists()  # refused before anything was made
    # python3 itself, where PYTHON is not set
    stand_in_python(tmp_path / "bin", "CPython 3.10", "python3")
    asked = install(str(venv), PATH=f"{tmp_path / 'bin'}:{tool_env()['PATH']}")
    assert asked.returncode == 1 and f"install.sh: python3 is CPython 3.10; {SUPPORTED}" in asked.stderr
    missing = install(str(venv), PYTHON="python3.99")
    assert (
        "install.sh: PYTHON=python3.99 does not run (not found); scalebench needs CPython 3.11 to 3.13"
        in missing.stderr
    )
    argument = subprocess.run([str(REPO / "install.sh"), "--python", "3.12"], capture_output=True, text=True)
    assert argument.returncode == 2  # its usage, with the variables that choose
    assert "PYTHON=python3.12 ./install.sh      # with that Python (default: python3)" in argument.stderr
    assert "install.sh: '--python': it takes no arguments; the settings are the variables above" in argument.stderr
    asked = install(str(venv), SCALEBENCH_HOROVOD="no")
    assert asked.returncode == 1
    assert "SCALEBENCH_HOROVOD is 'no': 1 builds Horovod (the default), 0 installs everything else" in asked.stderr
    assert not venv.exists()


def base_python() -> str:
    """The interpreter the running environment was made with."""
    return getattr(sys, "_base_executable", sys.executable)


def test_an_environment_made_by_another_python_is_refused_and_one_whose_python_is_gone_is_made_again(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([base_python(), "-m", "venv", "--without-pip", str(venv)], check=True)
    made = sorted(path.name for path in venv.rglob("*"))
    mine = "CPython {}.{}".format(*sys.version_info[:2])
    answer = "CPython 3.13" if mine != "CPython 3.13" else "CPython 3.12"
    other = stand_in_python(tmp_path / "bin", answer)
    asked = install(str(venv), PYTHON=other)
    assert asked.returncode == 1
    assert (
        f"install.sh: {venv} was made with {mine}, and PYTHON={other} is {answer}; one environment holds one "
        f"Python's packages: to make it again with {answer}: rm -rf {venv} && PYTHON={other} VENV={venv} ./install.sh"
    ) in asked.stderr
    assert sorted(path.name for path in venv.rglob("*")) == made  # untouched
    # the interpreter that made it removed (a module unloaded for good, a pyenv version uninstalled):
    # made again; here pip can reach no index, so making it fails, and what this run made is removed
    for name in ("python", "python3"):
        (venv / "bin" / name).unlink()
        (venv / "bin" / name).symlink_to(tmp_path / "removed" / "python3")
    again = install(str(venv), PYTHON=base_python(), PIP_NO_INDEX="1", PIP_FIND_LINKS=str(tmp_path))
    assert f"install.sh: the Python that made {venv} (" in again.stdout
    assert f") no longer runs: making {venv} again" in again.stdout
    assert f"install.sh: creating {venv} with {mine}" in again.stdout
    assert again.returncode == 1 and f"install.sh: could not make {venv} (above: why)" in again.stderr
    assert not venv.exists()  # never half-made: the next run starts clean


def environment_without(folder: Path, package: str) -> Path:
    """A real environment that lacks `package` and has everything else the running one has: a venv of
    the same interpreter whose site-packages links each entry of this one's but the package's (made in
    a second, where installing all but Horovod takes minutes)."""
    venv = folder / "venv"
    subprocess.run([base_python(), "-m", "venv", "--without-pip", str(venv)], check=True)
    here = Path(sysconfig.get_paths()["purelib"])
    there = venv / here.relative_to(sys.prefix)
    for entry in here.iterdir():
        if entry.name.split("-")[0].lower() != package:
            (there / entry.name).symlink_to(entry)
    return venv


def test_without_horovod_the_install_skips_it_and_a_study_that_asks_for_it_is_refused_before_any_job(tmp_path):
    venv = environment_without(tmp_path, "horovod")
    python = str(venv / "bin" / "python")
    # python3 on PATH is another Python: the environment keeps the one that made it. No index: pip
    # can only find every pin already installed (through the links), so it changes nothing they point to.
    stand_in_python(tmp_path / "bin", "CPython 3.10", "python3")
    installed = install(
        str(venv),
        SCALEBENCH_HOROVOD="0",
        PATH=f"{tmp_path / 'bin'}:{tool_env()['PATH']}",
        PIP_NO_INDEX="1",
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    assert "install.sh: CPython {}.{} in {}".format(*sys.version_info[:2], venv) in installed.stdout
    assert installed.stdout.strip().endswith(
        f"without Horovod (SCALEBENCH_HOROVOD=0): a study with backend horovod is refused until VENV={venv} "
        "./install.sh builds it)"
    )
    assert "build_horovod" not in installed.stdout + installed.stderr
    assert not list((venv / "lib").rglob("horovod*"))  # not built, not installed

    def plan(backends: list[str]) -> subprocess.CompletedProcess:
        config = tiny_config(matrix={"frameworks": ["torch"], "backends": backends, "gpus": [1], "seeds": [1]})
        command = snakemake_command(tmp_path / "study", config, "--cores", "1", "-n")
        return subprocess.run(
            [python, "-m", "snakemake", *command[1:]], capture_output=True, text=True, timeout=300, env=tool_env()
        )

    refused = plan(["native", "horovod"])
    assert refused.returncode == 1
    assert (
        f"config key 'matrix.backends': backend horovod needs the package horovod, which this environment "
        f"({python}) does not have: install it with ./install.sh (it builds Horovod unless "
        f"SCALEBENCH_HOROVOD=0), or tools/build_horovod.sh {python}, or leave horovod out of matrix.backends"
    ) in refused.stdout  # Snakemake's WorkflowError
    assert not (tmp_path / "study" / "results").exists()  # before any job, before any cell was planned
    assert plan(["native"]).returncode == 0  # the same study without it plans


def test_an_nccl_install_over_a_cpu_build_names_what_is_missing_and_changes_nothing():
    asked = install(HOROVOD_GPU_OPERATIONS="NCCL")
    assert asked.returncode != 0
    assert "has GPU operations 'none', HOROVOD_GPU_OPERATIONS asks for 'NCCL': replacing it" in asked.stdout
    assert "build_horovod: HOROVOD_GPU_OPERATIONS=NCCL, but torch in" in asked.stderr
    assert "is the CPU build" in asked.stderr
    assert (
        "install.sh: Horovod was not built (above: why); everything else is installed. To go on without it: "
        f"SCALEBENCH_HOROVOD=0 VENV={VENV} ./install.sh (a study with backend horovod is then refused before any job)"
    ) in asked.stderr
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


def test_a_cuda_torch_beside_a_lone_nvcc_is_named_before_building(tmp_path):
    """PyPI's torch for Linux is the CUDA build (every Python but this machine's 3.11, whose CPU wheel
    is on disk), and Horovod then compiles CUDA parts that need the toolkit's headers; a lone nvcc
    (here /usr/local/bin/nvcc) made that build fail after minutes. A stand-in torch answers as that
    CUDA build does, and a stand-in nvcc stands alone on PATH."""
    fake = tmp_path / "fake" / "torch"
    (fake / "utils").mkdir(parents=True)
    cuda = tmp_path / "cuda"
    (fake / "__init__.py").write_text("from . import utils, version\n")
    (fake / "version.py").write_text('cuda = "13.0"\n')
    (fake / "utils" / "__init__.py").write_text("")
    (fake / "utils" / "cpp_extension.py").write_text(f"CUDA_HOME = {str(cuda)!r}\n")
    (cuda / "bin").mkdir(parents=True)
    tool(cuda / "bin", "nvcc", "echo 'Cuda compilation tools, release 13.0'")
    result = build_horovod(tmp_path, PATH=f"{cuda / 'bin'}:{tool_env()['PATH']}", PYTHONPATH=str(fake.parent))
    assert result.returncode == 1
    assert (
        f"build_horovod: torch in {sys.executable} is a CUDA build (CUDA 13.0) and finds CUDA in {cuda}, so "
        f"Horovod compiles its CUDA parts, but no cuda_runtime.h is there nor beside {cuda}/bin/nvcc"
    ) in result.stderr
    assert "--index-url https://download.pytorch.org/whl/cpu" in result.stderr
    assert "building Horovod" not in result.stdout


def test_a_failed_build_shows_its_first_error_not_the_tracebacks_after_it():
    # the log of a Horovod build CMake 4 refused (before tools/horovod_fixes.py fixed it), shortened,
    # as pip 26 writes it: its own words that the build failed first, then the build's output
    log = [
        "  Building wheel for horovod (pyproject.toml): finished with status 'error'",
        "  error: subprocess-exited-with-error",
        "  × Building wheel for horovod (pyproject.toml) did not run successfully.",
        "  ╰─> [303 lines of output]",
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
    assert shown[1].startswith("CMake Error at third_party/gloo/CMakeLists.txt:1"), shown
    assert "Compatibility with CMake < 3.5 has been removed" in shown[2]
    assert not any("CalledProcessError" in line for line in shown)
    compiler = [
        "[ 12%] Building CXX object ...",
        "group_table.h:36:9: error: 'string' in namespace 'std' does not name a type",
    ]
    assert first_error([*compiler, "make: *** [Makefile:136: all] Error 2"], 5)[1] == compiler[1]


def unresolved(python: str, pins: list[str], target: str) -> str:
    """pip's own resolver for another Python: '' where every pin has a wheel for `python` on this
    machine's platform (for a pure-Python sdist, a py3 wheel), else pip's complaint."""
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", python, "--target", target, "--quiet", *pins]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    return "" if result.returncode == 0 else result.stderr


def test_every_pin_has_a_wheel_for_every_supported_python(tmp_path):
    """So that a pin bump that drops a Python fails here, not at a user's install: one resolver run
    per Python, all at once; a failed one is retried pin by pin only to name the pins that lack one.
    Horovod is left out: it is built from its source here (tools/build_horovod.sh)."""
    pythons = supported_pythons(ENVS)
    assert pythons == ["3.11", "3.12", "3.13"]

    def check(python: str) -> list[str]:
        pins = [f"{name}=={version}" for name, version in sorted(pins_for(ENVS, python).items()) if name != "horovod"]
        with tempfile.TemporaryDirectory(dir=tmp_path) as target:
            if not unresolved(python, pins, target):
                return []
            return [f"{pin} for Python {python}" for pin in pins if unresolved(python, [pin], target)]

    with concurrent.futures.ThreadPoolExecutor(len(pythons)) as pool:
        missing = [pin for found in pool.map(check, pythons) for pin in found]
    assert missing == [], f"no wheel: {missing}"
