"""Fixtures for tests against a real SLURM cluster started on this machine.

One cluster per test run (`slurm`, tests/cluster/slurm_cluster.py), started by the first test that
needs it and stopped when the run ends; every test gets nodes of its own in a partition of its own
(`single_node`, `two_nodes`, or `nodes_for(request, count)`), so tests can run at once (pytest-xdist
workers) without one seeing another's jobs, and a test runs alone as it runs in the suite. Only one
cluster runs on a host at a time: they use the host's munge socket and /run/slurm/conf (run the
tier under `flock /tmp/scalebench-slurm.lock`). Where SLURM cannot be started the tests are skipped
with the reason, except under CI (CI=true), where they fail with it.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import (  # the suite's root conftest
    REPO,
    at_run_end,
    file_lock,
    made_once,
    run_folder,
    run_snakemake,
    snakemake_command,
    tiny_config,
    tool_env,
)
from scalebench import backends

from . import slurm_cluster
from .slurm_cluster import ClusterError, Partition, SlurmCluster

SLURM_PROFILE = REPO / "profiles" / "slurm"

CPUS_PER_NODE = 4  # the machine has 2 cores; slurmd is told 4 (config_overrides) so two 2-rank cells fit one node
# Room for the tests that run at once: four of two nodes (the cluster tier's four workers, run_tests.sh).
NODES = [f"sbnode{i}" for i in range(1, 9)]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The cluster tests that wait longest for SLURM (marked waits(seconds)) first, the longest first,
    the others after them in their order: the tier's workers (run_tests.sh: `--dist load`) take
    tests in this order, two at a time, so a long test does not start last while the others idle,
    and the two tests of one made_once study (same seconds) go to one worker, where the second
    reads what the first made instead of holding a worker of its own while it waits."""

    def longest_first(item: pytest.Item) -> float:
        marker = item.get_closest_marker("waits")
        return -marker.args[0] if marker else 0

    places = [i for i, item in enumerate(items) if item.get_closest_marker("cluster") is not None]
    for place, item in zip(places, sorted((items[i] for i in places), key=longest_first), strict=True):
        items[place] = item


def fail_or_skip(message: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def slurm(tmp_path_factory) -> SlurmCluster:
    """The run's SLURM test cluster: started once, by whichever test asks first, stopped when the run ends."""

    def start(folder: Path) -> None:
        stop = [sys.executable, slurm_cluster.__file__, "stop", str(folder)]
        cluster = SlurmCluster(folder, NODES, cpus=CPUS_PER_NODE, mem_mb=6000, default_partition_up=False)
        try:
            cluster.start()
        except (ClusterError, OSError, subprocess.SubprocessError):
            cluster.stop()
            raise
        at_run_end(tmp_path_factory, "slurm-cluster", stop)
        (folder / "leases.json").write_text(json.dumps({}))

    failed = run_folder(tmp_path_factory) / "slurm-failed.txt"
    if failed.exists():  # told once, not tried again by every test
        fail_or_skip(failed.read_text())
    try:
        folder = made_once(tmp_path_factory, "slurm", start)
    except (ClusterError, OSError, subprocess.SubprocessError) as error:
        failed.write_text(f"the SLURM test cluster did not start: {error}")
        fail_or_skip(failed.read_text())
    return SlurmCluster.load(folder)


_names = itertools.count(1)


@contextmanager
def partition(cluster: SlurmCluster, count: int, test: str, alone: bool = False) -> Iterator[Partition]:
    """`count` nodes of `cluster` that no other test uses meanwhile, in a partition of their own,
    given back when the test ends (its jobs cancelled, its nodes idle again). `alone`: no other
    test of the run trains at the same time either (for a test that compares the speed of nodes)."""
    with quiet(cluster.root, alone):
        nodes = lease_nodes(cluster.root, count, test)
        name = f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}_{next(_names)}"
        part = None
        try:
            part = cluster.partition_of(name, nodes)
            yield part
        finally:
            healthy = cluster.give_back(part) if part is not None else True
            release_nodes(cluster.root, nodes, healthy)


_held = []  # this process's hold on the room (a worker runs one test at a time)


@contextmanager
def quiet(root: Path, alone: bool) -> Iterator[None]:
    """Held by every test while it uses the cluster: shared, or alone (exclusive). The turnstile lets
    no new test in while one that must be alone waits for the others to finish. A test that holds it
    already (its nodes) goes on: asking again could wait for a test that waits for this one."""
    if _held:
        yield
        return
    with file_lock(root / "turnstile.lock"):
        if alone:
            with file_lock(root / "room.lock"), hold():
                yield
            return
    with file_lock(root / "room.lock", shared=True), hold():
        yield


