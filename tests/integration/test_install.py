"""./install.sh: the Pythons it accepts and refuses, an environment made by another Python, the
frameworks it installs (and the study it refuses without one), an install without Horovod (and the
study it then refuses), torch's CUDA build from an index (a local stand-in: one that has it, one that
does not, one that cannot be reached), the single environment of an earlier scalebench, the Horovod
that HOROVOD_GPU_OPERATIONS asks for, and pins that have a wheel for every supported Python."""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import PYTHON, REPO, framework_python, snakemake_command, tiny_config, tool_env

pytestmark = pytest.mark.integration

sys.path.insert(0, str(REPO / "tools"))
from pins import pins_for, supported_pythons  # noqa: E402

VENV = str(Path(PYTHON).parent.parent)  # the pipeline's environment, already installed (its frameworks/ too)
# each environment's files, as install.sh installs them
ENVIRONMENTS = {
    "pipeline": [str(REPO / "envs" / name) for name in ("pipeline.yaml", "dev.yaml")],
    "torch": [str(REPO / "envs" / "torch.yaml")],
    "tensorflow": [str(REPO / "envs" / "tensorflow.yaml")],
}
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
    assert "PYTHON=python3.12 ./install.sh           # with that Python (default: python3)" in argument.stderr
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


def linked_environment(venv: Path, like: str, leave_out: str = "") -> Path:
    """A real environment at `venv` whose site-packages links each entry of the environment of the
    Python `like` but `leave_out`'s (made in a second, where installing takes minutes). pip must
    never change such an environment's packages (they are the real one's): install.sh finds every
    pin already installed there, so pip changes nothing."""
    asked = "import sys, sysconfig; print(sys._base_executable, sysconfig.get_paths()['purelib'], sys.prefix)"
    base, here, prefix = subprocess.run([like, "-c", asked], capture_output=True, text=True, check=True).stdout.split()
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
    there = venv / Path(here).relative_to(prefix)
    for entry in Path(here).iterdir():
        if not leave_out or entry.name.split("-")[0].lower() != leave_out:
            (there / entry.name).symlink_to(entry)
    return venv


def plan(python: str, workdir: Path, matrix: dict, **sections: dict) -> subprocess.CompletedProcess:
    """A dry run of a study with `python`'s Snakemake."""
    config = tiny_config(matrix={"gpus": [1], "seeds": [1], **matrix}, **sections)
    command = snakemake_command(workdir, config, "--cores", "1", "-n")
    return subprocess.run(
        [python, "-m", "snakemake", *command[1:]], capture_output=True, text=True, timeout=300, env=tool_env()
    )


def test_the_install_made_three_environments_each_framework_with_its_own_horovod_and_not_the_other():
    """What ./install.sh made here, as the planner asks it (environments.probe): the pipeline's has
    neither framework nor Horovod; each framework's has its framework and a Horovod built for it
    alone, and not the other framework."""
    from scalebench import environments

    pipeline = environments.probe(environments.Environment("torch", PYTHON))  # torch asked of the pipeline's
    assert not pipeline.problem and not pipeline.framework and not pipeline.horovod
    assert not environments.probe(environments.Environment("tensorflow", PYTHON)).framework
    for framework, other in (("torch", "tensorflow"), ("tensorflow", "torch")):
        own = environments.probe(environments.resolve(framework))
        assert own.framework and own.horovod_framework, (framework, own)
        there = environments.Environment(other, framework_python(framework))
        assert not environments.probe(there).framework and not environments.probe(there).horovod_framework


def test_a_framework_the_project_does_not_have_or_a_build_it_cannot_name_is_refused_at_once(tmp_path):
    venv = tmp_path / "venv"
    asked = install(str(venv), SCALEBENCH_FRAMEWORKS="torch,jax")
    assert asked.returncode == 1
    assert "install.sh: SCALEBENCH_FRAMEWORKS names 'jax': scalebench has torch and tensorflow" in asked.stderr
    asked = install(str(venv), SCALEBENCH_TORCH_CUDA="12.6")
    assert asked.returncode == 1
    assert "SCALEBENCH_TORCH_CUDA is '12.6': a build of PyTorch's index (cpu, cu126, cu130, ...)" in asked.stderr
    asked = install(str(venv), SCALEBENCH_TORCH_INDEX="https://example.org/whl")
    assert asked.returncode == 1 and "set SCALEBENCH_TORCH_CUDA too" in asked.stderr
    asked = install(str(venv), SCALEBENCH_TF_CUDA="cuda12")
    assert asked.returncode == 1 and "SCALEBENCH_TF_CUDA is 'cuda12': and-cuda" in asked.stderr
    assert not venv.exists()  # refused before anything was made


