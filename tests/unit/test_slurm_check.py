"""Requests SLURM would refuse, asked of sbatch --test-only once per distinct request (here of
stand-in sbatch programs on PATH; tests/cluster asks a real SLURM), and never resubmitted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from scalebench import config as sb_config
from scalebench.config import slurm_check
from scalebench.config.resources import job_resources

REFUSING = """#!/bin/sh
echo "$@" >> "$(dirname "$0")/calls"
case "$*" in
  *nosuch*) echo "sbatch: error: invalid partition specified: nosuch" >&2; exit 1 ;;
esac
echo "sbatch: Job 7 to start at 2030-01-01T00:00:00 using 1 processors on nodes n1 in partition debug" >&2
"""
UNCONFIGURED = """#!/bin/sh
echo "sbatch: error: fetch_config: DNS SRV lookup failed" >&2
echo "sbatch: fatal: Could not establish a configuration source" >&2
exit 1
"""
OLD = """#!/bin/sh
echo "sbatch: unrecognized option '--test-only'" >&2
exit 1
"""


@pytest.fixture
def sbatch_on_path(tmp_path, monkeypatch):
    def install(script: str) -> Path:
        program = tmp_path / "bin" / "sbatch"
        program.parent.mkdir(exist_ok=True)
        program.write_text(script)
        program.chmod(0o755)
        monkeypatch.setenv("PATH", f"{program.parent}{os.pathsep}{os.environ['PATH']}")
        return program.parent / "calls"

    return install


def study(schema, **cluster) -> dict:
    config = {
        "matrix": {"gpus": [1, 2], "seeds": [1, 2]},
        "cluster": {"gpus_per_node": 0, "ranks_per_node": 2, **cluster},
    }
    return sb_config.validate(config, schema)


def resources_of(config):
    def resources(cell):
        found = {k: v for k, v in job_resources(config, cell).items() if v is not None}
        return found, found["cpus_per_task"]

    return resources


def test_the_options_are_the_plugin_s_own_without_its_bookkeeping(schema):
    config = study(schema, partition="gpu", account="proj", qos="high", extra="--reservation=r1")
    cell = sb_config.Cell("torch", "native", 2, 1)
    options = slurm_check.sbatch_options(*resources_of(config)(cell))
    assert options[:4] == ["-A", "proj", "-p", "gpu"]
    assert {"--qos=high", "--nodes=1", "--ntasks-per-node=2", "--reservation=r1", "--cpus-per-task=8"} <= set(options)
    assert not {"--parsable", "--job-name", "--output", "--comment", "-D"} & set(options)


def test_each_distinct_request_is_asked_once_and_its_cells_are_left_out_with_sbatch_s_words(schema, sbatch_on_path):
    calls = sbatch_on_path(REFUSING)
    config = study(schema, partition="nosuch")
    cells = sb_config.cells(config)
    findings = slurm_check.check(cells, resources_of(config))
    assert len(calls.read_text().splitlines()) == 2  # g1 and g2 differ; the seeds share theirs
    assert set(findings.refused) == set(cells)
    reason = findings.refused[cells[0]]
    assert reason.startswith("SLURM refuses its job (sbatch --test-only -p nosuch ")
    assert reason.endswith(": sbatch: error: invalid partition specified: nosuch")
    assert findings.notes == [
        "slurm check: sbatch --test-only accepted 0 of the 2 distinct request(s) of the cells to submit"
    ]
    accepted = slurm_check.check(cells, resources_of(study(schema, partition="debug")))
    assert accepted.refused == {} and "accepted 2 of the 2" in accepted.notes[0]


def test_an_sbatch_without_test_only_or_none_at_all_skips_the_check_saying_why(schema, sbatch_on_path, monkeypatch):
    config = study(schema)
    sbatch_on_path(OLD)
    findings = slurm_check.check(sb_config.cells(config), resources_of(config))
    assert findings.refused == {}
    assert findings.notes[0].startswith(
        "slurm check skipped: this sbatch does not take --test-only (sbatch: unrecognized"
    )
    monkeypatch.setenv("PATH", "/nonexistent")
    note = slurm_check.check(sb_config.cells(config), resources_of(config)).notes[0]
    assert note.startswith("slurm check skipped: sbatch is not on this machine's PATH")


def test_a_slurm_that_does_not_answer_is_no_refusal(schema, sbatch_on_path):
    # SLURM's client installed on a machine without a cluster (or its controller down)
    config = study(schema)
    sbatch_on_path(UNCONFIGURED)
    findings = slurm_check.check(sb_config.cells(config), resources_of(config))
    assert findings.refused == {}
    assert findings.notes[0].startswith("slurm check skipped: SLURM did not answer sbatch --test-only (sbatch: error")


def test_a_rank_larger_than_any_node_names_the_key(sbatch_on_path, tmp_path):
    sinfo = tmp_path / "bin" / "sinfo"
    sbatch_on_path(REFUSING)
    sinfo.write_text('#!/bin/sh\nprintf "32\\n64+\\n"\n')
    sinfo.chmod(0o755)
    problem = slurm_check.node_cpus_problem(96, "gpu")
    assert (
        problem
        == "config key 'cluster.cpus_per_rank': 96 CPUs per rank, more than any node of partition gpu has (64, sinfo)"
    )
    assert slurm_check.node_cpus_problem(64, "gpu") is None


BUSY_TWICE = """#!/bin/sh
# a controller too busy to answer the first two asks
count=$(cat "$(dirname "$0")/count" 2>/dev/null || echo 0)
echo $((count + 1)) > "$(dirname "$0")/count"
if [ "$count" -lt 2 ]; then
  echo "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation" >&2; exit 1
