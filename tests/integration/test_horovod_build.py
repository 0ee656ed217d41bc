"""Horovod's sdist, patched by tools/horovod_fixes.py, configures with CMake 4 and its headers stand
on their own against a strict standard library, so the next CMake or compiler cannot break
./install.sh silently.

The sdist comes from PyPI (the pin of envs/torch.yaml) and CMake 4 from PyPI's cmake wheel, both
kept in the scalebench cache; the header test needs clang with libc++ (Debian: clang-19
libc++-19-dev). Each test first shows that the unpatched sdist fails where the fix acts.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import REPO, framework_python, tool_env

sys.path.insert(0, str(REPO / "tools"))
import horovod_fixes  # noqa: E402
import pins  # noqa: E402

pytestmark = pytest.mark.integration

CMAKE4 = "4.4.4"  # a CMake 4 from PyPI (4.0 removed compatibility with cmake_minimum_required < 3.5)
# the pin for the Python running the tests (pins.py: a pin may differ by Python)
HOROVOD = pins.pins_for([str(REPO / "envs" / "torch.yaml")], "{}.{}".format(*sys.version_info[:2]))["horovod"]
CACHE = Path(
    os.environ.get("SCALEBENCH_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "scalebench"
)
# What tools/build_horovod.sh exports for torch's Horovod (its CPU configuration): torch alone, in
# torch's environment (each framework's environment builds its own)
BUILD_ENV = {
    "HOROVOD_WITH_PYTORCH": "1",
    "HOROVOD_WITHOUT_TENSORFLOW": "1",
    "HOROVOD_WITH_GLOO": "1",
    "HOROVOD_WITHOUT_MXNET": "1",
    "HOROVOD_WITHOUT_MPI": "1",
    "HOROVOD_CPU_OPERATIONS": "gloo",
}


def pip(*args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=600)
    if result.returncode:
        pytest.skip(f"pip {' '.join(args[:3])} failed (no PyPI here?): {result.stderr.strip()[-300:]}")


@pytest.fixture(scope="module")
def sdist() -> Path:
    """Horovod's source release, as build_horovod.sh downloads it."""
    folder = CACHE / "sdist"
    archive = folder / f"horovod-{HOROVOD}.tar.gz"
    if not archive.exists():
        pip("download", "--quiet", "--no-deps", "--no-binary", ":all:", f"horovod=={HOROVOD}", "-d", str(folder))
    return archive


def unpack(archive: Path, into: Path, patched: bool) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    source = into / f"horovod-{HOROVOD}"
    if patched:
        horovod_fixes.apply(source)
    return source


@pytest.fixture(scope="module")
def cmake4() -> list[str]:
    """The command of a CMake 4 from PyPI's wheel, installed into the cache (not on PATH)."""
    target = CACHE / "tools" / f"cmake-{CMAKE4}"
    # The wheel's own binary, not its bin/cmake entry point: that script's shebang names the Python
    # that installed it, which may be a virtual environment long deleted (a cache outlives clones).
    binary = target / "cmake" / "data" / "bin" / "cmake"
    if not binary.exists():
        pip("install", "--quiet", "--upgrade", "--target", str(target), f"cmake=={CMAKE4}")
    return [str(binary)]


def configure(cmake: list[str], source: Path, build: Path) -> subprocess.CompletedProcess:
    """Horovod's CMake configure step with the arguments its setup.py passes."""
    build.mkdir()
    command = [
        *cmake,
        str(source),
        "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
        f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY_RELWITHDEBINFO={build / 'lib'}",
        f"-DPYTHON_EXECUTABLE:FILEPATH={framework_python('torch')}",
    ]
    return subprocess.run(command, cwd=build, capture_output=True, text=True, timeout=900, env=tool_env(**BUILD_ENV))


def test_the_fixes_apply_once_and_refuse_a_different_sdist(sdist, tmp_path):
    source = unpack(sdist, tmp_path, patched=True)
    before = {relative: (source / relative).read_text() for relative, _, _ in horovod_fixes.FIXES}
    horovod_fixes.apply(source)  # a second run changes nothing
    assert before == {relative: (source / relative).read_text() for relative in before}
    header = source / "horovod/common/group_table.h"
    header.write_text(header.read_text().replace("#include <mutex>\n#include <queue>\n", "#include <deque>\n"))
    with pytest.raises(SystemExit, match="expected exactly one '#include <mutex>"):
        horovod_fixes.apply(source)


