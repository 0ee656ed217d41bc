"""The patch of snakemake-executor-plugin-slurm (config/slurm_plugin.py) on the installed plugin's own
class: a refused sbatch ends its job at the first attempt, a busy one is submitted again by the
plugin's run_job after a delay without a job error, and another plugin version is refused loudly.
(tests/cluster/test_slurm_survival.py runs it against a real SLURM.)"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
from scalebench.cluster import slurm_answers, stuck_jobs
from scalebench.config import slurm_plugin


def plugin_message(words: str) -> str:
    """The plugin's (2.8.0) message of a failed sbatch, as run_job builds it."""
    return f"SLURM sbatch failed. The error message was '{words}'.\n    sbatch call:\n        sbatch --parsable ...\n"


@pytest.fixture
def executor(monkeypatch):
    """The plugin's Executor class without a workflow: the wrapped method's collaborators only."""
    from snakemake_executor_plugin_slurm import Executor

    monkeypatch.setattr(slurm_answers, "FIRST_DELAY_S", 0.01)
    slurm_plugin.install(window_s=0.05)
    resubmitted = threading.Event()
    plugin = Executor.__new__(Executor)
    plugin._main_event_loop = None
    plugin.logger = logging.getLogger("test-slurm-plugin")
    plugin.failed = []
    plugin.workflow = SimpleNamespace(scheduler=SimpleNamespace(error_callback=plugin.failed.append))
    plugin.print_job_error = lambda job_info, msg=None, **kwargs: None
    plugin._job_submission_executor = ThreadPoolExecutor(max_workers=1)
    plugin.asked = []
    plugin.run_job = lambda job: (plugin.asked.append(job), resubmitted.set())
    plugin.resubmitted = resubmitted
    yield plugin
    plugin._job_submission_executor.shutdown(wait=True)
    slurm_plugin.uninstall()


def job(jobid: int = 3):
    return SimpleNamespace(jobid=jobid, attempt=1, restart_times=2, name="train", wildcards_dict={"gpus": "2"})


def test_a_refused_sbatch_ends_its_job_at_the_first_attempt(executor, caplog):
    from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

    refused = job()
    words = "sbatch: error: Batch job submission failed: Invalid qos specification"
    executor._report_job_error_threadsafe(SubmittedJobInfo(refused), plugin_message(words))
    assert executor.failed == [refused] and refused.attempt == refused.restart_times + 1  # no retry left
    assert executor.asked == []
    assert "sbatch refused rule train (jobid 3, gpus=2) (a QOS that does not exist or is not allowed)" in caplog.text


def test_a_busy_sbatch_is_asked_again_without_a_job_error_until_the_window_ends(executor, caplog):
    from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

    busy = job()
    words = "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"
    with caplog.at_level(logging.WARNING):
        executor._report_job_error_threadsafe(SubmittedJobInfo(busy), plugin_message(words))
        assert executor.failed == [] and busy.attempt == 1
        assert executor.resubmitted.wait(10), "run_job was not called again"
        assert executor.asked == [busy]
        assert "sbatch got no verdict on rule train (jobid 3, gpus=2) (the controller did not answer in time" in (
            caplog.text
        )
        assert "asking again in 0 s (ask 2," in caplog.text
        # asked again until cluster.busy_retry_min's window (here 0.05 s) is used up, then the job ends
        for _ in range(20):
            executor.resubmitted.clear()
            executor._report_job_error_threadsafe(SubmittedJobInfo(busy), plugin_message(words))
            if executor.failed:
                break
            assert executor.resubmitted.wait(10)
    assert executor.failed == [busy] and busy.attempt == busy.restart_times + 1
    assert "within cluster.busy_retry_min" in caplog.text and "the job ends" in caplog.text


def test_an_error_that_is_not_sbatch_s_ends_the_job_as_before(executor):
    from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

    broken = job()
    executor._report_job_error_threadsafe(SubmittedJobInfo(broken), "Job submission failed with exception: KeyError")
    assert executor.failed == [broken] and broken.attempt == 3 and executor.asked == []


def test_a_job_that_ran_keeps_its_retries(executor):
    from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

    ran = job()
    executor._report_job_error_threadsafe(SubmittedJobInfo(ran, external_jobid="42"), "SLURM-job '42' failed")
    assert executor.failed == [ran] and ran.attempt == 1  # Snakemake restarts it while attempt - 1 < restart_times


