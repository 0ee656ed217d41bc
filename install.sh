#!/usr/bin/env bash
# One-command setup: the pipeline's environment in .venv (Snakemake, the launcher, the analysis and
# the test tools: envs/pipeline.yaml, envs/dev.yaml) and one training environment per framework in
# .venv/frameworks/<framework> (envs/torch.yaml, envs/tensorflow.yaml), each with a Horovod built
# against that framework alone (cached outside the checkout) and checked. The pipeline imports
# neither framework; each cell runs in its framework's environment. Idempotent: with everything in
# place a second run takes seconds.
#
#   ./install.sh                             # the pipeline, and the frameworks of the demo study
#   SCALEBENCH_FRAMEWORKS=torch ./install.sh # only these frameworks (torch, tensorflow; comma-separated)
#   VENV=/path ./install.sh                  # somewhere else
#   PYTHON=python3.12 ./install.sh           # with that Python (default: python3)
#   SCALEBENCH_HOROVOD=0 ./install.sh        # everything but Horovod: no compiler needed, no minutes of
#                                            # building; a study with backend horovod is then refused
#   SCALEBENCH_TORCH_CUDA=cu126 ./install.sh # torch's build from PyTorch's index (cu126: CUDA 12.6, with
#                                            # Volta kernels; cu130, cpu); default: PyPI's (CUDA 13.0
#                                            # on Linux: drivers 580 and newer)
#   SCALEBENCH_TORCH_INDEX=URL               # where that build is (default https://download.pytorch.org/whl/<build>)
#   SCALEBENCH_TF_CUDA=and-cuda ./install.sh # TensorFlow with NVIDIA's CUDA 12 libraries (tensorflow[and-cuda]);
#                                            # default: TensorFlow alone, loading the CUDA of the site's modules
#   HOROVOD_GPU_OPERATIONS=NCCL ./install.sh # Horovod's GPU operations, built with each framework's CUDA
#
# Which build fits which GPU and driver: docs/user-guide.md#on-a-gpu-cluster-gpu-install.
# The Python: CPython 3.11 to 3.13 (the `python` line of envs/*.yaml). A new environment is made
# with $PYTHON, else python3; an existing one keeps the Python that made it, and PYTHON naming
# another is refused (one environment holds one Python's packages). An environment whose Python
# no longer runs (a removed module or pyenv version) is made again. A framework's package that
# cannot be installed (a build the index does not have, an index that cannot be reached) stops the
# install and leaves that environment as it was. The single environment of an earlier scalebench
# (torch, TensorFlow and Horovod beside Snakemake) is set aside until the new layout is made.
set -euo pipefail
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | cut -c3-; }
case "${1:-}" in
    "") ;;
    -h | --help) usage && exit 0 ;;
    *) usage >&2 && echo "install.sh: '$1': it takes no arguments; the settings are the variables above" >&2 && exit 2 ;;
esac

ROOT=$(cd "$(dirname "$0")" && pwd)
RERUN=${VENV:+VENV=$VENV }./install.sh  # how this run is started again, for the messages
VENV=${VENV:-$ROOT/.venv}
PY=$VENV/bin/python
PIPELINE_ENVS=("$ROOT"/envs/pipeline.yaml "$ROOT"/envs/dev.yaml)
HOROVOD=${SCALEBENCH_HOROVOD:-1}
KNOWN_FRAMEWORKS=(torch tensorflow)
# the frameworks of the demo study (config/config.yaml's matrix.frameworks), unless named
DEMO_FRAMEWORKS=$(sed -n 's/^ *frameworks: *\[\(.*\)\].*$/\1/p' "$ROOT/config/config.yaml" | head -1 | tr -d ' ')
FRAMEWORKS=${SCALEBENCH_FRAMEWORKS-$DEMO_FRAMEWORKS}

refuse() {
    echo "install.sh: $*" >&2
    exit 1
}
[[ $HOROVOD == 0 || $HOROVOD == 1 ]] \
    || refuse "SCALEBENCH_HOROVOD is '$HOROVOD': 1 builds Horovod (the default), 0 installs everything else"
IFS=, read -r -a WANTED <<< "$FRAMEWORKS"
for framework in "${WANTED[@]}"; do
    [[ " ${KNOWN_FRAMEWORKS[*]} " == *" $framework "* ]] \
        || refuse "SCALEBENCH_FRAMEWORKS names '$framework': scalebench has torch and tensorflow (comma-separated, e.g. SCALEBENCH_FRAMEWORKS=torch)"
