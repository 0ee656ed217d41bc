"""One copy of a cell at a time: which job holds a cell's folder, and what a job does that finds it held.

A cell's records and checkpoint have one writer. A second job of the same cell starts when
Snakemake is restarted while its jobs still run (a dropped login session: its SLURM jobs, and
locally the processes it started, live on), when two Snakemake instances run one study, or when
SLURM requeues a job. launch.py takes the cell before anything else (`hold`); a job that finds the
cell held by another live job trains nothing beside it: it waits, then adopts that job's outcome
(launch/launcher.py).

The holders are numbered generations in the cell's folder, `.holders/<n>.json`: the holder of a
cell is the highest one. A job takes generation n + 1 by creating its file, which succeeds for
exactly one job (a hard link, refused where the name exists, also over NFS), and only once it
finds generation n no longer live:

- released: the holder wrote so at its end;
- locked: the holder process keeps an flock on its file while it lives (the kernel drops it when
  the process ends however it ends), seen from any process of the host, and across nodes where
  the shared file system passes flocks on;
- its SLURM job pending or running: squeue's state, else sacct's (a requeued job is its own
  successor: the same job id takes the next generation). A cell without holders whose run.json
  says it is running (trained by a version before the holders) is held by the SLURM job that
  run.json names, as generation 0. A job that squeue and sacct no longer
  know (purged accounting, another cluster) is not running: the waiting job says so, naming it,
  and goes on, never waiting for it forever. A controller that does not answer is asked again for
  at most PATIENCE_S.

The holder also keeps its train.log under a second name (`.holders/<n>.log`), since the next job's
Snakemake removes the log's name with the outputs; the job that adopts an outcome prints that log.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from scalebench.cluster import slurm_answers
from scalebench.records import store

FOLDER = ".holders"
RUNNING = "running"  # run.json's status while its job trains (train/provenance.py)
POLL_S = 5.0  # between two looks at a live holder
PATIENCE_S = 600.0  # how long a controller that does not answer squeue is asked about a holder
TIMEOUT_S = 60
# SLURM states of a job that still holds (or will hold again) its cell
LIVE_STATES = {
    "PENDING",
    "RUNNING",
    "CONFIGURING",
    "COMPLETING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESIZING",
    "SUSPENDED",
    "STOPPED",
    "SIGNALING",
    "STAGE_OUT",
    "RESV_DEL_HOLD",
    "SPECIAL_EXIT",
}


@dataclass(frozen=True)
class Holder:
    """The job that holds (or held) a cell: its generation, SLURM job id (None locally), host and process."""

    generation: int
    slurm_job_id: str | None
    host: str
    pid: int
    since: str
    released: bool = False

    def describe(self) -> str:
        if self.slurm_job_id:
            return f"SLURM job {self.slurm_job_id}"
        return f"process {self.pid} on {self.host}"


@dataclass(frozen=True)
class Held:
    """What `hold` found: this job's own generation, the live holder it waited for (None where the
    cell was free), and the one before this job (None for a cell never held)."""

    mine: Holder
    waited_for: Holder | None
    previous: Holder | None
    folder: Path

    @property
    def log(self) -> Path:
        return self.folder / f"{self.mine.generation}.log"

    def previous_log(self) -> Path | None:
        if self.previous is None:
            return None
        path = self.folder / f"{self.previous.generation}.log"
        return path if path.exists() else None


class SlurmUnanswered(RuntimeError):
    """squeue gave no verdict (a busy or unreachable controller)."""


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def holder_path(folder: Path, generation: int) -> Path:
    return folder / f"{generation}.json"


def latest(folder: Path) -> Holder | None:
    """The highest generation's holder in `folder` (None where the cell was never held)."""
    generations = sorted((int(p.stem) for p in folder.glob("*.json") if p.stem.isdigit()), reverse=True)
    for generation in generations:
        try:
            return Holder(**json.loads(holder_path(folder, generation).read_text()))
        except (OSError, ValueError, TypeError):  # a file of another version: the next one down
            continue
    return None


def recorded_holder(out: Path) -> Holder | None:
    """The SLURM job the cell's run.json names while it says the cell is running, as generation 0
    (None where it names none, or the cell ended)."""
    try:
        run = store.read_run(Path(out) / "run.json")
    except (OSError, ValueError):
        return None
    if not isinstance(run, dict) or run.get("status") != RUNNING:
        return None
    job = (run.get("slurm") or {}).get("job_id")
    hosts = run.get("hosts") or ["?"]
    return Holder(0, str(job), str(hosts[0]), 0, str(run.get("start", ""))) if job else None


def current_holder(out: Path) -> Holder | None:
    """The cell's holder: the highest generation of its holders, else the job its run.json names."""
    folder = Path(out) / FOLDER
    return (latest(folder) if folder.is_dir() else None) or recorded_holder(Path(out))


