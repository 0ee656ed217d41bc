#!/usr/bin/env bash
# The test suite in two tiers, one pytest session per environment. Run ./install.sh first.
#   ./run_tests.sh                 # everything: lint and format checks, then pytest: unit and
#                                  # integration on parallel workers, then the real SLURM cluster tests
#   ./run_tests.sh --fast          # ruff and the unit tests (the import-layer check among them):
#                                  # no training, no workflow run, no cluster; about a minute
#   ./run_tests.sh -m "not cluster" tests/integration   # a subset: pytest's own arguments
# Each test module runs in one environment (tests/conftest.py): the pipeline's (.venv: Snakemake,
# the analysis, no framework), or a framework's (.venv/frameworks/torch, .venv/frameworks/tensorflow)
# where it imports that framework; each environment's session collects its own modules, so the
# same arguments go to every session, and a module named alone runs in its own.
# SCALEBENCH_TEST_WORKERS sets pytest-xdist's worker count (default 2; 0 runs in this process);
# SCALEBENCH_CLUSTER_WORKERS the cluster tests' (default 4: they wait for SLURM much of the time).
set -euo pipefail
cd "$(dirname "$0")"
VENV=${VENV:-$PWD/.venv}
BIN=$VENV/bin
[[ -x $BIN/python ]] || { echo "run_tests.sh: no $VENV; run ./install.sh first" >&2; exit 1; }
export PATH="$BIN:$PATH"
WORKERS=${SCALEBENCH_TEST_WORKERS:-2}
PARALLEL=(-n "$WORKERS")
FRAMEWORKS=()
for framework in torch tensorflow; do
    if [[ -x $VENV/frameworks/$framework/bin/python ]]; then
        FRAMEWORKS+=("$framework")
    else
        echo "run_tests.sh: $framework's environment is not installed ($VENV/frameworks/$framework): its test modules" \
             "do not run (SCALEBENCH_FRAMEWORKS=torch,tensorflow ./install.sh installs it)" >&2
    fi
done
# the pipeline's site-packages, which a framework's session imports pytest and the rest from, after its own
LAYER=$("$BIN/python" -c 'import os, site; print(os.pathsep.join(site.getsitepackages()))')

# session ENVIRONMENT PYTEST_ARGS...: pytest in that environment; exit code 5 (nothing collected:
# every module named belongs to another environment) counts as a pass
session() {
    local environment=$1 code=0
    shift
    echo "== pytest in the $environment environment: $*"
    if [[ $environment == pipeline ]]; then
        SCALEBENCH_TEST_ENVIRONMENT=pipeline python -m pytest "$@" || code=$?
    else
        SCALEBENCH_TEST_ENVIRONMENT=$environment SCALEBENCH_TEST_LAYER=$LAYER \
            PYTHONPATH="$PWD/tests/layer${PYTHONPATH:+:$PYTHONPATH}" \
            "$VENV/frameworks/$environment/bin/python" -m pytest "$@" || code=$?
    fi
    ((code == 5)) && { COLLECTED_NOTHING=$((COLLECTED_NOTHING + 1)); code=0; }
    ((code == 0)) || status=$code
}
status=0
COLLECTED_NOTHING=0
every_session() {  # the same arguments in every environment's session
    local before=$COLLECTED_NOTHING
    for environment in pipeline "${FRAMEWORKS[@]}"; do
        session "$environment" "$@"
    done
    if ((COLLECTED_NOTHING - before == 1 + ${#FRAMEWORKS[@]})); then
        echo "run_tests.sh: no session collected a test for: $*" >&2
        status=5
    fi
}

echo "== ruff"
ruff check .
ruff format --check .

if [[ ${1:-} == --fast ]]; then
    shift
    every_session -m unit tests/unit "${PARALLEL[@]}" "$@"
    exit $status
fi

echo "== snakefmt"
snakefmt --check .
echo "== snakemake --lint"
python tools/lint_workflow.py
if [[ $# -gt 0 ]]; then
    every_session "$@"
    exit $status
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
every_session -m "not cluster" "${PARALLEL[@]}" --dist worksteal --durations=25
echo "== pytest: the SLURM cluster tests"
exec 9>/tmp/scalebench-slurm.lock
flock 9
session pipeline tests/cluster -m "cluster and alone" --durations=25
# The shared part hands out its tests in order, longest first (tests/cluster/conftest.py): stealing
# would split the two tests of one study over two workers, one of them idle while the other makes it.
session pipeline tests/cluster -m "cluster and not alone" -n "${SCALEBENCH_CLUSTER_WORKERS:-4}" --dist load \
    --durations=25
exit $status