done
TORCH_CUDA=${SCALEBENCH_TORCH_CUDA:-}
[[ -z $TORCH_CUDA || $TORCH_CUDA =~ ^(cpu|cu[0-9]{3})$ ]] \
    || refuse "SCALEBENCH_TORCH_CUDA is '$TORCH_CUDA': a build of PyTorch's index (cpu, cu126, cu130, ...)"
TORCH_INDEX=${SCALEBENCH_TORCH_INDEX:-${TORCH_CUDA:+https://download.pytorch.org/whl/$TORCH_CUDA}}
[[ -z ${SCALEBENCH_TORCH_INDEX:-} || -n $TORCH_CUDA ]] \
    || refuse "SCALEBENCH_TORCH_INDEX names an index, but not the build to take from it: set SCALEBENCH_TORCH_CUDA too (cpu, cu126, ...)"
TF_CUDA=${SCALEBENCH_TF_CUDA:-}
[[ -z $TF_CUDA || $TF_CUDA == and-cuda ]] \
    || refuse "SCALEBENCH_TF_CUDA is '$TF_CUDA': and-cuda (NVIDIA's CUDA 12 libraries from PyPI), or unset (the site's CUDA modules)"

# The supported Pythons, from envs/pipeline.yaml's `python>=3.11,<3.14` (tools/pins.py checks that
# every file of envs/ says the same)
read -r lowest beyond < <(sed -n 's/^ *- python>=3\.\([0-9]*\),<3\.\([0-9]*\).*$/\1 \2/p' "$ROOT/envs/pipeline.yaml") \
    || refuse "envs/pipeline.yaml has no line '- python>=3.X,<3.Y' (the supported Pythons)"
SUPPORTED="CPython 3.$lowest to 3.$((beyond - 1))"
newest=3.$((beyond - 1))
GET_ONE="get one
  from your site's modules: module load python/$newest ('module avail python' lists them), then PYTHON=python$newest
  from conda: conda create -p ~/py$newest python=$newest, then PYTHON=~/py$newest/bin/python
  from uv: uv python install $newest, then PYTHON=\$(uv python find $newest)
and run PYTHON=/path/to/python $RERUN"

identify() {  # "CPython 3.12" for a Python command (any Python answers this), or why it does not run
    local answer
    command -v "$1" >/dev/null || { echo "not found"; return 1; }
    answer=$("$1" -c 'import platform, sys; print("%s %d.%d" % (platform.python_implementation(), sys.version_info[0], sys.version_info[1]))' 2>&1) \
        || { echo "${answer%%$'\n'*}"; return 1; }
    echo "$answer"
}
supported() {  # whether an identify answer is one of the supported Pythons
    [[ $1 =~ ^CPython\ 3\.([0-9]+)$ ]] && ((BASH_REMATCH[1] >= lowest && BASH_REMATCH[1] < beyond))
}

# The single environment of an earlier scalebench (the frameworks beside Snakemake): set aside while
# the new layout is made from the Python that made it, removed once that succeeded, and put back
# where this run fails, so that a failed run leaves the environment that worked.
SET_ASIDE=""
put_back() {
    local code=$?
    if [[ -n $SET_ASIDE && $code != 0 ]]; then
        rm -rf "$VENV"
        mv "$SET_ASIDE" "$VENV"
        echo "install.sh: the earlier environment is back in $VENV, as it was" >&2
    fi
}
trap put_back EXIT
if [[ -x $PY ]] && "$PY" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("torch") or u.find_spec("tensorflow")))' 2>/dev/null; then
    SET_ASIDE=$VENV.single-layout
    [[ ! -e $SET_ASIDE ]] || refuse "$VENV holds the single environment of an earlier scalebench, and $SET_ASIDE (where this run would set it aside) exists: remove one of them and run $RERUN again"
    PYTHON=${PYTHON:-$("$PY" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')}
    echo "install.sh: $VENV holds the single environment of an earlier scalebench (a framework beside Snakemake):" \
         "making the new layout (the pipeline in $VENV, each framework in $VENV/frameworks/) with its Python;" \
         "the earlier one waits in $SET_ASIDE until this run succeeds (finished studies are not retrained)"
    mv "$VENV" "$SET_ASIDE"
fi
if [[ -n ${PYTHON:-} ]]; then
    wanted=$(identify "$PYTHON") || refuse "PYTHON=$PYTHON does not run ($wanted); scalebench needs $SUPPORTED: $GET_ONE"
    supported "$wanted" || refuse "PYTHON=$PYTHON is $wanted; scalebench supports $SUPPORTED (its pinned packages have wheels for them): $GET_ONE"
fi
if [[ -f $VENV/pyvenv.cfg ]] && ! identify "$PY" >/dev/null; then
    echo "install.sh: the Python that made $VENV ($(sed -n 's/^home *= *//p' "$VENV/pyvenv.cfg")) no longer runs: making $VENV again"
    rm -rf "$VENV"
fi
if [[ -x $PY ]]; then
    found=$(identify "$PY") || refuse "$PY does not run ($found)"
    supported "$found" || refuse "$VENV was made with $found; scalebench supports $SUPPORTED: remove it (rm -rf $VENV) and run $RERUN with one of those"
    [[ -z ${PYTHON:-} || $wanted == "$found" ]] \
        || refuse "$VENV was made with $found, and PYTHON=$PYTHON is $wanted; one environment holds one Python's packages:" \
            "to make it again with $wanted: rm -rf $VENV && PYTHON=$PYTHON $RERUN; or make another with VENV=/another/path"
    echo "install.sh: $found in $VENV"
else
    python=${PYTHON:-python3}
    found=$(identify "$python") || refuse "$python does not run ($found); scalebench needs $SUPPORTED: $GET_ONE"
    supported "$found" || refuse "$python is $found; scalebench supports $SUPPORTED (its pinned packages have wheels for them): $GET_ONE"
    [[ -e $VENV ]] && made_here=0 || made_here=1
    echo "install.sh: creating $VENV with $found ($(command -v "$python"))"
    # an environment this run made and could not finish is removed: a rerun starts clean
    "$python" -m venv "$VENV" && "$PY" -m pip install --quiet --upgrade pip setuptools wheel \
        || { ((made_here)) && rm -rf "$VENV"; refuse "could not make $VENV (above: why)"; }
fi

# pins() FILE...: the pinned requirements of envs/ files for this Python (tools/pins.py), Horovod left
# out (it is built: tools/build_horovod.sh)
pins() { "$PY" "$ROOT/tools/pins.py" "$@" --exclude horovod; }

# install_pins PYTHON ENV_FOLDER REQUIREMENTS [FIRST...]: the pins into an environment, FIRST (a
# framework's own build, from its index) before the rest; stamped by what was asked, so a rerun with
# nothing changed installs nothing, and a run that stopped installs again. pip resolves and downloads
# before it changes anything, so a build it cannot find leaves the environment as it was.
install_pins() {
    local python=$1 folder=$2 requirements=$3
    shift 3
    local stamp
    stamp=$folder/.installed-$( (cat "$requirements"; echo "$*") | sha256sum | cut -c1-16)
    [[ -f $stamp ]] && return 0
    if (($#)); then
        "$python" -m pip install --quiet "$@" || return 1
    fi
    "$python" -m pip install --quiet -r "$requirements" || return 1
    "$python" -m pip check || return 1
    rm -f "$folder"/.installed-*
    touch "$stamp"
}

# --- the pipeline's environment: Snakemake, the launcher, the analysis, the tests' tools; no framework
requirements=$VENV/requirements.lock
pins "${PIPELINE_ENVS[@]}" > "$requirements.new"
echo "install.sh: the pipeline's packages for $found"
install_pins "$PY" "$VENV" "$requirements.new" || refuse "the pipeline's packages were not installed (above: why)"
mv "$requirements.new" "$requirements"

# --- one environment per framework, in $VENV/frameworks/<framework>
framework_env() {  # FRAMEWORK: make or update its environment; its Horovod is built below
    local framework=$1
    local folder=$VENV/frameworks/$framework
    local python=$folder/bin/python
    local requirements=$folder/requirements.lock
    local made_here=0 first=()
    if [[ -f $folder/pyvenv.cfg ]] && [[ $(identify "$python" 2>/dev/null) != "$found" ]]; then
        echo "install.sh: $folder is not $found's (or its Python no longer runs): making it again"
        rm -rf "$folder"
    fi
    if [[ ! -x $python ]]; then
        echo "install.sh: creating $folder ($framework's environment) with $found"
        mkdir -p "$VENV/frameworks"
        made_here=1
        "$PY" -m venv "$folder" && "$python" -m pip install --quiet --upgrade pip setuptools wheel \
            || { rm -rf "$folder"; refuse "could not make $folder (above: why)"; }
    fi
    local pin
    pin=$("$PY" "$ROOT/tools/pins.py" "$ROOT/envs/$framework.yaml" --only "$framework")
    case $framework in
        torch)
            if [[ -n $TORCH_CUDA ]]; then  # its build from its index, the rest from the usual one
                first=("torch==$pin+$TORCH_CUDA" --extra-index-url "$TORCH_INDEX")
            else  # PyPI's build (a local wheel of the pin where there is one: this project's CI has the CPU build)
                first=("torch==$pin")
            fi
            ;;
        tensorflow) first=("tensorflow${TF_CUDA:+[$TF_CUDA]}==$pin") ;;
    esac
    pins "$ROOT/envs/$framework.yaml" > "$requirements.new"
    local from=""
    [[ $framework == torch && -n $TORCH_INDEX ]] && from=" from $TORCH_INDEX"
    echo "install.sh: $framework's packages (${first[0]}$from)"
    if ! install_pins "$python" "$folder" "$requirements.new" "${first[@]}"; then
        rm -f "$requirements.new"
        if ((made_here)); then
            rm -rf "$folder"
            refuse "$framework's environment was not made (above: pip's reason, e.g. ${first[0]} is not on the index," \
                "or the index cannot be reached); nothing of it is left"
        fi
        refuse "$framework's packages were not installed (above: pip's reason, e.g. ${first[0]} is not on the index," \
            "or the index cannot be reached); $folder is as it was before this run"
    fi
    mv "$requirements.new" "$requirements"
}

# horovod_env FRAMEWORK: Horovod built against the framework alone in its environment, and checked
horovod_env() {
    local framework=$1
    local folder=$VENV/frameworks/$framework
    local python=$folder/bin/python check=$folder/horovod-check.txt
    local feature=${framework/torch/PyTorch}
    feature=${feature/tensorflow/TensorFlow}
    local hvd_dir
    hvd_dir=$("$python" -c 'import importlib.util as u; s = u.find_spec("horovod"); print(s.submodule_search_locations[0] if s else "")')
    build() {
        TF_USE_LEGACY_KERAS=1 "$ROOT/tools/build_horovod.sh" "$python" "$framework" \
            || refuse "Horovod was not built for $framework (above: why); everything else is installed. To go on without it:" \
                "SCALEBENCH_HOROVOD=0 $RERUN (a study with backend horovod is then refused before any job)"
        TF_USE_LEGACY_KERAS=1 "$folder/bin/horovodrun" --check-build > "$check" 2>&1 || true
    }
    # --check-build imports the framework: redo it only when Horovod changed since the last check
    if [[ -z "$hvd_dir" || ! -f "$check" || "$hvd_dir" -nt "$check" ]]; then
        if [[ -z "$hvd_dir" ]] || ! TF_USE_LEGACY_KERAS=1 "$folder/bin/horovodrun" --check-build > "$check" 2>&1; then
            build
        fi
    fi
    # --check-build prints "[X] NCCL" for each operation (and framework) it was built with
    local wanted_ops=none installed=none
    [[ ${HOROVOD_GPU_OPERATIONS:-} == NCCL ]] && wanted_ops=NCCL
    grep -q "\[X\] NCCL" "$check" && installed=NCCL
    if ! grep -q "\[X\] $feature" "$check"; then
        echo "install.sh: the Horovod in $framework's environment was built without $feature: replacing it"
        build
    elif [[ $installed != "$wanted_ops" ]]; then
        echo "install.sh: the Horovod in $framework's environment has GPU operations '$installed'," \
             "HOROVOD_GPU_OPERATIONS asks for '$wanted_ops': replacing it"
        build
    fi
    local needed
    for needed in "$feature" Gloo $([[ $wanted_ops == NCCL ]] && echo NCCL); do
        if ! grep -q "\[X\] $needed" "$check"; then
            cat "$check" >&2
            rm -f "$check"
            refuse "the Horovod in $framework's environment was built without $needed; remove the cached wheel" \
                "(\$HOME/.cache/scalebench/wheels) and run $RERUN again"
        fi
    done
    local operations
    operations=$(sed -n '/Available Tensor Operations/,$p' "$check" | grep -o '\[X\] [A-Za-z]*' | cut -c5- | paste -sd, -)
    SAID+=("$framework: $folder, Horovod with $operations")
}

SAID=()
for framework in "${WANTED[@]}"; do
    framework_env "$framework"
done
for framework in "${WANTED[@]}"; do
    if [[ $HOROVOD == 0 ]]; then
        SAID+=("$framework: $VENV/frameworks/$framework, without Horovod (SCALEBENCH_HOROVOD=0)")
    else
        horovod_env "$framework"
    fi
done
if [[ -n $SET_ASIDE ]]; then
    rm -rf "$SET_ASIDE"
    SET_ASIDE=""
    echo "install.sh: the earlier single environment is removed"
fi
ready="install.sh: ready (the pipeline: $VENV"
for line in "${SAID[@]}"; do ready+="; $line"; done
ready+=")"
if [[ $HOROVOD == 0 ]]; then
    ready+="; a study with backend horovod is refused until $RERUN builds it"
fi
echo "$ready"
