#!/usr/bin/env bash
# Build Horovod from its PyPI sdist with Gloo, against one framework (torch or tensorflow) already
# installed in the Python given as $1 (that framework's environment: .venv/frameworks/<framework>),
# and install it there. Each framework's environment has its own Horovod, compiled with that
# framework's CUDA and NCCL where it has GPU operations.
#
#   tools/build_horovod.sh .venv/frameworks/torch/bin/python torch
#
# The wheel is cached outside the checkout, keyed by the framework, its version (with its CUDA
# build), the Horovod and Python versions and the GPU operations, so a fresh clone on the same
# machine installs it in seconds. Set HOROVOD_GPU_OPERATIONS=NCCL on a GPU cluster (with the CUDA
# toolkit of the framework's CUDA major version and NCCL available) to build the GPU path.
set -euo pipefail

usage="usage: build_horovod.sh PYTHON FRAMEWORK (torch or tensorflow)"
PY=${1:?$usage}
FRAMEWORK=${2:?$usage}
case $FRAMEWORK in
    torch | tensorflow) ;;
    *) echo "build_horovod: '$FRAMEWORK' is not a framework of scalebench: torch or tensorflow" >&2; exit 2 ;;
esac
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
HVD_VERSION=$("$PY" "$HERE/pins.py" "$ROOT/envs/$FRAMEWORK.yaml" --only horovod)
# the framework's version with its build (2.13.0+cu126): a Horovod built against one build of torch
# is not another's
versions=$("$PY" - "$FRAMEWORK" <<'PYEOF'
import sys, importlib.metadata as md
framework = sys.argv[1]
short = {"torch": "torch", "tensorflow": "tf"}[framework]
try:
    version = md.version(framework)
except md.PackageNotFoundError:
    sys.exit(f"build_horovod: {sys.executable} has no {framework}: Horovod is built against the framework of its environment")
print(f"{short}{version}-py{sys.version_info.major}{sys.version_info.minor}")
PYEOF
)
GPU_OPS=${HOROVOD_GPU_OPERATIONS:-none}
CACHE=${SCALEBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/scalebench}/wheels/horovod-$HVD_VERSION-$versions-gpu$GPU_OPS
mkdir -p "$CACHE"

wheel=$(ls "$CACHE"/horovod-*.whl 2>/dev/null | head -1 || true)
framework_cuda() {  # the CUDA version the framework was built with ("13.0"), or nothing for a CPU build
    case $FRAMEWORK in
        torch) "$PY" -c 'import torch; print(torch.version.cuda or "")' ;;
        tensorflow) TF_CPP_MIN_LOG_LEVEL=3 "$PY" -c 'import tensorflow as tf; b = tf.sysconfig.get_build_info(); print(b.get("cuda_version", "") if b.get("is_cuda_build") else "")' ;;
    esac
}

gpu_toolchain_problem() {  # why Horovod's NCCL operations cannot be built here, or nothing
    local cuda=${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}
    local built nvcc release
    built=$(framework_cuda 2>/dev/null) || built=""
    if [[ -z $built ]]; then
        case $FRAMEWORK in
            torch) echo "torch in $PY is the CPU build: install its CUDA build first (SCALEBENCH_TORCH_CUDA=cu126 or cu130 ./install.sh; PyPI's torch for Linux is CUDA 13.0)" ;;
            tensorflow) echo "TensorFlow in $PY is not a CUDA build: install its CUDA build first (SCALEBENCH_TF_CUDA=and-cuda ./install.sh)" ;;
        esac
        return
    fi
    nvcc=$(command -v nvcc || { [[ -x "$cuda/bin/nvcc" ]] && echo "$cuda/bin/nvcc"; } || true)
    [[ -n $nvcc ]] \
        || { echo "the CUDA toolkit (nvcc) is not on PATH nor in $cuda: 'module load cuda/${built%%.*}' (the CUDA $FRAMEWORK was built with: $built) or set CUDA_HOME"; return; }
    # the GPU operations run in the framework's process, beside its CUDA runtime: compiled with
    # another major version they load a second runtime (and torch's extension build refuses one)
    release=$("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -1)
    if [[ ${release%%.*} != "${built%%.*}" ]]; then
        local other="the $FRAMEWORK that matches it"
        case $FRAMEWORK:${release%%.*} in
            torch:12) other="torch's CUDA 12 build (SCALEBENCH_TORCH_CUDA=cu126 ./install.sh)" ;;
            torch:13) other="torch's CUDA 13 build (SCALEBENCH_TORCH_CUDA=cu130 ./install.sh)" ;;
        esac
        echo "$FRAMEWORK in $PY is a CUDA $built build and nvcc ($nvcc) is CUDA ${release:-of unknown version}:" \
             "Horovod's GPU operations must be compiled with the CUDA major version the framework was built with." \
             "Load a CUDA ${built%%.*} toolkit ('module load cuda/${built%%.*}', or set CUDA_HOME to one), or install $other"
        return
    fi
    local nccl=${HOROVOD_NCCL_HOME:-}
    for include in ${HOROVOD_NCCL_INCLUDE:-} ${nccl:+$nccl/include} /usr/include "$cuda/include"; do
        [[ -f "$include/nccl.h" ]] && return
    done
    echo "NCCL's headers (nccl.h) are not in HOROVOD_NCCL_INCLUDE, HOROVOD_NCCL_HOME/include, /usr/include or $cuda/include: 'module load nccl' and set HOROVOD_NCCL_HOME"
}