@contextmanager
def hold() -> Iterator[None]:
    _held.append(True)
    try:
        yield
    finally:
        _held.pop()


def lease_nodes(root: Path, count: int, test: str, timeout_s: float = 3600) -> list[str]:
    """The first `count` consecutive nodes that no test holds, now held by `test` (waits for them)."""
    deadline = time.monotonic() + timeout_s
    while True:
        with file_lock(root / "leases.lock"):
            leases = json.loads((root / "leases.json").read_text())
            free = [node for node in NODES if node not in leases]
            for start in range(len(NODES) - count + 1):
                chosen = NODES[start : start + count]
                if all(node in free for node in chosen):
                    leases.update(dict.fromkeys(chosen, test))
                    (root / "leases.json").write_text(json.dumps(leases))
                    return chosen
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {count} free nodes in {timeout_s:.0f} s: held {leases}")
        time.sleep(0.5)


def release_nodes(root: Path, nodes: list[str], healthy: bool) -> None:
    """Give the nodes back; a node that did not come back idle stays held, so no later test gets it."""
    with file_lock(root / "leases.lock"):
        leases = json.loads((root / "leases.json").read_text())
        for node in nodes:
            if healthy:
                leases.pop(node, None)
            else:
                leases[node] = "not idle after its test"
        (root / "leases.json").write_text(json.dumps(leases))


def nodes_for(request: pytest.FixtureRequest, count: int) -> Iterator[Partition]:
    """A fixture's body: `count` nodes of the run's cluster for the requesting test; the machine to
    itself where the test is marked `alone` (run_tests.sh runs those first, one at a time)."""
    cluster = request.getfixturevalue("slurm")
    alone = request.node.get_closest_marker("alone") is not None
    with partition(cluster, count, request.node.nodeid, alone) as part:
        yield part


@pytest.fixture
def single_node(request) -> Iterator[Partition]:
    yield from nodes_for(request, 1)


@pytest.fixture
def two_nodes(request) -> Iterator[Partition]:
    yield from nodes_for(request, 2)


def hostlist(nodes: list[str]) -> str:
    """SLURM's compressed form of consecutive node names: sbnode3, sbnode4 -> sbnode[3-4]."""
    prefix = re.match(r"\D+", nodes[0]).group(0)
    numbers = [int(node[len(prefix) :]) for node in nodes]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), nodes
    return nodes[0] if len(nodes) == 1 else f"{prefix}[{numbers[0]}-{numbers[-1]}]"


def implemented_backends(names: tuple[str, ...] = backends.BACKENDS) -> list[tuple[str, str]]:
    """The registered (framework, backend) pairs of the backends `names`; SCALEBENCH_CLUSTER_BACKENDS=
    torch_native,... narrows them for quick runs."""
    chosen = os.environ.get("SCALEBENCH_CLUSTER_BACKENDS")
    pairs = [(f, b) for f, registered in backends.REGISTRY.items() for b in registered if b in names]
    return [p for p in pairs if not chosen or "_".join(p) in chosen.split(",")]


def cluster_config(frameworks=("torch",), backends=("native",), gpus=(1, 2), seeds=(1,), **cluster) -> dict:
    """The tiny study, sized for the test cluster: CPU ranks, one CPU and 1 GB each."""
    config = tiny_config(
        matrix={"frameworks": list(frameworks), "backends": list(backends), "gpus": list(gpus), "seeds": list(seeds)}
    )
    config["cluster"] = {
        "gpus_per_node": 0,
        "ranks_per_node": 2,
        "cpus_per_rank": 1,
        "mem_mb_per_rank": 1000,
        "time": {"base_min": 5, "per_epoch_min": 0, "floor_min": 5},
        **cluster,
    }
    return config


def run_slurm_snakemake(
    cluster: Partition, workdir: Path, config: dict, *args: str, timeout: float = 400, env: dict | None = None
) -> subprocess.CompletedProcess:
    """`snakemake --profile profiles/slurm` against the test cluster (no accounting: squeue for status)."""
    command, full_env = slurm_snakemake(cluster, workdir, config, *args, env=env)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=workdir)


def start_slurm_snakemake(
    cluster: Partition, workdir: Path, config: dict, *args: str, env: dict | None = None, profile: Path | None = None
) -> subprocess.Popen:
    """run_slurm_snakemake without waiting: its output in one pipe (communicate() returns it)."""
    command, full_env = slurm_snakemake(cluster, workdir, config, *args, env=env, profile=profile)
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env, cwd=workdir
    )


