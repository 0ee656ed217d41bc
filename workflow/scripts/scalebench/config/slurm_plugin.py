"""The changes this project makes to snakemake-executor-plugin-slurm, in one place, for one version.

What a failed sbatch means. The plugin submits each job from a thread of its own (`Executor.run_job`) and reports a failed
sbatch as a job error without a SLURM job id (`_report_job_error_threadsafe`); Snakemake then
resubmits the job while its attempt is below the rule's `retries`, a few seconds later. That is
wrong both ways for a study: a refusal is refused again `retries` times, and a controller that is
busy for a minute ends the job (and, without --keep-going, the study: the plugin's issue #313).

`install` wraps that one method. sbatch's words are classified by cluster/slurm_answers.py's
table: a refusal ends the job at its first attempt (its attempts are used up) with sbatch's words;
any other answer is asked again by calling the plugin's own `run_job` after a growing delay,
without reporting an error, so the rule's `retries` stay for jobs that ran, until
`cluster.busy_retry_min` has passed (then the job ends with sbatch's last words). Each new ask is
logged. An error that is not sbatch's answer (an exception in the plugin's own checks) ends the
job at its first attempt, as before.

The order a round's jobs reach SLURM (`by_priority`, with order.seed: config/run_order.py). Snakemake's
scheduler picks the ready jobs of the highest priority first, but hands the ones it picks in one
round (up to --max-jobs-per-timespan, 100 a second by default) to the executor in the order of a
set, and the plugin submits them in that order (`Executor.run_jobs`), so a study's first 50 cells
would reach SLURM's queue in no designed order. Sorting them first keeps the drawn order to within
neighbours (the plugin submits from two threads).

Jobs that would be waited for ever (cluster/stuck_jobs.py). The plugin takes any state it does not
list as final for a job still running: a held, suspended or preempted-and-cancelled job is polled
for ever. Its check of the active jobs (`Executor.check_active_jobs`) is wrapped: before it, the
train jobs' states and reasons are read from squeue, and a job that sat in a state that will not end
by itself longer than `cluster.stuck_after_min` is ended (cancelled, its cell marked with what
happened) and reported failed with its attempts used up; the plugin checks the others as before.
A job the plugin reads failed is reported only once a later check, at least CONFIRM_S on, reads it
failed again: a job SLURM requeues can read FAILED for a moment (its batch script's failed exit
before the requeue), and Snakemake would submit the cell a second time.
Where every status query of a check fails (a busy controller), the plugin yields none of its jobs,
and Snakemake drops what is not yielded: the study would wait for their outcome for ever. A job the
plugin neither yielded nor reported is kept active, and asked about again at the next check, for
`cluster.busy_retry_min` (then it is reported failed).

The wrapped methods and the messages read are 2.8.0's: on another version of the plugin `install`
patches nothing and raises instead of guessing, naming both versions; the planner (config/planning.py)
stops the start with that message before any job.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from scalebench.cluster import slurm_answers, stuck_jobs

PLUGIN = "snakemake-executor-plugin-slurm"
WRITTEN_FOR = "2.8.0"
# sbatch's stderr inside the plugin's two messages of a failed submission (run_job, 2.8.0)
SBATCH_WORDS = (
    re.compile(r"SLURM sbatch failed\. The error message was '(.*?)'\.\n", re.S),
    re.compile(r"SLURM job submission failed\. The error message was (.*)", re.S),
)


class PluginMismatch(RuntimeError):
    """The installed plugin is not the version this patch was written for."""


@dataclass
class _Asks:
    """One job's submission while the controller gives no verdict: when it began and the delays left."""

    started: float
    delays: Iterator[float]
    count: int = 1


@dataclass
class _State:
    window_s: float = 0.0
    asks: dict[tuple[int, int], _Asks] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    watch: stuck_jobs.Watch = field(default_factory=lambda: stuck_jobs.Watch(None))
    unanswered: dict[str, float] = field(default_factory=dict)  # job id -> since when no status came back
    failing: dict[str, float] = field(default_factory=dict)  # job id -> since when it read failed


