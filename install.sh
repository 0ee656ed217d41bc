#!/usr/bin/env bash
# One-command setup: a virtual environment in .venv with the pinned versions
# from envs/*.yaml, Horovod built from source (cached outside the checkout),
# and a check that Horovod supports both frameworks. Idempotent: with
# everything in place a second run takes seconds.
#
#   ./install.sh                        # pipeline, training and test tools
#   VENV=/path ./install.sh             # somewhere else
#   PYTHON=python3.12 ./install.sh      # with that Python (default: python3)
#   SCALEBENCH_HOROVOD=0 ./install.sh   # everything but Horovod: no compiler needed, no 8-minute
#                                       # build; a study with backend horovod is then refused
#
# The Python: CPython 3.11 to 3.13 (the `python` line of envs/*.yaml). A new environment is made
# with $PYTHON, else python3; an existing one keeps the Python that made it, and PYTHON naming
# another is refused (one environment holds one Python's packages). An environment whose Python
# no longer runs (a removed module or pyenv version) is made again.
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
ENVS=("$ROOT"/envs/train.yaml "$ROOT"/envs/pipeline.yaml "$ROOT"/envs/dev.yaml)
HOROVOD=${SCALEBENCH_HOROVOD:-1}

refuse() {
    echo "install.sh: $*" >&2
    exit 1
}
[[ $HOROVOD == 0 || $HOROVOD == 1 ]] \
    || refuse "SCALEBENCH_HOROVOD is '$HOROVOD': 1 builds Horovod (the default), 0 installs everything else"

# The supported Pythons, from envs/train.yaml's `python>=3.11,<3.14` (tools/pins.py checks that
# every file of envs/ says the same)
read -r lowest beyond < <(sed -n 's/^ *- python>=3\.\([0-9]*\),<3\.\([0-9]*\).*$/\1 \2/p' "$ROOT/envs/train.yaml") \
    || refuse "envs/train.yaml has no line '- python>=3.X,<3.Y' (the supported Pythons)"
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

requirements=$VENV/requirements.lock
"$PY" "$ROOT/tools/pins.py" "${ENVS[@]}" --exclude horovod > "$requirements.new"
stamp=$VENV/.installed-$(sha256sum "$requirements.new" | cut -c1-16)
if [[ ! -f "$stamp" ]]; then
    # torch alone first: pip takes a local wheel of the pinned version where there is one (this
    # project's CI machine has its CPU build), instead of the CUDA build another package would pull
    echo "install.sh: installing pinned packages for $found (torch first)"
    torch_pin=$(grep '^torch==' "$requirements.new")
    "$PY" -m pip install --quiet "$torch_pin"
    "$PY" -m pip install --quiet -r "$requirements.new"
    "$PY" -m pip check
    rm -f "$VENV"/.installed-*
    touch "$stamp"  # only now: a run that stopped above installs again
fi
mv "$requirements.new" "$requirements"

hvd_dir=$("$PY" -c 'import importlib.util as u; s = u.find_spec("horovod"); print(s.submodule_search_locations[0] if s else "")')
if [[ $HOROVOD == 0 ]]; then
    if [[ -n $hvd_dir ]]; then
        echo "install.sh: ready ($VENV; SCALEBENCH_HOROVOD=0: the Horovod installed before is left as it is, unchecked)"
    else
        echo "install.sh: ready ($VENV; without Horovod (SCALEBENCH_HOROVOD=0): a study with backend horovod is" \
             "refused until $RERUN builds it)"
    fi
    exit 0
fi

check=$VENV/horovod-check.txt
build() {
    "$ROOT/tools/build_horovod.sh" "$PY" \
        || refuse "Horovod was not built (above: why); everything else is installed. To go on without it:" \
            "SCALEBENCH_HOROVOD=0 $RERUN (a study with backend horovod is then refused before any job)"
    "$VENV/bin/horovodrun" --check-build > "$check" 2>&1 || true
}
# --check-build imports both frameworks (slow): redo it only when Horovod changed since the last check.
if [[ -z "$hvd_dir" || ! -f "$check" || "$hvd_dir" -nt "$check" ]]; then
    if [[ -z "$hvd_dir" ]] || ! "$VENV/bin/horovodrun" --check-build > "$check" 2>&1; then
        build
    fi
fi
# --check-build prints "[X] NCCL" for each operation (and framework) it was built with.
wanted_ops=none
[[ ${HOROVOD_GPU_OPERATIONS:-} == NCCL ]] && wanted_ops=NCCL
installed=none
grep -q "\[X\] NCCL" "$check" && installed=NCCL
if [[ $installed != "$wanted_ops" ]]; then
    echo "install.sh: the installed Horovod has GPU operations '$installed', HOROVOD_GPU_OPERATIONS asks for '$wanted_ops': replacing it"
    build
fi
for feature in TensorFlow PyTorch Gloo $([[ $wanted_ops == NCCL ]] && echo NCCL); do
    if ! grep -q "\[X\] $feature" "$check"; then
        cat "$check" >&2
        rm -f "$check"
        echo "install.sh: Horovod was built without $feature; remove the cached wheel" \
             "(\$HOME/.cache/scalebench/wheels) and run ./install.sh again" >&2
        exit 1
    fi
done
operations=$(sed -n '/Available Tensor Operations/,$p' "$check" | grep -o '\[X\] [A-Za-z]*' | cut -c5- | paste -sd, -)
echo "install.sh: ready ($VENV; Horovod supports TensorFlow and PyTorch; tensor operations: $operations)"