def slurm_snakemake(
    cluster: Partition, workdir: Path, config: dict, *args: str, env: dict | None = None, profile: Path | None = None
) -> tuple[list[str], dict]:
    """The command and environment of `snakemake --profile profiles/slurm` (or `profile`, a changed
    copy: profile_with) in the test's partition."""
    command = snakemake_command(
        workdir,
        config,
        "--profile",
        str(profile or SLURM_PROFILE),
        "--slurm-status-command",
        "squeue",
        "--slurm-init-seconds-before-status-checks",
        "2",
        "--slurm-no-account",
        "--slurm-keep-successful-logs",  # the tests read which job ran which cell
        "--latency-wait",
        "5",
        *args,
    )
    # the plugin's status checks at a steady 2 s, not 10 s longer after each (snakemake_steady_checks.py)
    command[:1] = [sys.executable, str(Path(__file__).with_name("snakemake_steady_checks.py"))]
    # sbatch exports this environment to the jobs, and srun to the ranks
    full_env = {**tool_env(), **partition_variables(cluster), "SLURM_CONF": str(cluster.conf), **(env or {})}
    full_env.pop("SCALEBENCH_EXECUTOR", None)
    return command, full_env


def profile_with(folder: Path, replaced: dict[str, str]) -> Path:
    """A copy of profiles/slurm in `folder` whose lines `key: value` for each key of `replaced` are the
    replacement's line instead (a key that is not there fails the test: the profile changed)."""
    lines = (SLURM_PROFILE / "config.yaml").read_text().splitlines()
    for key, line in replaced.items():
        found = [i for i, text in enumerate(lines) if text.startswith(f"{key}:")]
        assert found, f"profiles/slurm sets no {key}"
        lines[found[0]] = line
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text("\n".join(lines) + "\n")
    return folder


def partition_variables(cluster: Partition) -> dict[str, str]:
    """The variables that name the test's partition to SLURM's clients (Partition.env)."""
    return {key: value for key, value in cluster.env().items() if key.endswith("_PARTITION")}


def read_run(workdir: Path, cell: str) -> dict:
    return json.loads((workdir / "results" / "runs" / cell / "run.json").read_text())


def describe(result: subprocess.CompletedProcess, workdir: Path) -> str:
    """Snakemake's output and every SLURM and train log of the run, for assertion messages."""
    parts = [result.stdout[-4000:], result.stderr[-8000:]]
    for pattern in (".snakemake/slurm_logs/**/*.log", "results/runs/**/train.log"):
        for path in sorted(workdir.glob(pattern)):
            parts.append(f"--- {path.relative_to(workdir)}\n{path.read_text()[-3000:]}")
    return "\n".join(parts)


def slurm_jobs(workdir: Path) -> dict[str, list[str]]:
    """{wildcards folder of the train rule: [SLURM job ids]} from the plugin's log folders."""
    jobs: dict[str, list[str]] = {}
    for log in (workdir / ".snakemake" / "slurm_logs").glob("rule_train/*/*.log"):
        jobs.setdefault(log.parent.name, []).append(log.stem)
    return {key: sorted(ids, key=int) for key, ids in jobs.items()}


def slurm_rules(workdir: Path) -> list[str]:
    """The rules that ran as SLURM jobs (the plugin's log folders)."""
    return sorted(path.name.removeprefix("rule_") for path in (workdir / ".snakemake" / "slurm_logs").glob("rule_*"))


def cluster_data(
    slurm: SlurmCluster, tmp_path_factory, count: int = 40, image_size: tuple[int, int] | None = None
) -> Path:
    """cluster_config()'s prepared dataset (of `count` synthetic pairs, at `image_size` where given),
    made once per test run by the local executor: for tests about the train jobs, which copy it into
    their study (with_data) instead of running the data jobs on SLURM (two jobs, each two Snakemake
    starts; test_slurm_single_node.py's partition test runs them on SLURM)."""

    def make(folder: Path) -> None:
        config = cluster_config()
        config["dataset"]["synthetic"]["count"] = count
        if image_size:
            config["dataset"]["image_size"] = list(image_size)
        result = run_snakemake(folder, config, "--cores", "2", "prepared_data", timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]

    name = f"prepared-{count}" + (f"-{image_size[0]}x{image_size[1]}" if image_size else "")
    with quiet(slurm.root, alone=False):  # it computes: not while a test that must be alone runs
        return made_once(tmp_path_factory, name, make) / "results" / "data"


def with_data(workdir: Path, data: Path) -> Path:
    """`workdir` holding the prepared dataset `data` (dates kept: Snakemake finds it up to date)."""
    shutil.copytree(data, workdir / "results" / "data", copy_function=shutil.copy2)
    return workdir
