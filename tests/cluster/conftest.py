"""Fixtures for tests against a real SLURM cluster started on this machine.

`single_node` and `two_nodes` each start a cluster (tests/cluster/slurm_cluster.py)
for one test module and stop it afterwards; only one runs at a time, because
both use the host's munge socket and /run/slurm/conf. Where SLURM cannot be
started the tests are skipped with the reason, except under CI (CI=true),
where they fail with it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, run_snakemake, snakemake_command, tiny_config, tool_env  # the suite's root conftest
from scalebench import backends

from .slurm_cluster import ClusterError, SlurmCluster

CPUS_PER_NODE = 4  # the machine has 2 cores; slurmd is told 4 (config_overrides) so two 2-rank cells fit one node


def _start(tmp_path_factory, nodes: list[str]) -> SlurmCluster:
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes, cpus=CPUS_PER_NODE, mem_mb=6000)
    try:
        cluster.start()
    except (ClusterError, OSError, subprocess.SubprocessError) as error:
        cluster.stop()
        message = f"the SLURM test cluster did not start: {error}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return cluster


@pytest.fixture(scope="module")
def single_node(tmp_path_factory):
    cluster = _start(tmp_path_factory, ["sbnode1"])
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    cluster = _start(tmp_path_factory, ["sbnode1", "sbnode2"])
    yield cluster
    cluster.stop()


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
    cluster: SlurmCluster, workdir: Path, config: dict, *args: str, timeout: float = 400, env: dict | None = None
) -> subprocess.CompletedProcess:
    """`snakemake --profile profiles/slurm` against the test cluster (no accounting: squeue for status)."""
    command, full_env = slurm_snakemake(cluster, workdir, config, *args, env=env)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=workdir)


def start_slurm_snakemake(
    cluster: SlurmCluster, workdir: Path, config: dict, *args: str, env: dict | None = None
) -> subprocess.Popen:
    """run_slurm_snakemake without waiting: its output in one pipe (communicate() returns it)."""
    command, full_env = slurm_snakemake(cluster, workdir, config, *args, env=env)
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env, cwd=workdir
    )


def slurm_snakemake(
    cluster: SlurmCluster, workdir: Path, config: dict, *args: str, env: dict | None = None
) -> tuple[list[str], dict]:
    """The command and environment of `snakemake --profile profiles/slurm` against the test cluster."""
    command = snakemake_command(
        workdir,
        config,
        "--profile",
        str(REPO / "profiles" / "slurm"),
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
    # sbatch exports this environment to the jobs, and srun to the ranks
    full_env = {**tool_env(), "SLURM_CONF": str(cluster.conf), **(env or {})}
    full_env.pop("SCALEBENCH_EXECUTOR", None)
    return command, full_env


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


def prepare_data_locally(tmp_path_factory) -> Path:
    """cluster_config()'s prepared dataset, made once by the local executor: for tests about the train
    jobs, which copy it into their study (with_data) instead of running the data jobs on SLURM."""
    folder = tmp_path_factory.mktemp("prepared")
    result = run_snakemake(folder, cluster_config(), "--cores", "2", "prepared_data", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return folder / "results" / "data"


def with_data(workdir: Path, data: Path) -> Path:
    """`workdir` holding the prepared dataset `data` (dates kept: Snakemake finds it up to date)."""
    shutil.copytree(data, workdir / "results" / "data", copy_function=shutil.copy2)
    return workdir