def test_another_plugin_version_is_refused_naming_both_and_nothing_is_patched():
    from snakemake_executor_plugin_slurm import Executor

    own = (Executor._report_job_error_threadsafe, Executor.run_jobs)
    with pytest.raises(slurm_plugin.PluginMismatch) as raised:
        slurm_plugin.install(60, by_priority=True, version="2.9.0")
    assert (Executor._report_job_error_threadsafe, Executor.run_jobs) == own
    message = str(raised.value)
    assert (
        "written for 2.8.0, and 2.9.0 is installed" in message and "snakemake-executor-plugin-slurm==2.8.0" in message
    )
    import importlib.metadata

    assert importlib.metadata.version(slurm_plugin.PLUGIN) == slurm_plugin.WRITTEN_FOR  # this environment's


def test_with_a_drawn_order_the_plugin_submits_each_rounds_jobs_highest_priority_first():
    """Snakemake hands a round's jobs to the plugin in the order of a set; the patch sorts them."""
    from snakemake_executor_plugin_slurm import Executor

    own = Executor.run_jobs
    submitted = []
    try:
        Executor.run_jobs = lambda self, jobs: submitted.extend(job.name for job in jobs)
        slurm_plugin.install(60)
        Executor.run_jobs(None, [SimpleNamespace(name=n, priority=p) for n, p in (("b", 1), ("a", 3), ("c", 2))])
        assert submitted == ["b", "a", "c"]  # without order.seed: as Snakemake handed them
        slurm_plugin.install(60, by_priority=True)
        slurm_plugin.install(60, by_priority=True)  # idempotent: wrapped once
        submitted.clear()
        jobs = [SimpleNamespace(name=n, priority=p) for n, p in (("b", 1), ("a", 3), ("c", 2), ("d", 3))]
        Executor.run_jobs(None, jobs)
        assert submitted == ["a", "d", "c", "b"]  # ties keep the order they came in
        slurm_plugin.uninstall()
        submitted.clear()
        Executor.run_jobs(None, jobs)
        assert submitted == ["b", "a", "c", "d"]
    finally:
        slurm_plugin.uninstall()
        Executor.run_jobs = own


# --- train jobs that would be waited for ever (cluster/stuck_jobs.py)


def train_job(jobid: int, folder) -> SimpleNamespace:
    return SimpleNamespace(
        jobid=jobid, attempt=1, restart_times=2, name="train", output=[str(folder / "metrics.jsonl")]
    )


def test_a_train_job_held_past_the_bound_is_ended_marked_and_failed_without_a_retry(executor, tmp_path):
    from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

    slurm_plugin.install(window_s=0.05, stuck_after_min=1)
    held, running = train_job(1, tmp_path / "a"), train_job(2, tmp_path / "b")
    infos = [SubmittedJobInfo(held, external_jobid="41"), SubmittedJobInfo(running, external_jobid="42")]
    squeue = "41|PENDING|JobHeldUser|15:00\n42|RUNNING|None|15:00\n"
    errors, ended, clock = [], [], [100.0]
    executor.report_job_error = lambda info, msg=None, **kwargs: errors.append((info, msg))

    def check() -> set[int]:
        return slurm_plugin.end_stuck(executor, infos, read=lambda ids: squeue, end=ended.append, now=lambda: clock[0])

    assert check() == set() and not errors  # first seen held now
    clock[0] += 59
    assert check() == set() and not errors  # 59 s of the 60 allowed
    clock[0] += 2
    assert check() == {id(infos[0])}
    assert [job.job_id for job in ended] == ["41"] and held.attempt == held.restart_times + 1
    assert running.attempt == 1 and errors[0][0] is infos[0]
    assert (
        "SLURM job 41 sat 1.0 min in state PENDING (JobHeldUser), longer than cluster.stuck_after_min" in errors[0][1]
    )
    mark = stuck_jobs.read_mark(tmp_path / "a")
    assert (mark.status, mark.state, mark.reason, mark.job_id) == ("held", "PENDING", "JobHeldUser", "41")
    assert stuck_jobs.read_mark(tmp_path / "b") is None


def test_a_job_that_moves_on_starts_its_clock_afresh_and_squeue_without_an_answer_ends_nothing(executor, tmp_path):
    from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

    slurm_plugin.install(window_s=0.05, stuck_after_min=1)
    info = SubmittedJobInfo(train_job(1, tmp_path), external_jobid="41")
    executor.report_job_error = lambda info, msg=None, **kwargs: pytest.fail(msg)
    lines = iter(["41|SUSPENDED|None|15:00", "41|RUNNING|None|15:00", "41|SUSPENDED|None|15:00"])
    for now in (0.0, 50.0, 100.0):
        assert (
            slurm_plugin.end_stuck(
                executor, [info], read=lambda ids: next(lines), end=pytest.fail, now=lambda now=now: now
            )
            == set()
        )

    def busy(ids):
        raise subprocess.CalledProcessError(1, "squeue", stderr="Socket timed out")

    assert slurm_plugin.end_stuck(executor, [info], read=busy, end=pytest.fail, now=lambda: 1000.0) == set()


