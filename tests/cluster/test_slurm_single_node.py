"""The workflow on one node of a real SLURM cluster: every cell a SLURM job. Where a test is about
the train jobs, its study starts from the run's prepared dataset (with_data) and builds only what
it reads (the cells, or the table of left-out cells): the figures and the report are
test_slurm_every_backend.py's; the data jobs as SLURM jobs are the partition test's here."""

from __future__ import annotations

import csv
import os
import re
import shutil

import pytest
from conftest import REPO
from scalebench import config as sb_config
from scalebench.config import run_order

from .conftest import (
    cluster_config,
    cluster_data,
    describe,
    implemented_backends,
    read_run,
    run_slurm_snakemake,
    slurm_jobs,
    slurm_rules,
    with_data,
)

pytestmark = pytest.mark.cluster

INCOMPLETE = "results/summary/incomplete.csv"  # collect_runs: every cell that runs, and the left-out ones


@pytest.fixture
def data(slurm, tmp_path_factory):
    return cluster_data(slurm, tmp_path_factory)


@pytest.mark.waits(70)
def test_sharded_and_one_process_backends_run_as_slurm_jobs(single_node, tmp_path, data):
    """fsdp, dp and mirrored on the CPU cluster (gpus_per_node 0, 2 ranks per node): the cells each can
    run there (fsdp from 2 ranks, dp on 1 device, mirrored on a node's 2 ranks as logical CPU devices)
    are SLURM jobs; the rest of the matrix is left out, and the report says which and why."""
    pairs = implemented_backends(("fsdp", "dp", "mirrored"))
    config = cluster_config(frameworks=sorted({f for f, _ in pairs}), backends=sorted({b for _, b in pairs}))
    config["training"]["epochs"] = 2  # nothing here counts epochs: a first and a steady one
    cells = sb_config.cells(sb_config.validate(config, single_node_schema()))
    result = run_slurm_snakemake(single_node, with_data(tmp_path, data), config, INCOMPLETE, timeout=1200)
    assert result.returncode == 0, describe(result, tmp_path)
    jobs = slurm_jobs(tmp_path)
    for cell in cells:
        run = read_run(tmp_path, cell.path)
        assert run["status"] == "ok" and run["replicas"] == cell.gpus, run
        assert run["slurm"]["job_id"] in jobs[f"{cell.framework}_{cell.backend}_{cell.gpus}_1"], (run["slurm"], jobs)
        log = (tmp_path / cell.folder / "train.log").read_text()
        if cell.backend in ("dp", "mirrored"):
            # one task with the CPUs of all its devices (cpus_per_rank 1 each), one process
            assert f"--nodes=1 --ntasks=1 --ntasks-per-node=1 --cpus-per-task={cell.gpus} " in log, log[:500]
            assert run["processes"] == 1 and run["slurm"]["step_tasks_per_node"] == "1", run
        else:
            assert run["processes"] == cell.gpus, run
    if ("tensorflow", "mirrored") in pairs:
        run = read_run(tmp_path, "tensorflow/mirrored/g2/s1")
        assert run["training"]["tf_replica_devices"] == "logical CPU", run["training"]
    with open(tmp_path / "results" / "summary" / "incomplete.csv") as handle:
        left_out = {row["item"]: row["reason"] for row in csv.DictReader(handle) if row["status"] == "left out"}
    expected = {entry.item for entry in sb_config.left_out(sb_config.validate(config, single_node_schema()))}
    assert set(left_out) == expected, left_out
    if ("torch", "dp") in pairs:
        assert "(cluster.gpus_per_node: 0, a CPU-only cluster)" in left_out["torch/dp g2"]
    assert all(f"left out: {item}: " in result.stderr for item in expected), result.stderr[-3000:]


def single_node_schema() -> dict:
    return sb_config.load_schema(REPO / "config" / "schema.yaml")


def test_two_cells_on_one_node_at_once_use_different_ports_and_cores(single_node, tmp_path, data):
    config = cluster_config(gpus=(2,), seeds=(1, 2), **{"time": {"base_min": 5, "per_epoch_min": 0, "floor_min": 5}})
    # Each cell's rank 0 waits before its first epoch until both cells are running (a test hook),
    # so they overlap however fast training is.
    cells = [f"results/runs/torch/native/g2/s{seed}/run.json" for seed in (1, 2)]
    env = {"SCALEBENCH_FAULT": f"meet:{tmp_path / 'met'}:2"}
    result = run_slurm_snakemake(single_node, with_data(tmp_path, data), config, *cells, env=env)
    assert result.returncode == 0, describe(result, tmp_path)
    runs = [read_run(tmp_path, f"torch/native/g2/s{seed}") for seed in (1, 2)]
    assert {run["slurm"]["node"] for run in runs} == set(single_node.nodes)
    # each of a cell's two ranks on its own cluster.cpus_per_rank (1) core, read back from the OS: this
    # cluster's srun binds nothing (TaskPlugin=task/none), so each rank took its local rank's share itself
    for run in runs:
        assert run["cpu_binding"] == "cores" and run["cpu_bound_by"] == "rank", run
        assert len(run["rank_cpus"]) == 2 and len(set(run["rank_cpus"])) == 2, run["rank_cpus"]
        assert all(cpus.isdigit() for cpus in run["rank_cpus"]), run["rank_cpus"]
    # both ran at the same time on the node: each cell's rank 0 left its mark in the meeting
    # folder and went on only once the other's was there (run.json's times have whole seconds,
    # too coarse to show an overlap of fast cells) ...
    assert len(list((tmp_path / "met").iterdir())) == 2
    first, second = sorted(runs, key=lambda run: run["start"])
    assert second["start"] <= first["end"], (first["start"], first["end"], second["start"])
    # ... each with its own rendezvous port
    ports = set()
    for seed in (1, 2):
        log = (tmp_path / "results" / "runs" / "torch" / "native" / "g2" / f"s{seed}" / "train.log").read_text()
        ports |= set(re.findall(r"process group \w+ via srun at [\d.]+:(\d+)", log))
    assert len(ports) == 2, ports


