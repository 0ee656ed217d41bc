"""The patch of snakemake-executor-plugin-slurm (config/slurm_plugin.py) on the installed plugin's own
class: a refused sbatch ends its job at the first attempt, a busy one is submitted again by the
plugin's run_job after a delay without a job error, and another plugin version is refused loudly.
(tests/cluster/test_slurm_survival.py runs it against a real SLURM.)"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
from scalebench.cluster import slurm_answers
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