def locked(path: Path) -> bool | None:
    """Whether a live process holds the flock of `path` (its holder); None where the file system
    takes no flocks (Lustre mounted without them), so it cannot tell."""
    try:
        handle = open(path)
    except FileNotFoundError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as error:
            return True if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN) else None
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def process_alive(holder: Holder) -> bool:
    """Whether the holder's process still runs on this host (where flocks cannot tell)."""
    if holder.host != socket.gethostname() or holder.pid <= 0:
        return False
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def slurm_job_state(job_id: str, run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> str | None:
    """SLURM's state of `job_id`: squeue's, else sacct's; None where neither knows the job. Raises
    SlurmUnanswered where squeue got no verdict from the controller."""
    try:
        queued = run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=TIMEOUT_S)
    except FileNotFoundError:
        return None
    except subprocess.SubprocessError as error:
        raise SlurmUnanswered(f"squeue did not answer: {error}") from error
    state = queued.stdout.strip().split()
    if queued.returncode == 0 and state:
        return state[0]
    words = " ".join((queued.stderr + queued.stdout).split())
    if queued.returncode and "Invalid job id" not in words:
        if slurm_answers.classify(words).kind == slurm_answers.BUSY:
            raise SlurmUnanswered(words)
    try:
        accounted = run(
            ["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"], capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except (OSError, subprocess.SubprocessError):
        return None
    states = (
        [line.strip() for line in accounted.stdout.splitlines() if line.strip()] if accounted.returncode == 0 else []
    )
    return states[-1] if states else None  # a requeued job's last run


def liveness(
    holder: Holder | None,
    folder: Path,
    job_id: str | None,
    state_of: Callable[[str], str | None] = slurm_job_state,
) -> tuple[bool, str]:
    """(whether `holder`, of the holders' `folder`, still holds the cell, why): a warning where it is
    taken as not running without knowing, else a short reason."""
    if holder is None:
        return False, ""
    if holder.released:
        return False, ""
    lock = locked(holder_path(folder, holder.generation))
    if lock:
        return True, "its process holds the cell's lock"
    if holder.slurm_job_id:
        if holder.slurm_job_id == job_id:  # this very job, started again (scontrol requeue, preemption)
            return False, ""
        state = state_of(holder.slurm_job_id)
        if state is None:
            return False, (
                f"warning: the cell was held by SLURM job {holder.slurm_job_id}, which squeue and sacct no "
                "longer know (purged from accounting, or another cluster's): taken as not running"
            )
        state = state.split()[0].rstrip("+")  # sacct: "CANCELLED by 0", "RUNNING+"
        return state in LIVE_STATES, f"SLURM says {state}"
    if lock is None and process_alive(holder):  # no flocks here: its process id on this host
        return True, "its process runs"
    return False, ""  # a local process that holds no lock has ended


def create(folder: Path, generation: int, job_id: str | None) -> tuple[Holder, IO] | None:
    """Take `generation` of the cell: its file written whole and locked, then linked into place,
    which fails where another job took it first (None then). The open, locked file is returned
    for the caller to keep while it lives."""
    holder = Holder(generation, job_id, socket.gethostname(), os.getpid(), now_iso())
    temporary = folder / f".{generation}.json.tmp{os.getpid()}"
    handle = open(temporary, "w")
    try:
        handle.write(json.dumps(asdict(holder), sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
        try:  # locked before it has its name: never seen unlocked while live
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError:  # a file system without flocks: the holder's job state or process id tell
            pass
        try:
            os.link(temporary, holder_path(folder, generation))
        except FileExistsError:
            handle.close()
            return None
    finally:
        temporary.unlink(missing_ok=True)
    return holder, handle


_KEPT: list[IO] = []  # this process's holder file, locked until it exits


def hold(
    out: str | Path,
    job_id: str | None,
    say: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
    state_of: Callable[[str], str | None] = slurm_job_state,
    poll_s: float = POLL_S,
) -> Held:
    """Take the cell of folder `out` for this job (`job_id`: its SLURM job id, None locally), waiting
    while another live job holds it; each step said through `say`."""
    folder = Path(out) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    waited_for: Holder | None = None
    unanswered_since: float | None = None
    while True:
        current = current_holder(Path(out))
        try:
            live, why = liveness(current, folder, job_id, state_of)
            unanswered_since = None
        except SlurmUnanswered as error:
            if unanswered_since is None:  # said once per stretch without an answer
                unanswered_since = time.monotonic()
                say(f"the cell's holder {current.describe()}: SLURM gave no answer ({error}); asking again")
            if time.monotonic() - unanswered_since < PATIENCE_S:
                sleep(poll_s)
                continue
            live, why = (
                False,
                f"warning: SLURM gave no answer about {current.describe()} for {PATIENCE_S:.0f} s: taken as not running",
            )
        if live:
            if waited_for is None or (waited_for.generation, waited_for.slurm_job_id) != (
                current.generation,
                current.slurm_job_id,
            ):  # the first holder, or another job that took the cell while this one waited
                say(
                    f"the cell is held by {current.describe()} ({why}): this job waits for it and trains nothing "
                    "beside it, then adopts its outcome"
                )
                waited_for = current
            sleep(poll_s)
            continue
        if why.startswith("warning"):
            say(why)
        taken = create(folder, (current.generation if current else 0) + 1, job_id)
        if taken is None:
            continue  # another job took the next generation first: look at it
        mine, handle = taken
        _KEPT.append(handle)
        return Held(mine, waited_for, current, folder)


def live_holder(out: str | Path, state_of: Callable[[str], str | None] = slurm_job_state) -> Holder | None:
    """The live job that holds the cell of folder `out`, at one look (None: free, or SLURM did not answer)."""
    folder = Path(out) / FOLDER
    current = current_holder(Path(out))
    try:
        live, _ = liveness(current, folder, None, state_of)
    except SlurmUnanswered:
        return None
    return current if live else None


def release(held: Held) -> None:
    """Say the cell is free: this job's holder file marked released (the lock goes with the process)."""
    path = holder_path(held.folder, held.mine.generation)
    temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
    temporary.write_text(json.dumps(asdict(replace(held.mine, released=True)), sort_keys=True) + "\n")
    os.replace(temporary, path)


def keep_log(held: Held, log: Path) -> bool:
    """Keep this job's log (the file its standard output goes to, when that is `log`) under the
    holder's name too, so removing the log's name does not lose it; whether it was kept."""
    try:
        if not os.path.samestat(os.fstat(1), os.stat(log)):
            return False
        os.link(log, held.log)
    except OSError:
        return False
    return True
