"""A cell whose sbatch was refused is failed with sbatch's error as its reason (Snakemake's log of the run)."""

from __future__ import annotations

from cell_records import cell, write_cell
from scalebench.analysis import study
from scalebench.analysis.submissions import submit_errors
from scalebench.rerun import Invocation

STUDY = Invocation(("snakemake",), "/study", ())

# What Snakemake 9 wrote to .snakemake/log/ when the test cluster (no GRES) refused --gpus-per-task
# (tests/cluster/test_slurm_single_node.py), long lines shortened.
REFUSED = """\
[Mon Nov 23 06:05:50 2026]
rule train:
    output: results/runs/torch/native/g1/s1/metrics.jsonl, results/runs/torch/native/g1/s1/run.json
Error in rule train:
    message: SLURM sbatch failed. The error message was 'sbatch: error: Invalid generic resource (gres) specification'.
    sbatch call:
        sbatch --parsable --job-name ad1f -p debug -t 5 --mem 1000 --nodes=1 --ntasks=1 --gpus-per-task=1 --wrap="..."
For further error details see the cluster/cloud log and the log files of the involved rule(s).
    jobid: 2
    input: results/data/prepared/synthetic-32x48-aacaf793e8/images.npy
    output: results/runs/torch/native/g1/s1/metrics.jsonl, results/runs/torch/native/g1/s1/run.json
    log: results/runs/torch/native/g1/s1/train.log (check log file(s) for error details)
    shell:
        python launch.py > results/runs/torch/native/g1/s1/train.log 2>&1
        (command exited with non-zero exit code)
Logfile results/runs/torch/native/g1/s1/train.log: empty file
Error in rule train:
    message: None
    jobid: 3
    output: results/runs/torch/native/g2/s1/metrics.jsonl, results/runs/torch/native/g2/s1/run.json
"""


def test_the_newest_sbatch_error_of_each_job_is_found_in_snakemake_s_logs(tmp_path):
    (tmp_path / "2026-11-22T100000.000000.snakemake.log").write_text(REFUSED.replace("Invalid generic", "Old"))
    (tmp_path / "2026-11-23T060545.558632.snakemake.log").write_text(REFUSED)
    errors = submit_errors(tmp_path)
    reason = errors["results/runs/torch/native/g1/s1/metrics.jsonl"]
    assert reason.startswith("its job never started: sbatch refused it: sbatch: error: Invalid generic resource")
    assert reason.endswith("/2026-11-23T060545.558632.snakemake.log)")
    assert "results/runs/torch/native/g2/s1/metrics.jsonl" not in errors  # failed, but not at sbatch
    assert submit_errors(tmp_path / "absent") == {}


def test_a_refused_cell_is_failed_with_the_error_and_a_rerun_without_force(tmp_path):
    runs_root = tmp_path / "runs"
    write_cell(runs_root, gpus=2)  # finished: its old sbatch error is history
    (runs_root / "torch" / "native" / "g1" / "s1").mkdir(parents=True)
    (runs_root / "torch" / "native" / "g1" / "s1" / "train.log").write_text("")  # what Snakemake leaves
    target = "results/runs/torch/native/g{}/s1/metrics.jsonl"
    errors = {target.format(g): f"its job never started: sbatch refused it: no GRES (g{g})" for g in (1, 2, 4)}
    collected = study.collect_study(
        str(runs_root), [cell(gpus=g) for g in (1, 2, 4)], 0.8, [], STUDY, submit_errors=errors
    )
    runs = collected.runs.set_index("gpus")
    assert runs.loc[1, "status"] == "failed" and runs.loc[1, "reason"].endswith("no GRES (g1)")
    assert runs.loc[2, "status"] == "ok"
    assert runs.loc[4, "status"] == "failed" and runs.loc[4, "reason"].endswith("no GRES (g4)")  # no folder at all
    rows = collected.incomplete.set_index("item")
    assert rows.loc["torch/native/g1/s1", "reason"].endswith("no GRES (g1)")
    assert " --force " not in rows.loc["torch/native/g1/s1", "rerun"]
