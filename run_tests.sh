#!/usr/bin/env bash
# The test suite in two tiers. Run ./install.sh first.
#   ./run_tests.sh                 # everything: lint and format checks, then pytest: unit and
#                                  # integration on parallel workers, then the real SLURM cluster tests
#   ./run_tests.sh --fast          # ruff and the unit tests (the import-layer check among them):
#                                  # no training, no workflow run, no cluster; about a minute
#   ./run_tests.sh -m "not cluster" tests/integration   # a subset: pytest's own arguments
# SCALEBENCH_TEST_WORKERS sets pytest-xdist's worker count (default 2; 0 runs in this process);
# SCALEBENCH_CLUSTER_WORKERS the cluster tests' (default 4: they wait for SLURM much of the time).
set -euo pipefail
cd "$(dirname "$0")"
BIN=.venv/bin
[[ -x $BIN/python ]] || { echo "run_tests.sh: no .venv; run ./install.sh first" >&2; exit 1; }
export PATH="$PWD/$BIN:$PATH"
WORKERS=${SCALEBENCH_TEST_WORKERS:-2}
PARALLEL=(-n "$WORKERS")

echo "== ruff"
ruff check .
ruff format --check .

if [[ ${1:-} == --fast ]]; then
    shift
    echo "== pytest: unit tier"
    exec python -m pytest -m unit tests/unit "${PARALLEL[@]}" "$@"
fi

echo "== snakefmt"
snakefmt --check .
echo "== snakemake --lint"
python tools/lint_workflow.py
echo "== pytest"
if [[ $# -gt 0 ]]; then
    exec python -m pytest "$@"
fi
# The slowest tests are listed at the end of each part, and the 25 that used the most CPU (their
# subprocesses' included: tests/cpu_time.py), so the suite's growth is visible in every CI log: on
# two busy cores a test's wall time depends on its neighbours, its CPU time does not. The SLURM cluster tests run after the others: one SLURM test cluster per run, each test on
# nodes of its own, several tests at once (tests/cluster/conftest.py); those marked alone compare
# nodes by speed, so they run first, one at a time, with the machine to themselves. One cluster per
# host at a time (the host's munge socket and /run/slurm): the host-wide lock waits for another's.
# worksteal: a worker that runs out of tests takes half of another's, so a long test late in one
# worker's share does not leave the other idle (xdist's load scheduling fixes each worker's first
# share of the collection at the start).
status=0
python -m pytest -m "not cluster" "${PARALLEL[@]}" --dist worksteal --durations=25 || status=$?
echo "== pytest: the SLURM cluster tests"
exec 9>/tmp/scalebench-slurm.lock
flock 9
python -m pytest tests/cluster -m "cluster and alone" --durations=25 || status=$?
# The shared part hands out its tests in order, longest first (tests/cluster/conftest.py): stealing
# would split the two tests of one study over two workers, one of them idle while the other makes it.
python -m pytest tests/cluster -m "cluster and not alone" -n "${SCALEBENCH_CLUSTER_WORKERS:-4}" --dist load \
    --durations=25 || status=$?
exit $status