def test_a_torch_only_install_without_horovod_and_the_studies_it_then_refuses(tmp_path):
    """SCALEBENCH_FRAMEWORKS=torch SCALEBENCH_HOROVOD=0: the pipeline and torch's environment, no
    build; a study that asks for TensorFlow, or for Horovod, is refused before any job, naming what
    is missing and the command that installs it."""
    venv = linked_environment(tmp_path / "venv", PYTHON)
    linked_environment(venv / "frameworks" / "torch", framework_python("torch"), leave_out="horovod")
    # python3 on PATH is another Python: the environment keeps the one that made it
    stand_in_python(tmp_path / "bin", "CPython 3.10", "python3")
    installed = install(
        str(venv),
        SCALEBENCH_FRAMEWORKS="torch",
        SCALEBENCH_HOROVOD="0",
        PATH=f"{tmp_path / 'bin'}:{tool_env()['PATH']}",
        PIP_NO_INDEX="1",
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    assert "install.sh: CPython {}.{} in {}".format(*sys.version_info[:2], venv) in installed.stdout
    assert installed.stdout.strip().endswith(
        f"install.sh: ready (the pipeline: {venv}; torch: {venv}/frameworks/torch, without Horovod "
        f"(SCALEBENCH_HOROVOD=0)); a study with backend horovod is refused until VENV={venv} ./install.sh builds it"
    )
    assert "build_horovod" not in installed.stdout + installed.stderr
    assert not (venv / "frameworks" / "tensorflow").exists()
    assert not list((venv / "frameworks" / "torch" / "lib").rglob("horovod*"))  # not built, not installed
    python = str(venv / "bin" / "python")
    refused = plan(
        python, tmp_path / "study", {"frameworks": ["torch", "tensorflow"], "backends": ["native", "horovod"]}
    )
    assert refused.returncode == 1
    output = refused.stdout + refused.stderr  # Snakemake's WorkflowError
    tensorflow = venv / "frameworks" / "tensorflow" / "bin" / "python"
    assert (
        f"config key 'matrix.frameworks': the tensorflow cells need tensorflow's environment ({tensorflow}, made by "
        f"./install.sh), and {tensorflow} is not there: install it with SCALEBENCH_FRAMEWORKS=torch,tensorflow "
        f"VENV={venv} ./install.sh, or set environments.tensorflow, or leave tensorflow out of matrix.frameworks"
    ) in output
    torch = venv / "frameworks" / "torch" / "bin" / "python"
    assert (
        f"config key 'matrix.backends': backend horovod of torch needs Horovod built for PyTorch in torch's "
        f"environment ({torch}, made by ./install.sh), which has no Horovod: install it with "
        f"SCALEBENCH_FRAMEWORKS=torch VENV={venv} ./install.sh (it builds Horovod in each framework's environment "
        f"unless SCALEBENCH_HOROVOD=0), or tools/build_horovod.sh {torch} torch, or leave horovod out of matrix.backends"
    ) in output
    assert not (tmp_path / "study" / "results").exists()  # before any job, before any cell was planned
    assert plan(python, tmp_path / "study", {"frameworks": ["torch"], "backends": ["native"]}).returncode == 0


def stand_in_torch_index(folder: Path, build: str) -> str:
    """A local wheel index (PEP 503's simple layout, file://) holding one stand-in wheel of torch's
    pinned version with the local label `build` (torch==2.13.0+cu126): a package named torch whose
    version and torch.version.cuda answer as that build's do. What install.sh asks of an index is
    the real thing: pip finds the build by its label there, the rest where pip finds it anyway."""
    import zipfile

    version = pins_for(ENVIRONMENTS["torch"], "{}.{}".format(*sys.version_info[:2]))["torch"] + "+" + build
    cuda = f"{build[2:-1]}.{build[-1]}" if build.startswith("cu") else None
    project = folder / "simple" / "torch"
    project.mkdir(parents=True)
    name = f"torch-{version}-py3-none-any.whl"
    info = f"torch-{version}.dist-info"
    files = {
        "torch/__init__.py": f'__version__ = "{version}"\nfrom . import version\n',
        "torch/version.py": f"cuda = {cuda!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: scalebench-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(project / name, "w") as wheel:
        for path, text in files.items():
            wheel.writestr(path, text)
        wheel.writestr(f"{info}/RECORD", "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n")
    (project / "index.html").write_text(f'<html><body><a href="{name}">{name}</a></body></html>\n')
    return (folder / "simple").as_uri()


def test_torchs_cuda_build_comes_from_the_index_named_and_a_build_it_cannot_have_changes_nothing(tmp_path):
    """SCALEBENCH_TORCH_CUDA=cu126 from a stand-in index: torch's environment gets that build (its
    version's label, its torch.version.cuda); asking it again for a build the index does not have,
    or of an index that cannot be reached, stops the install with pip's reason and leaves the
    environment as it was; a new environment that could not be made is not left half made."""
    venv = linked_environment(tmp_path / "venv", PYTHON)  # the pipeline's: pip finds it all installed
    index = stand_in_torch_index(tmp_path / "index", "cu126")
    # PIP_NO_INDEX stays unset: torch's other pins (numpy, tensorboard, ...) come from where pip finds them
    made = install(
        str(venv),
        SCALEBENCH_FRAMEWORKS="torch",
        SCALEBENCH_HOROVOD="0",
        SCALEBENCH_TORCH_CUDA="cu126",
        SCALEBENCH_TORCH_INDEX=index,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    assert f"install.sh: torch's packages (torch==2.13.0+cu126 from {index})" in made.stdout
    torch = str(venv / "frameworks" / "torch" / "bin" / "python")
    asked = "import importlib.metadata as m, torch; print(m.version('torch'), torch.version.cuda)"

    def build() -> str:
        return subprocess.run([torch, "-c", asked], capture_output=True, text=True, check=True).stdout.strip()

    assert build() == "2.13.0+cu126 12.6"
    lock = (venv / "frameworks" / "torch" / "requirements.lock").read_text()
    for missing, url in (("cu130", index), ("cu128", "http://127.0.0.1:9/simple")):
        again = install(
            str(venv),
            SCALEBENCH_FRAMEWORKS="torch",
            SCALEBENCH_HOROVOD="0",
            SCALEBENCH_TORCH_CUDA=missing,
            SCALEBENCH_TORCH_INDEX=url,
            PIP_RETRIES="0",
            PIP_TIMEOUT="5",
        )
        assert again.returncode == 1
        assert (
            f"install.sh: torch's packages were not installed (above: pip's reason, e.g. torch==2.13.0+{missing} is "
            f"not on the index, or the index cannot be reached); {venv}/frameworks/torch is as it was before this run"
        ) in again.stderr
        # pip's own reason above it (its words differ with its version and a constraints file)
        assert any(
            line.startswith("ERROR") and f"torch==2.13.0+{missing}" in line for line in again.stderr.splitlines()
        )
        assert build() == "2.13.0+cu126 12.6"  # the environment that worked still does
        assert (venv / "frameworks" / "torch" / "requirements.lock").read_text() == lock
    # a framework's environment this run made and could not finish is removed
    fresh = linked_environment(tmp_path / "fresh", PYTHON)
    failed = install(
        str(fresh),
        SCALEBENCH_FRAMEWORKS="torch",
        SCALEBENCH_HOROVOD="0",
        SCALEBENCH_TORCH_CUDA="cu130",
        SCALEBENCH_TORCH_INDEX=index,
    )
    assert failed.returncode == 1 and "torch's environment was not made" in failed.stderr
    assert not (fresh / "frameworks" / "torch").exists()


def test_the_single_environment_of_an_earlier_scalebench_is_set_aside_and_put_back_where_the_new_one_fails(tmp_path):
    """An environment of the old layout (a framework beside Snakemake): install.sh makes the new
    layout with its Python and removes the old one only once that succeeded; here making it fails
    (pip reaches no index), and the old one is back, as it was."""
    venv = linked_environment(tmp_path / "venv", PYTHON)
    site = next((venv / "lib").glob("python3.*/site-packages"))
    (site / "torch").mkdir()  # the old layout's torch, found without importing it
    (site / "torch" / "__init__.py").write_text("raise ImportError('the old layout')\n")
    before = sorted(path.name for path in site.iterdir())
    again = install(str(venv), SCALEBENCH_HOROVOD="0", PIP_NO_INDEX="1", PIP_FIND_LINKS=str(tmp_path))
    assert again.returncode == 1
    assert f"install.sh: {venv} holds the single environment of an earlier scalebench" in again.stdout
    assert f"the earlier one waits in {venv}.single-layout until this run succeeds" in again.stdout
    assert f"install.sh: the earlier environment is back in {venv}, as it was" in again.stderr
    assert sorted(path.name for path in site.iterdir()) == before
    assert not Path(f"{venv}.single-layout").exists()


def test_an_nccl_install_over_a_cpu_build_names_what_is_missing_and_changes_nothing():
    asked = install(HOROVOD_GPU_OPERATIONS="NCCL")
    assert asked.returncode != 0
    assert (
        "install.sh: the Horovod in torch's environment has GPU operations 'none', HOROVOD_GPU_OPERATIONS asks "
        "for 'NCCL': replacing it"
    ) in asked.stdout
    assert "build_horovod: HOROVOD_GPU_OPERATIONS=NCCL, but torch in" in asked.stderr
    assert "is the CPU build: install its CUDA build first (SCALEBENCH_TORCH_CUDA=cu126 or cu130" in asked.stderr
    assert (
        "install.sh: Horovod was not built for torch (above: why); everything else is installed. To go on without "
        f"it: SCALEBENCH_HOROVOD=0 VENV={VENV} ./install.sh (a study with backend horovod is then refused before any job)"
    ) in asked.stderr
    again = install()  # the installed CPU builds are still in place and still pass their check
    assert again.returncode == 0, again.stderr[-2000:]
    frameworks = Path(VENV) / "frameworks"
    assert again.stdout.strip().endswith(
        f"install.sh: ready (the pipeline: {VENV}; torch: {frameworks}/torch, Horovod with Gloo; "
        f"tensorflow: {frameworks}/tensorflow, Horovod with Gloo)"
    )


def tool(folder: Path, name: str, script: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)


def build_horovod(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """tools/build_horovod.sh with an empty wheel cache, so it would build."""
    return subprocess.run(
        [str(REPO / "tools" / "build_horovod.sh"), framework_python("torch"), "torch"],
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
        f"build_horovod: torch in {framework_python('torch')} is a CUDA build (CUDA 13.0) and finds CUDA in {cuda}, so "
        f"Horovod compiles its CUDA parts, but no cuda_runtime.h is there nor beside {cuda}/bin/nvcc"
    ) in result.stderr
    assert "--index-url https://download.pytorch.org/whl/cpu" in result.stderr
    assert "building Horovod" not in result.stdout


def test_an_nvcc_of_another_cuda_than_the_frameworks_is_refused_before_the_gpu_build(tmp_path):
    """Horovod's GPU operations run in the framework's process beside its CUDA runtime: a torch
    built with CUDA 13.0 (a stand-in answering as PyPI's does) and an nvcc of CUDA 12.4 on PATH are
    named, both versions and the fix, before anything is downloaded or built."""
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("from . import version\n")
    (fake / "version.py").write_text('cuda = "13.0"\n')
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    tool(cuda / "bin", "nvcc", "echo 'Cuda compilation tools, release 12.4, V12.4.131'")
    result = build_horovod(
        tmp_path,
        PATH=f"{cuda / 'bin'}:{tool_env()['PATH']}",
        PYTHONPATH=str(fake.parent),
        HOROVOD_GPU_OPERATIONS="NCCL",
    )
    assert result.returncode == 1
    assert (
        f"build_horovod: HOROVOD_GPU_OPERATIONS=NCCL, but torch in {framework_python('torch')} is a CUDA 13.0 build "
        f"and nvcc ({cuda}/bin/nvcc) is CUDA 12.4: Horovod's GPU operations must be compiled with the CUDA major "
        "version the framework was built with. Load a CUDA 13 toolkit ('module load cuda/13', or set CUDA_HOME to "
        "one), or install torch's CUDA 12 build (SCALEBENCH_TORCH_CUDA=cu126 ./install.sh)"
    ) in result.stderr
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
    pythons = supported_pythons([path for paths in ENVIRONMENTS.values() for path in paths])
    assert pythons == ["3.11", "3.12", "3.13"]

    def check(python: str) -> list[str]:
        # each environment's pins, resolved on their own (two environments may pin a package apart)
        missing = []
        for environment, paths in ENVIRONMENTS.items():
            pins = [
                f"{name}=={version}" for name, version in sorted(pins_for(paths, python).items()) if name != "horovod"
            ]
            with tempfile.TemporaryDirectory(dir=tmp_path) as target:
                if unresolved(python, pins, target):
                    missing += [
                        f"{pin} for Python {python} ({environment})"
                        for pin in pins
                        if unresolved(python, [pin], target)
                    ]
        return missing

    with concurrent.futures.ThreadPoolExecutor(len(pythons)) as pool:
        missing = [pin for found in pool.map(check, pythons) for pin in found]
    assert missing == [], f"no wheel: {missing}"