def test_cmake_4_configures_the_patched_sdist(sdist, cmake4, tmp_path):
    version = subprocess.run([*cmake4, "--version"], capture_output=True, text=True).stdout
    assert f"cmake version {CMAKE4}" in version
    unpatched = configure(cmake4, unpack(sdist, tmp_path / "plain", patched=False), tmp_path / "plain-build")
    assert unpatched.returncode != 0
    assert "Compatibility with CMake < 3.5 has been removed" in unpatched.stdout + unpatched.stderr
    log = tmp_path / "plain.log"  # what build_horovod.sh shows of such a log: the error itself
    log.write_text(unpatched.stdout + unpatched.stderr + "Traceback (most recent call last):\n" * 80)
    shown = subprocess.run(
        [sys.executable, str(REPO / "tools/first_error.py"), str(log)], capture_output=True, text=True
    )
    assert shown.stdout.splitlines()[1].startswith("CMake Error at third_party/gloo/CMakeLists.txt:1")
    patched = configure(cmake4, unpack(sdist, tmp_path / "fixed", patched=True), tmp_path / "fixed-build")
    output = patched.stdout + patched.stderr
    assert patched.returncode == 0, output[-4000:]
    assert "CMake Error" not in output
    assert "Compatibility with CMake <" not in output  # nor the warning that announces the next removal
    assert (tmp_path / "fixed-build" / "Makefile").exists()
    # torch alone: the C++17 Gloo its extension links against (fix 6) is made, with torch's C++ ABI
    gloo = tmp_path / "fixed-build" / "third_party" / "compatible17_gloo"
    assert gloo.is_dir(), sorted(path.name for path in (tmp_path / "fixed-build" / "third_party").iterdir())
    flags = next(gloo.rglob("flags.make")).read_text()
    assert "-D_GLIBCXX_USE_CXX11_ABI=1" in flags


def strict_libcxx() -> list[str] | None:
    """A clang++ with libc++ whose headers can be made to include nothing transitively."""
    for name in ("clang++-19", "clang++-18", "clang++-17", "clang++-16", "clang++"):
        compiler = shutil.which(name)
        if compiler is None:
            continue
        probe = subprocess.run(
            [compiler, "-std=c++17", "-stdlib=libc++", "-fsyntax-only", "-x", "c++", "-"],
            input="#include <vector>\n",
            capture_output=True,
            text=True,
        )
        if probe.returncode == 0:
            return [compiler, "-std=c++17", "-stdlib=libc++", "-D_LIBCPP_REMOVE_TRANSITIVE_INCLUDES"]
    return None


def header_errors(compiler: list[str], source: Path, header: str) -> str:
    """The first error of compiling `header` on its own (an empty string when it compiles)."""
    third_party = source / "third_party"
    includes = [
        source,
        *(third_party / name for name in ("flatbuffers/include", "eigen", "gloo", "HTTPRequest/include")),
    ]
    includes += sorted(third_party.glob("boost/*/include"))
    result = subprocess.run(
        [*compiler, "-fsyntax-only", "-DHAVE_GLOO=1", *(f"-I{path}" for path in includes), "-x", "c++", "-"],
        input=f'#include "{header}"\n',
        capture_output=True,
        text=True,
        timeout=120,
    )
    return "" if result.returncode == 0 else next(line for line in result.stderr.splitlines() if "error" in line)


# The names the fixes are about, and the header that declares them: a header that uses one must
# include it itself, since no standard library promises to include it through another header.
DECLARED_IN = {
    r"\bstd::string\b": "<string>",
    r"\bstd::(logic_error|runtime_error|invalid_argument|out_of_range)\b": "<stdexcept>",
    r"(?<![\w:])u?int(8|16|32|64)_t\b": "<cstdint>",
}


def missing_includes(text: str) -> list[str]:
    code = re.sub(r"//[^\n]*", "", text)
    return [
        header
        for pattern, header in DECLARED_IN.items()
        if re.search(pattern, code) and f"#include {header}" not in text
    ]


def test_the_patched_headers_include_what_they_use(sdist, tmp_path):
    plain = unpack(sdist, tmp_path / "plain", patched=False)
    fixed = unpack(sdist, tmp_path / "fixed", patched=True)
    # GCC 13's errors: group_table.h (std::string), common.h (std::logic_error), and int64_t
    assert all(missing_includes((plain / header).read_text()) for header in horovod_fixes.PATCHED_HEADERS)
    assert {header: missing_includes((fixed / header).read_text()) for header in horovod_fixes.PATCHED_HEADERS} == {
        header: [] for header in horovod_fixes.PATCHED_HEADERS
    }


def test_horovods_headers_compile_alone_against_libcxx(sdist, tmp_path):
    compiler = strict_libcxx()
    if compiler is None:
        pytest.skip("no clang++ with libc++ here (Debian: apt-get install clang-19 libc++-19-dev)")
    plain = unpack(sdist, tmp_path / "plain", patched=False)
    fixed = unpack(sdist, tmp_path / "fixed", patched=True)
    # every header of the core and the Gloo controller that needs no MPI, CUDA, ROCm, oneCCL or DDL
    headers = sorted(
        str(path.relative_to(fixed))
        for folder in ("horovod/common", "horovod/common/gloo")
        for path in (fixed / folder).glob("*.h")
    )
    headers += ["horovod/common/ops/collective_operations.h", "horovod/common/ops/gloo_operations.h"]
    assert header_errors(compiler, plain, "horovod/common/nvtx_op_range.h")  # unknown type name 'int64_t'
    errors = {header: header_errors(compiler, fixed, header) for header in headers}
    assert {header: error for header, error in errors.items() if error} == {}