# Alone: its verdicts read the cells' scatter, and on the shared tier's four workers over two cores a
# cell's compute (0.35 s of its 2.4 s epochs here) grew enough (CI-like clean-clone check, 626e18d)
# that the rounds' stop rule rightly found a third seed could not decide the pair, and added none.
@pytest.mark.alone
@pytest.mark.waits(140)
def test_the_rounds_of_seeds_run_their_cells_as_slurm_jobs_in_the_drawn_order(
    slurm, single_node, tmp_path, tmp_path_factory
):
    """matrix.seeds {initial: 2, max: 3}: two backends of the same speed whose odd seeds are slower (the
    fault hooks' sleeps: tests/integration/test_seed_rounds.py) leave their comparison open after the
    first seeds, in a band of equivalence (50%) that a third seed a side can decide; the round adds
    seed 3 of both, each a SLURM job with the priority of the order order.seed draws, and the next
    round finds them equivalent."""
    config = cluster_config(backends=("native", "dp"), gpus=(1,))
    config["matrix"]["seeds"] = {"initial": 2, "max": 3}
    config["verdicts"] = {"equivalence": 0.5}
    config["dataset"]["image_size"] = [16, 16]
    # no checkpoint or prediction images, which no round reads (tests/integration/test_seed_rounds.py's cells)
    config["training"].update(epochs=4, steps_per_epoch=2, checkpoint_every=0, predictions=0)
    with_data(tmp_path, cluster_data(slurm, tmp_path_factory, image_size=(16, 16)))
    faults = ("slow_cell:*/g1/*:1.0", "slow_cell:*/s1:0.2", "slow_cell:*/s3:0.2")
    answer = ("results/summary/answer.json", "results/report/landing.rst")
    result = run_slurm_snakemake(single_node, tmp_path, config, *answer, env={"SCALEBENCH_FAULT": ",".join(faults)})
    assert result.returncode == 0, describe(result, tmp_path)
    with open(tmp_path / "results" / "summary" / "rounds.csv") as handle:
        rounds = list(csv.DictReader(handle))
    assert [(row["added"], row["added_cells"]) for row in rounds] == [
        ("2", "torch/dp/g1/s3 torch/native/g1/s3"),
        ("0", ""),
    ]
    jobs = slurm_jobs(tmp_path)
    for backend in ("native", "dp"):
        for seed in (1, 2, 3):
            run = read_run(tmp_path, f"torch/{backend}/g1/s{seed}")
            assert run["status"] == "ok" and run["slurm"]["job_id"] in jobs[f"torch_{backend}_1_{seed}"], run
    # the round's jobs carry the priorities of the drawn order, as the first seeds' do (the plugin's patch
    # submits each batch of ready jobs by them, neighbours from two threads: config/slurm_plugin.py)
    drawn = run_order.run_order(
        [sb_config.Cell("torch", backend, 1, 3) for backend in ("native", "dp")],
        {"seed": 1, "blocks": False},
        [1, 2, 3],
    )
    pattern = r"wildcards: framework=torch, backend=(\w+), gpus=1, seed=3\n\s+priority: (\d+)"
    priorities = {backend: int(value) for backend, value in re.findall(pattern, result.stdout + result.stderr)}
    assert sorted(priorities, key=priorities.get, reverse=True) == [cell.backend for cell in drawn], priorities


def left_out_rows(workdir) -> dict[str, dict]:
    with open(workdir / "results" / "summary" / "incomplete.csv") as handle:
        return {row["item"]: row for row in csv.DictReader(handle) if row["status"] == "left out"}