def test_the_plugin_checks_only_the_jobs_left_after_the_stuck_ones_were_ended(executor, tmp_path, monkeypatch):
    import asyncio

    from snakemake_executor_plugin_slurm import Executor
    from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

    infos = [SubmittedJobInfo(train_job(n, tmp_path / str(n)), external_jobid=str(40 + n)) for n in (1, 2)]
    monkeypatch.setattr(slurm_plugin, "end_stuck", lambda executor, jobs: {id(infos[0])})
    assert getattr(Executor.check_active_jobs, "scalebench", False)  # installed by the fixture

    seen = []

    async def plugin_check(self, jobs):
        seen.extend(jobs)
        for job_info in jobs:
            yield job_info

    wrapped = slurm_plugin._watched_check(plugin_check)

    async def run() -> list:
        return [info async for info in wrapped(executor, infos)]

    assert asyncio.run(run()) == [infos[1]] and seen == [infos[1]]


@pytest.mark.parametrize(
    ("line", "status"),
    [
        ("7|PENDING|JobHeldAdmin|1:00:00", "held"),
        ("7|PENDING|Resources|1:00:00", None),  # waiting for the cluster: never ended
        ("7|PENDING|BeginTime|1:00:00", None),  # a requeued job held back for a while
        ("7|SUSPENDED|None|1:00:00", "suspended"),
        ("7|PREEMPTED|None|1:00:00", "preempted"),
        ("7|REQUEUE_HOLD|JobHeldAdmin|1:00:00", "held"),
        ("7|PENDING|job requeued in held state|1:00:00", "held"),  # scontrol requeuehold (SLURM 22.05's squeue)
        ("7|RUNNING|None|1:00:00", None),
        ("7|COMPLETING|None|1:00:00", None),
        ("7|SOMETHING_NEW|None|1:00:00", "stuck"),  # a state never seen: ended at the bound, named
    ],
)
def test_which_states_will_not_end_by_themselves(line, status):
    (job,) = stuck_jobs.parse_squeue(line)
    assert stuck_jobs.stuck_status(job) == status and job.time_limit_s == 3600


def test_without_a_bound_the_jobs_time_limit_is_the_bound():
    (job,) = stuck_jobs.parse_squeue("7|SUSPENDED|None|15:00")
    watch = stuck_jobs.Watch(None)
    assert watch.overdue([job], 0.0) == [] and watch.overdue([job], 899.0) == []
    assert [found.bound_s for _, found in watch.overdue([job], 900.0)] == [900.0]
    (unlimited,) = stuck_jobs.parse_squeue("8|SUSPENDED|None|UNLIMITED")
    assert stuck_jobs.Watch(None).overdue([unlimited], 1e9) == []


# --- a status query without an answer (a busy controller)

STATUS_SQUEUE = """#!/bin/sh
answer=$(/bin/cat "$(/usr/bin/dirname "$0")/answer")
[ "$answer" = busy ] && { echo "slurm_load_jobs error: Socket timed out on send/recv operation" >&2; exit 1; }
echo "$answer"
"""


def status_checks(executor, folder: Path, monkeypatch, attempts: int) -> Callable[[str, list], list]:
    """The plugin's own check of its active jobs (2.8.0) against an squeue first on PATH that answers
    what check(answer, jobs) is given ('busy': it times out), on an Executor without a workflow."""
    import asyncio
    import contextlib

    folder.mkdir()
    (folder / "squeue").write_text(STATUS_SQUEUE)
    (folder / "squeue").chmod(0o755)
    (folder / "which").symlink_to("/usr/bin/which")  # the plugin asks `which sacct`: no sacct here
    monkeypatch.setenv("PATH", str(folder))
    executor.workflow.executor_settings = SimpleNamespace(
        status_attempts=attempts,
        status_command="squeue",
        init_seconds_before_status_checks=40,
        keep_successful_logs=True,
    )
    executor.status_rate_limiter = contextlib.nullcontext()
    executor.run_uuid, executor.next_seconds_between_status_checks = "run", 40
    executor._status_query_failures = executor._status_query_calls = 0
    executor._status_query_total_seconds, executor._status_query_min_seconds = 0.0, None
    executor._status_query_max_seconds, executor._status_query_cycle_rows = 0.0, []
    executor._preemption_warning = False

    def check(answer: str, jobs: list) -> list:
        (folder / "answer").write_text(answer)

        async def collect():
            return [job_info async for job_info in executor.check_active_jobs(jobs)]

        return asyncio.run(collect())

    return check