_STATE = _State()


def sbatch_words(message: str) -> str | None:
    """sbatch's own answer inside the plugin's error message, or None where the error is not sbatch's."""
    for pattern in SBATCH_WORDS:
        match = pattern.search(message or "")
        if match:
            return match.group(1).strip()
    return None


def one_line(words: str, limit: int = 400) -> str:
    text = " ".join(words.split())
    return text if len(text) <= limit else text[:limit] + " ..."


def install(
    window_s: float, by_priority: bool = False, version: str | None = None, stuck_after_min: float | None = None
) -> None:
    """Wrap the plugin's report of a failed submission and its check of the active jobs (see the
    module's docstring); `window_s`: how long a job whose sbatch got no verdict is asked again
    (cluster.busy_retry_min); `by_priority`: submit each round's jobs highest priority first;
    `stuck_after_min`: cluster.stuck_after_min. Raises PluginMismatch, patching nothing, on a plugin
    version other than WRITTEN_FOR. Idempotent; the window and the bound are updated."""
    found = version or importlib.metadata.version(PLUGIN)
    if found != WRITTEN_FOR:
        raise PluginMismatch(
            f"scalebench's patch of {PLUGIN} (workflow/scripts/scalebench/config/slurm_plugin.py) was written for "
            f"{WRITTEN_FOR}, and {found} is installed: its submission code (Executor.run_job, "
            f"_report_job_error_threadsafe) may differ; install {PLUGIN}=={WRITTEN_FOR} (envs/pipeline.yaml) or "
            "check the patch against the new version and update WRITTEN_FOR"
        )
    from snakemake_executor_plugin_slurm import Executor

    _STATE.window_s = float(window_s)
    _STATE.watch.stuck_after_min = stuck_after_min
    if by_priority and not getattr(Executor.run_jobs, "by_priority", False):
        Executor.run_jobs = _by_priority(Executor.run_jobs)
    if not getattr(Executor.check_active_jobs, "scalebench", False):
        Executor.check_active_jobs = _watched_check(Executor.check_active_jobs)
    original = Executor._report_job_error_threadsafe
    if getattr(original, "scalebench", False):
        return

    def report_job_error_threadsafe(self, job_info, msg):
        if job_info.external_jobid is None:  # sbatch did not take it: the job never ran
            if ask_again(self, job_info.job, msg):
                return None
            settle(job_info.job)
        return original(self, job_info, msg)

    report_job_error_threadsafe.scalebench = True
    report_job_error_threadsafe.original = original
    Executor._report_job_error_threadsafe = report_job_error_threadsafe


def uninstall() -> None:
    """Put the plugin's own methods back (tests)."""
    from snakemake_executor_plugin_slurm import Executor

    wrapped = Executor._report_job_error_threadsafe
    if getattr(wrapped, "scalebench", False):
        Executor._report_job_error_threadsafe = wrapped.original
    if getattr(Executor.run_jobs, "by_priority", False):
        Executor.run_jobs = Executor.run_jobs.original
    if getattr(Executor.check_active_jobs, "scalebench", False):
        Executor.check_active_jobs = Executor.check_active_jobs.original
    _STATE.asks.clear()
    _STATE.unanswered.clear()
    _STATE.failing.clear()
    _STATE.watch = stuck_jobs.Watch(None)


def _by_priority(run_jobs):
    """The plugin's run_jobs, handed its jobs highest priority first (sorted() keeps ties as they came)."""

    def sorted_run_jobs(self, jobs):
        return run_jobs(self, sorted(jobs, key=lambda job: -job.priority))

    sorted_run_jobs.by_priority = True
    sorted_run_jobs.original = run_jobs
    return sorted_run_jobs


def settle(job) -> None:
    """Use up the job's attempts: a failure the rule's `retries` would only repeat is reported once."""
    job.attempt = job.restart_times + 1


TRAIN_RULES = ("train", "train_variant")
# how long a job must have read failed before its failure is reported (confirmed_failure)
CONFIRM_S = 10.0