def test_a_cell_slurm_would_refuse_is_left_out_before_submission_and_the_others_run(
    slurm, single_node, tmp_path, tmp_path_factory
):
    # 4 ranks at 2 per node need two nodes; this partition has one, so SLURM refuses that cell's job
    # (EnforcePartLimits=ALL, as on production clusters; without it the job would pend forever)
    config = cluster_config(gpus=(1, 4))
    with_data(tmp_path, cluster_data(slurm, tmp_path_factory))  # the run's 40 pairs: g4 is never trained
    result = run_slurm_snakemake(single_node, tmp_path, config, INCOMPLETE)
    output = result.stdout + result.stderr
    assert result.returncode == 0, describe(result, tmp_path)
    assert output.count("Node count specification invalid") == 1, output[-4000:]  # its one left-out line
    assert "left out: torch/native g4: SLURM refuses its job (sbatch --test-only " in result.stderr
    assert "SLURM sbatch failed" not in output and "Trying to restart" not in output
    assert read_run(tmp_path, "torch/native/g1/s1")["status"] == "ok", describe(result, tmp_path)
    assert set(slurm_jobs(tmp_path)) == {"torch_native_1_1"}  # nothing was submitted for g4
    assert "Node count specification invalid" in left_out_rows(tmp_path)["torch/native g4"]["reason"]


def test_a_partition_that_does_not_exist_is_one_sbatch_message_per_request_and_no_job(single_node, tmp_path):
    config = cluster_config(partition="nosuchpartition")
    # the data jobs (in the site's default partition) run; the train jobs would not
    result = run_slurm_snakemake(single_node, tmp_path, config, "prepared_data", INCOMPLETE)
    output = result.stdout + result.stderr
    assert result.returncode == 0, describe(result, tmp_path)
    # g1 and g2 ask for different tasks per node: two requests, each refused once, nothing submitted
    assert output.count("invalid partition specified") == 2, output[-4000:]
    assert "Trying to restart" not in output and not slurm_jobs(tmp_path)
    assert len(list((tmp_path / "results" / "data" / "prepared").glob("*/manifest.json"))) == 1
    # the data jobs ran as SLURM jobs (the plugin's log folders), as every study's do on a cluster
    assert slurm_rules(tmp_path) == ["preprocess_dataset", "synthetic_dataset"], slurm_rules(tmp_path)
    reasons = left_out_rows(tmp_path)
    assert set(reasons) == {"torch/native g1", "torch/native g2"}
    assert all("sbatch --test-only -p nosuchpartition" in row["reason"] for row in reasons.values()), reasons


def test_task_binding_on_a_cluster_without_gpu_scheduling_is_refused_before_submission(single_node, tmp_path, data):
    # this cluster schedules no GPUs (no GRES), so SLURM refuses the job's --gpus-per-task
    config = cluster_config(gpus=(1,), gpus_per_node=1, gpu_binding="task")
    result = run_slurm_snakemake(single_node, with_data(tmp_path, data), config, INCOMPLETE, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, describe(result, tmp_path)
    refused = [line for line in result.stderr.splitlines() if line.startswith("left out: torch/native")]
    assert len(refused) == 1 and "--gpus-per-task=1" in refused[0] and "sbatch: error: " in refused[0], refused
    assert "Trying to restart" not in output and not slurm_jobs(tmp_path)
    row = left_out_rows(tmp_path)["torch/native"]
    assert row["reason"] == refused[0].split(": ", 2)[2] and row["rerun"] == "", row
    print(row["reason"])  # the cluster's own words, for the record


OLD_SBATCH = """#!/bin/sh
# a site's sbatch wrapper that does not pass --test-only on
case "$*" in *--test-only*) echo "sbatch: unrecognized option '--test-only'" >&2; exit 1 ;; esac
exec {sbatch} "$@"
"""


def test_without_test_only_a_refused_submission_is_not_resubmitted(single_node, tmp_path, data):
    with_data(tmp_path, data)
    wrapper = tmp_path / "bin" / "sbatch"
    wrapper.parent.mkdir()
    wrapper.write_text(OLD_SBATCH.format(sbatch=shutil.which("sbatch")))
    wrapper.chmod(0o755)
    config = cluster_config(partition="nosuchpartition")
    env = {"PATH": f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}"}
    result = run_slurm_snakemake(single_node, tmp_path, config, env=env)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "slurm check skipped: this sbatch does not take --test-only" in result.stderr, result.stderr[-3000:]
    # each cell submitted once and refused once (keep-going), none restarted with the profile's retries
    assert output.count("SLURM sbatch failed") == 2 and "Trying to restart" not in output, output[-4000:]
    collected = run_slurm_snakemake(single_node, tmp_path, config, INCOMPLETE, "--config", "partial=true", env=env)
    assert collected.returncode == 0, describe(collected, tmp_path)
    with open(tmp_path / INCOMPLETE) as handle:
        rows = {row["item"]: row for row in csv.DictReader(handle)}
    row = rows["torch/native/g1/s1"]
    assert row["status"] == "failed" and " --force " not in row["rerun"], row  # its submission failed
    assert re.match(r"its job never started: sbatch refused it: sbatch: error: .+ \(\.snakemake/log/", row["reason"]), (
        row
    )


def test_a_rank_larger_than_any_node_is_refused_naming_the_key_before_any_job(single_node, tmp_path):
    config = cluster_config(cpus_per_rank=8)  # this cluster's nodes have 4 CPUs
    result = run_slurm_snakemake(single_node, tmp_path, config, "-n")
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert (
        "config key 'cluster.cpus_per_rank': 8 CPUs per rank, more than any node of the cluster has (4, sinfo)"
        in output
    )