def test_a_job_the_plugin_gets_no_status_of_stays_active_and_is_asked_about_again(executor, tmp_path, monkeypatch):
    """The plugin's own check (2.8.0), with squeue timing out every attempt: unpatched it yields none
    of its jobs, and Snakemake, which keeps only those yielded, would wait for them for ever."""
    import os

    from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

    statuses = status_checks(executor, tmp_path / "bin", monkeypatch, attempts=3)
    finished = []
    executor.report_job_success = finished.append
    info = SubmittedJobInfo(SimpleNamespace(jobid=1, name="other"), external_jobid="41", aux={})
    check = lambda answer: statuses(answer, [info])  # noqa: E731

    with patch_logs(executor) as warnings:
        assert check("busy") == [info]  # no answer: kept, asked again
        assert "status query got no answer on 1 job(s)" in warnings[-1]
        assert check("41|RUNNING") == [info] and finished == []
        assert check("41|COMPLETED") == [] and finished == [info]  # reported, not kept
    assert len(warnings) == 1
    # unpatched, the same check loses the job
    slurm_plugin.uninstall()
    assert check("busy") == [] and os.environ["PATH"] == str(tmp_path / "bin")


@contextlib.contextmanager
def patch_logs(executor):
    warnings: list[str] = []
    original = executor.logger
    executor.logger = SimpleNamespace(
        warning=warnings.append, debug=lambda *a, **k: None, info=lambda *a, **k: None, error=warnings.append
    )
    try:
        yield warnings
    finally:
        executor.logger = original


def test_a_job_without_status_for_longer_than_busy_retry_min_is_reported_failed(executor):
    from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

    slurm_plugin.install(window_s=60)
    errors = []
    executor.report_job_error = lambda info, msg=None, **kwargs: errors.append((info, msg))
    quiet, answered = (SubmittedJobInfo(SimpleNamespace(jobid=i), external_jobid=str(40 + i)) for i in (1, 2))
    clock = [0.0]

    def check(answered_ids: set[int]) -> list:
        return slurm_plugin.kept_unanswered(executor, [quiet, answered], answered_ids, now=lambda: clock[0])

    assert check(set()) == [quiet, answered]  # neither answered: both kept
    clock[0] = 50.0
    assert check({id(answered)}) == [quiet]  # 42 answered: its clock stops
    clock[0] = 61.0
    assert check(set()) == [answered] and errors[0][0] is quiet  # 41: 61 s without status; 42: 11 s
    assert "SLURM job 41: no status from the controller for 1.0 min (cluster.busy_retry_min)" in errors[0][1]


def test_a_failure_is_reported_once_a_later_check_confirms_it_and_a_requeued_job_is_not(
    executor, tmp_path, monkeypatch
):
    """A job SLURM requeues can read FAILED for a moment (its batch script's failed exit before the
    requeue): reported at once, Snakemake would submit the cell again while SLURM runs it again."""
    from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo

    statuses = status_checks(executor, tmp_path / "bin", monkeypatch, attempts=1)
    failed = []
    executor.report_job_error = lambda info, msg=None, **kwargs: failed.append(info)
    executor.print_job_error = lambda *args, **kwargs: None
    info = SubmittedJobInfo(SimpleNamespace(jobid=1, name="train"), external_jobid="41", aux={})
    check = lambda answer: statuses(answer, [info])  # noqa: E731

    monkeypatch.setattr(slurm_plugin, "CONFIRM_S", 1000.0)
    with patch_logs(executor) as warnings:
        assert check("41|FAILED") == [info] and failed == []  # read failed once: kept
        assert "SLURM job 41 reads failed: reported once a later check confirms it" in warnings[-1]
        assert check("41|PENDING") == [info] and failed == []  # requeued: running again, never reported
        assert check("41|FAILED") == [info] and failed == []  # failed afresh: its clock starts again
        monkeypatch.setattr(slurm_plugin, "CONFIRM_S", 0.0)
        assert check("41|FAILED") == [] and failed == [info]  # confirmed: reported