def _watched_check(check_active_jobs):
    """The plugin's check of its active jobs, after the stuck train jobs among them were ended
    (end_stuck), keeping the jobs it lost track of (kept_unanswered) and those it read failed once
    (confirmed_failure)."""

    async def checked(self, active_jobs):
        ended = end_stuck(self, active_jobs)
        asked = [j for j in active_jobs if id(j) not in ended]
        answered: set[int] = set()
        deferred: list = []
        with _recording_reports(self, answered, deferred):
            async for job_info in check_active_jobs(self, asked):
                answered.add(id(job_info))
                _STATE.failing.pop(job_info.external_jobid, None)  # running or pending: requeued, if it failed
                yield job_info
        for job_info in deferred:
            yield job_info
        for job_info in kept_unanswered(self, asked, answered):
            yield job_info

    checked.scalebench = True
    checked.original = check_active_jobs
    return checked


@contextlib.contextmanager
def _recording_reports(executor, answered: set[int], deferred: list):
    """While the plugin checks its jobs, the id of each job it reports finished or failed goes to
    `answered`; a failure not yet confirmed (confirmed_failure) is not reported but kept in `deferred`."""
    reports = {name: getattr(executor, name) for name in ("report_job_success", "report_job_error")}
    own = {name: executor.__dict__[name] for name in reports if name in executor.__dict__}  # set on the instance

    def recorded(report, failure: bool):
        def report_and_record(job_info, *args, **kwargs):
            answered.add(id(job_info))
            if failure and not confirmed_failure(executor, job_info):
                deferred.append(job_info)
                return None
            return report(job_info, *args, **kwargs)

        return report_and_record

    for name, report in reports.items():
        setattr(executor, name, recorded(report, name == "report_job_error"))
    try:
        yield
    finally:
        for name in reports:
            executor.__dict__.pop(name, None)
        executor.__dict__.update(own)


def confirmed_failure(executor, job_info, now: Callable[[], float] = time.monotonic) -> bool:
    """Whether the plugin's failure of a submitted job stands: read failed at a check at least
    CONFIRM_S before this one, and not running or pending since. A job SLURM requeues (scontrol
    requeue, a preemption or a node failure under slurm-requeue) can read FAILED for a moment, when
    its batch script's failed exit reaches the controller before the requeue does: reported at once,
    Snakemake would submit the cell again while SLURM runs it again under its id."""
    if not job_info.external_jobid:
        return True
    moment = now()
    since = _STATE.failing.setdefault(job_info.external_jobid, moment)
    if moment - since >= CONFIRM_S:
        _STATE.failing.pop(job_info.external_jobid)
        return True
    if moment == since:  # said once per job
        executor.logger.warning(
            f"SLURM job {job_info.external_jobid} reads failed: reported once a later check confirms it "
            f"(at least {CONFIRM_S:g} s on), as a job SLURM requeues can read failed for a moment"
        )
    return False


def kept_unanswered(executor, asked: list, answered: set[int], now: Callable[[], float] = time.monotonic) -> list:
    """The jobs of `asked` that the plugin neither yielded as still running nor reported: where every
    one of its status queries failed (a busy controller: squeue or sacct timed out `status_attempts`
    times in a row) it yields none, and Snakemake, which keeps only the yielded jobs, would wait for
    their outcome for ever. They stay active and are asked about again at the next check, for
    cluster.busy_retry_min; a job without an answer for longer is reported failed (its retry, if any,
    waits for a live job of the cell: cluster/cell_holder.py)."""
    unanswered = _STATE.unanswered
    for job_info in asked:
        if id(job_info) in answered:
            unanswered.pop(job_info.external_jobid, None)
    kept, moment = [], now()
    for job_info in (j for j in asked if id(j) not in answered):
        since = unanswered.setdefault(job_info.external_jobid, moment)
        if moment - since <= _STATE.window_s:
            kept.append(job_info)
            continue
        unanswered.pop(job_info.external_jobid)
        executor.report_job_error(
            job_info,
            msg=f"SLURM job {job_info.external_jobid}: no status from the controller for "
            f"{(moment - since) / 60:.1f} min (cluster.busy_retry_min): reported failed",
        )
    if kept:
        executor.logger.warning(
            f"the SLURM plugin's status query got no answer on {len(kept)} job(s) (the controller busy?): "
            "kept as running, asked again at the next check"
        )
    return kept


