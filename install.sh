#!/usr/bin/env bash
# One-command setup: a virtual environment in .venv with the pinned versions
# from envs/*.yaml, Horovod built from source (cached outside the checkout),
# and a check that Horovod supports both frameworks. Idempotent: with
# everything in place a second run takes seconds.
#
#   ./install.sh            # pipeline, training and test tools
#   VENV=/path ./install.sh # somewhere else
set -euo pipefail

ROOT=$(cd "$(dirname "$0")" && pwd)
VENV=${VENV:-$ROOT/.venv}
PY=$VENV/bin/python
ENVS=("$ROOT"/envs/train.yaml "$ROOT"/envs/pipeline.yaml "$ROOT"/envs/dev.yaml)

python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
    || { echo "install.sh: needs Python 3.11 as python3 (found $(python3 --version))" >&2; exit 1; }

if [[ ! -x "$PY" ]]; then
    echo "install.sh: creating $VENV"
    python3 -m venv "$VENV"
    "$PY" -m pip install --quiet --upgrade pip setuptools wheel
fi

requirements=$VENV/requirements.lock
python3 "$ROOT/tools/pins.py" "${ENVS[@]}" --exclude horovod > "$requirements.new"
stamp=$VENV/.installed-$(sha256sum "$requirements.new" | cut -c1-16)
if [[ ! -f "$stamp" ]]; then
    echo "install.sh: installing pinned packages (torch first: its CPU wheel is local)"
    torch_pin=$(grep '^torch==' "$requirements.new")
    "$PY" -m pip install --quiet "$torch_pin"
    "$PY" -m pip install --quiet -r "$requirements.new"
    "$PY" -m pip check
    rm -f "$VENV"/.installed-*
    touch "$stamp"
fi
mv "$requirements.new" "$requirements"

check=$VENV/horovod-check.txt
hvd_dir=$("$PY" -c 'import importlib.util as u; s = u.find_spec("horovod"); print(s.submodule_search_locations[0] if s else "")')
build() {
    "$ROOT/tools/build_horovod.sh" "$PY"
    "$VENV/bin/horovodrun" --check-build > "$check" 2>&1 || true
}
# --check-build imports both frameworks (slow): redo it only when Horovod changed since the last check.
if [[ -z "$hvd_dir" || ! -f "$check" || "$hvd_dir" -nt "$check" ]]; then
    if [[ -z "$hvd_dir" ]] || ! "$VENV/bin/horovodrun" --check-build > "$check" 2>&1; then
        build
    fi
fi
# --check-build prints "[X] NCCL" for each operation (and framework) it was built with.
wanted=none
[[ ${HOROVOD_GPU_OPERATIONS:-} == NCCL ]] && wanted=NCCL
installed=none
grep -q "\[X\] NCCL" "$check" && installed=NCCL
if [[ $installed != "$wanted" ]]; then
    echo "install.sh: the installed Horovod has GPU operations '$installed', HOROVOD_GPU_OPERATIONS asks for '$wanted': replacing it"
    build
fi
for feature in TensorFlow PyTorch Gloo $([[ $wanted == NCCL ]] && echo NCCL); do
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
