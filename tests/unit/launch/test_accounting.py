"""What SLURM accounts for a cell (launch/accounting.py), read from the formats scontrol and sacct print."""

from __future__ import annotations

import json

import pytest
from scalebench.cluster.slurm import oneliner_fields
from scalebench.launch import accounting

# `scontrol show job -d --oneliner` of a two-node GPU job (the fields that matter; src/scontrol/info_job.c)
GPU_JOB = (
    "JobId=4242 JobName=train JobState=RUNNING Reason=None RunTime=1-02:03:04 TimeLimit=2-00:00:00 "
    "NumNodes=2 NumCPUs=16 ReqTRES=cpu=16,mem=64G,node=2,billing=16,gres/gpu=8 "
    "AllocTRES=cpu=16,mem=64G,node=2,billing=16,gres/gpu=8,gres/gpu:a100=8 JOB_GRES=gpu:a100:8 "
    "Nodes=gpu01 CPU_IDs=0-7 Mem=32768 GRES=gpu:a100:4(IDX:0-3) Nodes=gpu02 CPU_IDs=0-7 Mem=32768 "
    "GRES=gpu:a100:4(IDX:0-3)"
)


def test_allocation_gpu_hours_are_its_gpus_times_its_run_time():
    job = oneliner_fields(GPU_JOB)
    assert accounting.allocated_gpus(job) == 8
    hours, reason = accounting.allocation_gpu_hours(job)
    assert reason == "" and hours == pytest.approx(8 * (26 * 3600 + 3 * 60 + 4) / 3600)


def test_the_gpus_come_from_the_allocated_gres_where_gres_is_not_a_tracked_tres():
    untracked = GPU_JOB.replace(",gres/gpu=8,gres/gpu:a100=8", "")
    assert accounting.allocated_gpus(oneliner_fields(untracked)) == 8
    assert accounting.gres_gpus("gpu:2(IDX:0-1),shard:4") == 2
    assert accounting.gres_gpus("gpu:a100:2,gpu:v100:1") == 3
    assert accounting.gres_gpus("(null)") == 0


def test_an_allocation_without_gpus_has_no_gpu_hours_and_says_why():
    cpu_job = oneliner_fields("JobId=7 RunTime=00:00:42 AllocTRES=cpu=2,mem=2000M,node=1,billing=2 JOB_GRES=(null)")
    assert accounting.allocation_gpu_hours(cpu_job) == (
        None,
        "the allocation holds no GPUs (neither AllocTRES nor JOB_GRES names one)",
    )
    assert accounting.run_time_s("00:00:42") == 42 and accounting.run_time_s("INVALID") is None


CONFIG = """Configuration data as of 2026-01-01T00:00:00
AccountingStorageType   = accounting_storage/slurmdbd
AcctGatherEnergyType    = acct_gather_energy/ipmi
ClusterName             = gpu
"""


def test_the_step_s_energy_is_sacct_s_consumed_energy_in_joules():
    answers = iter(["", "|RUNNING\n", "123456|COMPLETED\n"])  # not accounted yet, still running, ended
    config = accounting.config_values(CONFIG)
    assert accounting.step_energy("4242.1", config, lambda step: next(answers), poll_s=0) == (123456.0, "")


@pytest.mark.parametrize("raw", ["0", ""])
def test_sacct_s_zero_or_empty_energy_is_not_measured_never_zero_joules(raw):
    joules, reason = accounting.step_energy("4242.1", accounting.config_values(CONFIG), lambda s: f"{raw}|COMPLETED\n")
    assert joules is None and "not measured" in reason and "4242.1" in reason