def end_stuck(
    executor,
    active_jobs: list,
    read: Callable[[list[str]], str] = stuck_jobs.squeue,
    end: Callable[[stuck_jobs.Job], None] = stuck_jobs.end_job,
    now: Callable[[], float] = time.monotonic,
) -> set[int]:
    """End the train jobs among `active_jobs` (the plugin's SubmittedJobInfo) that sat stuck past their
    bound: each one's cell folder marked (stuck_jobs.Ended), the job ended, reported failed with its
    attempts used up. The ids (id()) of those ended; none where squeue gives no answer (the next check asks again)."""
    train = {info.external_jobid: info for info in active_jobs if info.external_jobid and info.job.name in TRAIN_RULES}
    if not train:
        return set()
    try:
        jobs = stuck_jobs.parse_squeue(read(list(train)))
    except (OSError, subprocess.SubprocessError) as error:
        executor.logger.warning(
            f"squeue gave no answer on the train jobs' states ({error}); asked again at the next check"
        )
        return set()
    ended = set()
    for job, found in _STATE.watch.overdue(jobs, now()):
        info = train[job.job_id]
        folder = Path(info.job.output[0]).parent
        stuck_jobs.write_mark(folder, found)
        end(job)
        settle(info.job)  # a retry would wait for the same again
        executor.report_job_error(
            info, msg=f"{folder}: {found.describe()}; the cell is listed as {found.status}, not retried in this run. "
        )
        ended.add(id(info))
    return ended


def ask_again(executor, job, message: str, now=time.monotonic) -> bool:
    """Whether the failed submission of `job` is asked again later (scheduled here, logged); False where
    it ends now: a refusal, an error that is not sbatch's, or cluster.busy_retry_min used up."""
    words = sbatch_words(message)
    if words is None:
        return False
    answer = slurm_answers.classify(words)
    if answer.kind == slurm_answers.REFUSED:
        executor.logger.error(f"sbatch refused {describe(job)} ({answer.means}): not resubmitted")
        return False
    key = (job.jobid, job.attempt)
    with _STATE.lock:
        asks = _STATE.asks.setdefault(key, _Asks(now(), slurm_answers.delays(_STATE.window_s)))
        delay = next(asks.delays, None)
        if delay is None:
            del _STATE.asks[key]
        else:
            asks.count += 1
    if delay is None:
        executor.logger.error(
            f"sbatch got no verdict on {describe(job)} within cluster.busy_retry_min ({_STATE.window_s / 60:g} min, "
            f"{asks.count} asks; last answer: {one_line(words)}): the job ends"
        )
        return False
    executor.logger.warning(
        f"sbatch got no verdict on {describe(job)} ({answer.means}: {one_line(words)}); asking again in "
        f"{delay:.0f} s (ask {asks.count}, {now() - asks.started:.0f} s of cluster.busy_retry_min's "
        f"{_STATE.window_s:.0f} s used; the rule's retries are not used)"
    )
    timer = threading.Timer(delay, _submit_again, args=(executor, job))
    timer.daemon = True
    timer.start()
    return True


def _submit_again(executor, job) -> None:
    try:
        executor._job_submission_executor.submit(executor.run_job, job)
    except RuntimeError:  # the plugin's pool is shut down: Snakemake is ending
        pass


def describe(job) -> str:
    """The job as the log names it: its rule, Snakemake id and wildcards."""
    wildcards = getattr(job, "wildcards_dict", None) or {}
    named = ", ".join(f"{key}={value}" for key, value in wildcards.items())
    return f"rule {job.name} (jobid {job.jobid}{', ' + named if named else ''})"