CXX_COMPILER=${CXX:-g++}
toolchain_problem() {  # why this CMake or compiler cannot build Horovod, and what to load, or nothing
    local version
    version=$(cmake --version 2>/dev/null | sed -n 's/^cmake version \([0-9][0-9.]*\).*/\1/p')
    if [[ -z "$version" ]] || ! printf '3.13\n%s\n' "$version" | sort -C -V; then
        echo "CMake ${version:-of unknown version} is older than Horovod's minimum 3.13: 'module load cmake'" \
             "(a 3.x or 4.x), or 'pip install cmake' into a folder on PATH, then run this again"
        return
    fi
    # torch's and TensorFlow's headers need C++17 (GCC 9 or newer, clang 10 or newer)
    if ! printf '#include <optional>\nint main() { if constexpr (true) { std::optional<int> x; return x.value_or(0); } }\n' \
        | $CXX_COMPILER -std=c++17 -x c++ -fsyntax-only - >/dev/null 2>&1; then
        echo "the C++ compiler '$CXX_COMPILER' ($($CXX_COMPILER --version 2>/dev/null | head -1)) cannot compile C++17:" \
             "'module load gcc' (GCC 9 or newer) or set CXX to one that can, then run this again"
    fi
}

cuda_toolkit_problem() {  # why the CUDA parts Horovod compiles for a CUDA build of torch cannot build here, or nothing
    # Horovod compiles them when torch is a CUDA build and torch finds a CUDA_HOME (FindPytorch.cmake),
    # then needs the toolkit's headers: PyPI's torch for Linux is the CUDA build, and a lone nvcc on
    # PATH (no toolkit around it) is enough for torch to find one
    local answer torch_cuda cuda_home nvcc root
    [[ $FRAMEWORK == torch ]] || return 0
    answer=$("$PY" -c 'import torch; from torch.utils.cpp_extension import CUDA_HOME; print(torch.version.cuda or "-", CUDA_HOME or "-")' 2>/dev/null) || return 0
    read -r torch_cuda cuda_home <<< "$answer"
    [[ $torch_cuda != - && $cuda_home != - ]] || return 0
    nvcc=$(command -v nvcc || true)
    for root in ${HOROVOD_CUDA_HOME:-} "$cuda_home" ${nvcc:+"$(dirname "$(dirname "$nvcc")")" "$(dirname "$(dirname "$(realpath "$nvcc")")")"}; do
        compgen -G "$root/include/cuda_runtime.h" > /dev/null && return
        compgen -G "$root/targets/*/include/cuda_runtime.h" > /dev/null && return
    done
    echo "torch in $PY is a CUDA build (CUDA $torch_cuda) and finds CUDA in $cuda_home, so Horovod compiles its CUDA" \
         "parts, but no cuda_runtime.h is there${nvcc:+ nor beside $nvcc} (not a whole CUDA toolkit): 'module load cuda'" \
         "and set CUDA_HOME and HOROVOD_CUDA_HOME to its folder, or install torch's CPU build first" \
         "($PY -m pip install torch==$("$PY" "$HERE/pins.py" "$ROOT/envs/torch.yaml" --only torch) --index-url https://download.pytorch.org/whl/cpu)"
}

if [[ -z "$wheel" ]]; then
    for tool in cmake "$CXX_COMPILER" make; do
        command -v "${tool%% *}" >/dev/null || { echo "build_horovod: '$tool' is missing (Debian: apt-get install cmake g++ make)" >&2; exit 1; }
    done
    problem=$(toolchain_problem)
    [[ -z "$problem" ]] || { echo "build_horovod: $problem" >&2; exit 1; }
    if [[ $GPU_OPS == NCCL ]]; then
        problem=$(gpu_toolchain_problem)
        [[ -z "$problem" ]] || { echo "build_horovod: HOROVOD_GPU_OPERATIONS=NCCL, but $problem" >&2; exit 1; }
    fi
    problem=$(cuda_toolkit_problem)
    [[ -z "$problem" ]] || { echo "build_horovod: $problem" >&2; exit 1; }
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    echo "build_horovod: building Horovod $HVD_VERSION for $FRAMEWORK ($versions, GPU ops: $GPU_OPS); some minutes on 2 cores"
    "$PY" -m pip download --quiet --no-deps --no-binary :all: "horovod==$HVD_VERSION" -d "$work"
    tar -xzf "$work"/horovod-"$HVD_VERSION".tar.gz -C "$work"
    "$PY" "$HERE/horovod_fixes.py" "$work/horovod-$HVD_VERSION"
    case $FRAMEWORK in
        torch) export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 ;;
        tensorflow) export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 ;;
    esac
    export HOROVOD_WITH_GLOO=1
    export HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_MPI=${HOROVOD_WITHOUT_MPI:-1}
    export HOROVOD_CPU_OPERATIONS=${HOROVOD_CPU_OPERATIONS:-gloo}
    export MAKEFLAGS=${MAKEFLAGS:--j$(nproc)}
    "$PY" -m pip wheel --no-build-isolation --no-deps -w "$work/dist" "$work/horovod-$HVD_VERSION" \
        > "$work/build.log" 2>&1 || {
        # the cause is the first error, far above the Python tracebacks that end the log
        cp "$work/build.log" "$CACHE/../horovod-build-failed.log"
        "$PY" "$HERE/first_error.py" "$work/build.log" >&2
        echo "build_horovod: build failed; above: its first error; the whole log: $(cd "$CACHE/.." && pwd)/horovod-build-failed.log" >&2
        exit 1
    }
    cp "$work"/dist/horovod-*.whl "$CACHE"/
    wheel=$(ls "$CACHE"/horovod-*.whl | head -1)
fi
"$PY" -m pip install --quiet --no-deps --force-reinstall "$wheel"
echo "build_horovod: installed $(basename "$wheel") from $CACHE"