fi
echo "sbatch: Job 7 to start at 2030-01-01T00:00:00 using 1 processors on nodes n1 in partition debug" >&2
"""


def test_the_pre_flight_asks_a_busy_controller_again_and_gives_up_after_the_window(schema, sbatch_on_path, capsys):
    config = study(schema)
    sbatch_on_path(BUSY_TWICE)
    cells = [c for c in sb_config.cells(config) if c.gpus == 1]  # one request
    waited = []
    findings = slurm_check.check(cells, resources_of(config), window_s=60, sleep=waited.append)
    assert findings.refused == {} and "accepted 1 of the 1" in findings.notes[0], findings
    assert waited == [2, 4]  # asked three times, growing delays
    said = capsys.readouterr().err
    assert said.count("slurm check: sbatch --test-only got no verdict (the controller did not answer in time") == 2
    sbatch_on_path(BUSY_TWICE.replace("-lt 2", "-lt 99"))
    waited.clear()
    findings = slurm_check.check(cells, resources_of(config), window_s=10, sleep=waited.append)
    assert waited == [2, 4, 4] and findings.refused == {}
    assert findings.notes[0].startswith(
        "slurm check skipped: SLURM gave no verdict on sbatch --test-only within cluster.busy_retry_min (0.166667 min;"
    ), findings.notes


def test_the_pre_flight_takes_a_refusal_at_its_first_answer(schema, sbatch_on_path):
    calls = sbatch_on_path(REFUSING)
    config = study(schema, partition="nosuch")
    cells = [c for c in sb_config.cells(config) if c.gpus == 1]
    waited = []
    findings = slurm_check.check(cells, resources_of(config), window_s=600, sleep=waited.append)
    assert set(findings.refused) == set(cells) and waited == [] and len(calls.read_text().splitlines()) == 1


def test_the_retry_window_is_refused_before_any_job_when_negative_or_not_a_number(schema):
    for value, words in ((-1, "-1 is less than the minimum of 0"), ("soon", "'soon' is not of type 'number'")):
        with pytest.raises(sb_config.ConfigError, match="config key 'cluster.busy_retry_min'") as raised:
            sb_config.validate({"cluster": {"busy_retry_min": value}}, schema)
        assert words in str(raised.value)
    assert sb_config.validate({}, schema)["cluster"]["busy_retry_min"] == 20


def test_the_bound_on_a_stuck_job_is_refused_before_any_job_when_not_a_positive_number(schema):
    for value, words in (
        (0, "0 is less than or equal to the minimum of 0"),
        (-5, "-5 is less than or equal"),
        ("soon", "'soon' is not of type 'number', 'null'"),
    ):
        with pytest.raises(sb_config.ConfigError, match="config key 'cluster.stuck_after_min'") as raised:
            sb_config.validate({"cluster": {"stuck_after_min": value}}, schema)
        assert words in str(raised.value)
    assert sb_config.validate({}, schema)["cluster"]["stuck_after_min"] is None  # the job's own time limit
    assert sb_config.validate({"cluster": {"stuck_after_min": 0.5}}, schema)["cluster"]["stuck_after_min"] == 0.5


def test_the_bound_on_starting_a_cells_ranks_is_refused_before_any_job_when_not_a_positive_number(schema):
    for value, words in ((0, "0 is less than or equal to the minimum of 0"), ("5m", "'5m' is not of type 'number'")):
        with pytest.raises(sb_config.ConfigError, match="config key 'cluster.step_wait_s'") as raised:
            sb_config.validate({"cluster": {"step_wait_s": value}}, schema)
        assert words in str(raised.value)
    assert sb_config.validate({}, schema)["cluster"]["step_wait_s"] == 300


def test_forced_cells_are_checked_again_whether_finished_or_not(schema):
    from scalebench import rerun

    cells = sb_config.cells(study(schema), None)
    target = "results/runs/torch/native/g2/s1/metrics.jsonl"
    forced = rerun.forced(["snakemake", "--profile", "profiles/slurm", "--force", "--", target])
    assert forced == (False, frozenset({target}))
    assert [cell.path for cell in slurm_check.forced_cells(cells, forced)] == ["torch/native/g2/s1"]
    assert slurm_check.forced_cells(cells, rerun.forced(["snakemake", "--forcerun", "train"])) == cells
    assert slurm_check.forced_cells(cells, rerun.forced(["snakemake", "--forceall"])) == cells
    assert slurm_check.forced_cells(cells, rerun.forced(["snakemake", target])) == []  # named, not forced