def test_a_cluster_without_accounting_or_energy_gathering_says_so_without_asking_sacct():
    def sacct(step: str) -> str:
        raise AssertionError("sacct asked")

    none = CONFIG.replace("accounting_storage/slurmdbd", "accounting_storage/none")
    assert accounting.step_energy("1.0", accounting.config_values(none), sacct)[1].startswith("no accounting")
    ungathered = CONFIG.replace("acct_gather_energy/ipmi", "acct_gather_energy/none")
    assert "gathers no energy" in accounting.step_energy("1.0", accounting.config_values(ungathered), sacct)[1]


def test_a_step_never_accounted_as_ended_is_empty_with_the_reason():
    joules, reason = accounting.step_energy(
        "4242.1", accounting.config_values(CONFIG), lambda s: "", wait_s=0, poll_s=0
    )
    assert joules is None and "had not accounted step 4242.1" in reason


def test_a_local_run_records_empty_accounting_with_the_reason(tmp_path):
    run_json = tmp_path / "run.json"
    run_json.write_text(json.dumps({"status": "ok", "train_gpu_hours": 0.5}))
    accounting.record(run_json, None)
    run = json.loads(run_json.read_text())
    assert run["train_gpu_hours"] == 0.5  # the loop's own figure stays
    assert run["alloc_gpu_hours"] is None and run["alloc_gpu_hours_reason"] == accounting.NOT_SLURM
    assert run["step_energy_j"] is None and run["step_energy_reason"] == accounting.NOT_SLURM
    assert accounting.record(tmp_path / "absent.json", None) is None


def test_the_job_wall_is_slurms_elapsed_in_a_job_and_launchs_own_clock_locally():
    job = oneliner_fields(GPU_JOB)
    assert accounting.job_wall(job, 100.0, 26 * 3600 + 100.0, None, None) == {
        "job_s": float(26 * 3600 + 3 * 60 + 4),
        "job_s_source": "slurm elapsed",
        "job_attempts": 1,
        "job_s_reason": None,
    }
    # no job (a local run) or one scontrol could not read: this process's start to the ranks' end
    local = accounting.job_wall(None, 100.0, 160.5, None, None)
    assert (local["job_s"], local["job_s_source"]) == (60.5, "launch")
    # a job that ran for a day before this process (the workflow inside one salloc): not the cell's
    assert accounting.job_wall(job, 100.0, 160.5, None, None)["job_s"] == 60.5
    own = oneliner_fields(GPU_JOB.replace("RunTime=1-02:03:04", "RunTime=00:01:10"))
    assert accounting.job_wall(own, 100.0, 160.5, None, None)["job_s"] == 70.0  # its start before launch.py too


def test_a_resumed_cell_sums_its_attempts_or_says_why_it_cannot():
    before = {"job_s": 30.0, "job_s_source": "launch", "job_attempts": 1}
    summed = accounting.job_wall(None, 0.0, 20.0, before, resumed_from=2)
    assert (summed["job_s"], summed["job_attempts"], summed["job_s_reason"]) == (50.0, 2, None)
    killed = accounting.job_wall(None, 0.0, 20.0, {"status": "running"}, resumed_from=2)
    assert killed["job_s"] is None and killed["job_attempts"] is None
    assert killed["job_s_reason"].startswith("resumed after epoch 2: the attempt before left no job wall")
    assert "this attempt's alone was 20.0 s" in killed["job_s_reason"]


def test_launch_records_the_job_wall_from_its_own_start(tmp_path):
    """launch.py's own process start, not rank 0's: the span includes the ranks' imports, however they start."""
    import time

    run_json = tmp_path / "run.json"
    run_json.write_text(json.dumps({"status": "ok", "start": "2025-01-01T10:00:00+00:00"}))
    fields = accounting.record(run_json, None, began=time.time() - 12.0)
    run = json.loads(run_json.read_text())
    assert run["job_s"] == fields["job_s"] and 12.0 <= run["job_s"] < 60 and run["job_s_source"] == "launch"
    accounting.record(run_json, None)  # by default from this process's start (psutil), before the test
    assert json.loads(run_json.read_text())["job_s"] >= time.time() - accounting.own_start() - 1
