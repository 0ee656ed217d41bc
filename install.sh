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

if ! "$VENV/bin/horovodrun" --check-build > "$VENV/horovod-check.txt" 2>&1; then
    "$ROOT/tools/build_horovod.sh" "$PY"
    "$VENV/bin/horovodrun" --check-build > "$VENV/horovod-check.txt" 2>&1 || true
fi
# --check-build prints "[X] PyTorch" for each framework it was built with.
for framework in TensorFlow PyTorch Gloo; do
    if ! grep -q "\[X\] $framework" "$VENV/horovod-check.txt"; then
        cat "$VENV/horovod-check.txt" >&2
        echo "install.sh: Horovod was built without $framework; remove the cached wheel" \
             "(\$HOME/.cache/scalebench/wheels) and run ./install.sh again" >&2
        exit 1
    fi
done
echo "install.sh: ready ($VENV; Horovod supports TensorFlow, PyTorch and Gloo)"
