"""A study that never waits for ever: the cells whose SLURM job sits in a state that will not end by itself.

The SLURM executor plugin (2.8.0) polls every job it does not see in a final state it knows as
still running: a held job (PENDING for JobHeldUser, JobHeldAdmin or a requeue in held state,
REQUEUE_HOLD, SPECIAL_EXIT), a
SUSPENDED one, one PREEMPTED under PreemptMode=CANCEL (final there, and still polled), or a state
neither it nor this project knows. Snakemake would wait for such a job for ever.

Each time the plugin checks its jobs, the study's Snakemake reads its train jobs' states and
reasons from squeue first (config/slurm_plugin.py wraps the check; `Watch` here keeps since when
each job sat in such a state): a job that sat longer than `cluster.stuck_after_min` (default: the
job's own time limit, as squeue gives it) is ended. The cell's folder gets `.ended.json` (`Ended`:
what happened, `held`, `suspended`, `preempted` or `stuck` for a state the project never saw, with
the SLURM state, its reason and how long it sat), the job is cancelled (a preempted one has ended
already) and reported failed with its attempts used up: no retry of this run waits for it again,
and the rest of the study goes on. runs.csv reads the mark as the cell's status with its reason,
and the report lists the cell among the incomplete ones with the command that reruns it; the next
run of the cell removes the mark (launch.py) and trains it.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from scalebench import files

MARK = ".ended.json"
# states that end by themselves, or that are ended already: not stuck
MOVING = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SIGNALING", "STAGE_OUT"}
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
# the states that will not end by themselves, and what the cell's record calls each
STUCK = {
    "SUSPENDED": "suspended",
    "STOPPED": "suspended",
    "PREEMPTED": "preempted",
    "REQUEUE_HOLD": "held",
    "REQUEUE_FED": "held",
    "SPECIAL_EXIT": "held",
    "RESV_DEL_HOLD": "held",
}
# a PENDING job held: it waits for a release that may never come (a requeued-and-held job's reason is
# "job requeued in held state" in squeue, job_requeued_in_held_state in scontrol)
HELD_REASONS = ("JobHeldUser", "JobHeldAdmin", "job requeued in held state", "job_requeued_in_held_state")
UNKNOWN = "stuck"  # a state neither the plugin nor this project knows
SQUEUE_FORMAT = "%i|%T|%r|%l"  # job id, state, reason, time limit


@dataclass(frozen=True)
class Job:
    """One line of squeue: a job of the user's."""

    job_id: str
    state: str
    reason: str
    time_limit_s: float | None


def parse_time_limit(text: str) -> float | None:
    """squeue's %l ('1-02:03:04', '2:03:04', '03:04', 'UNLIMITED') in seconds; None where unlimited or unreadable."""
    days, _, clock = text.strip().rpartition("-")
    parts = clock.split(":")
    try:
        numbers = [int(part) for part in parts]
        whole_days = int(days) if days else 0
    except ValueError:
        return None
    while len(numbers) < 3:
        numbers.insert(0, 0)
    hours, minutes, seconds = numbers[-3:]
    return float(((whole_days * 24 + hours) * 60 + minutes) * 60 + seconds)


def parse_squeue(text: str) -> list[Job]:
    """The jobs of `squeue -h -o SQUEUE_FORMAT` output (a line that does not parse is left out)."""
    jobs = []
    for line in text.splitlines():
        parts = line.split("|", 3)
        if len(parts) != 4 or not parts[0].strip() or not parts[1].strip():
            continue
        job_id, state, reason, limit = (part.strip() for part in parts)
        jobs.append(Job(job_id, state.split()[0].rstrip("+"), reason, parse_time_limit(limit)))
    return jobs


def stuck_status(job: Job) -> str | None:
    """What the cell's record calls the job's state where it will not end by itself; None where it will."""
    if job.state == "PENDING":
        return "held" if job.reason.startswith(HELD_REASONS) else None
    if job.state in MOVING or job.state in FINAL:
        return None
    return STUCK.get(job.state, UNKNOWN)


@dataclass(frozen=True)
class Ended:
    """A cell's .ended.json: its job ended by the study, and why."""

    status: str  # held, suspended, preempted or stuck
    state: str  # SLURM's
    reason: str  # SLURM's reason for the state
    job_id: str
    stuck_s: float
    bound_s: float
    at: str

    def describe(self) -> str:
        reason = f" ({self.reason})" if self.reason and self.reason not in ("None", "(null)") else ""
        return (
            f"SLURM job {self.job_id} sat {self.stuck_s / 60:.1f} min in state {self.state}{reason}, "
            f"longer than cluster.stuck_after_min ({self.bound_s / 60:.1f} min): ended by the study"
        )


def read_mark(folder: str | Path) -> Ended | None:
    """The cell folder's Ended, None where it has none (or an unreadable one)."""
    try:
        return Ended(**json.loads((Path(folder) / MARK).read_text()))
    except (OSError, TypeError, ValueError):
        return None


def write_mark(folder: str | Path, ended: Ended) -> None:
    Path(folder).mkdir(parents=True, exist_ok=True)
    files.write_json_atomic(Path(folder) / MARK, asdict(ended))


def clear_mark(folder: str | Path) -> None:
    (Path(folder) / MARK).unlink(missing_ok=True)


def bound_s(job: Job, stuck_after_min: float | None) -> float | None:
    """How long `job` may sit stuck: cluster.stuck_after_min, else its time limit (None: unlimited, never ended)."""
    return stuck_after_min * 60 if stuck_after_min is not None else job.time_limit_s


class Watch:
    """The study's train jobs over successive squeue readings: since when each has sat in a state that
    will not end by itself (a job that moves on, or changes state, starts afresh), and which have sat
    longer than their bound."""

    def __init__(self, stuck_after_min: float | None) -> None:
        self.stuck_after_min = stuck_after_min
        self.since: dict[str, tuple[str, float]] = {}  # job id: (state and reason, since)

    def overdue(self, jobs: list[Job], now: float) -> list[tuple[Job, Ended]]:
        """(job, its Ended) for each job of this reading past its bound (`now`: a monotonic clock)."""
        found = []
        seen = set()
        for job in jobs:
            status = stuck_status(job)
            if status is None:
                continue
            seen.add(job.job_id)
            key = f"{job.state} {job.reason}"
            if self.since.get(job.job_id, (None,))[0] != key:
                self.since[job.job_id] = (key, now)
            limit = bound_s(job, self.stuck_after_min)
            stuck = now - self.since[job.job_id][1]
            if limit is not None and stuck >= limit:
                at = datetime.now(UTC).isoformat(timespec="seconds")
                found.append((job, Ended(status, job.state, job.reason, job.job_id, stuck, limit, at)))
        self.since = {job_id: value for job_id, value in self.since.items() if job_id in seen}
        return found


def squeue(job_ids: Iterable[str]) -> str:
    """squeue's lines (SQUEUE_FORMAT) of the jobs `job_ids` that SLURM still knows."""
    command = ["squeue", "-h", "--me", "--states=all", "-o", SQUEUE_FORMAT]
    listed = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout
    wanted = set(job_ids)
    return "\n".join(line for line in listed.splitlines() if line.split("|", 1)[0].strip() in wanted)


def end_job(job: Job) -> None:
    """Cancel the job (a preempted one has ended already: the plugin would poll it for ever)."""
    if job.state != "PREEMPTED":
        subprocess.run(["scancel", job.job_id], capture_output=True, text=True, timeout=60)
