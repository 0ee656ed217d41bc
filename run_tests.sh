#!/usr/bin/env bash
# The whole test suite: lint and format checks, then pytest (unit, integration
# and the real SLURM cluster tests). Run ./install.sh first.
#   ./run_tests.sh                 # everything
#   ./run_tests.sh -m "not cluster" tests/unit   # a subset (pytest arguments)
set -euo pipefail
cd "$(dirname "$0")"
BIN=.venv/bin
[[ -x $BIN/python ]] || { echo "run_tests.sh: no .venv; run ./install.sh first" >&2; exit 1; }
export PATH="$PWD/$BIN:$PATH"

echo "== ruff"
ruff check .
ruff format --check .
echo "== snakefmt"
snakefmt --check .
echo "== snakemake --lint"
python tools/lint_workflow.py
echo "== pytest"
python -m pytest "$@"
