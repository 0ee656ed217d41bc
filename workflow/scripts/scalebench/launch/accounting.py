"""What a cell's job held, and what SLURM itself accounts for it: the job's wall, the ranks' step's
energy and the allocation's GPU-hours.

launch.py reads them after the ranks (their srun step) have ended and adds them to run.json
(ACCOUNTING_FIELDS), beside the training loop's own figures, which they do not replace:

- job_s: the cell's job wall, what it costs (GPUs x job_s: runs.csv's gpu_hours) and what the bill
  predicts. In a SLURM job, SLURM's elapsed (scontrol's RunTime when the ranks have ended, source
  "slurm elapsed"); locally, launch.py's own process from its start (psutil's create_time: before
  any import, and before the ranks', whether one rank starts directly or torchrun starts them) to
  the ranks' end (source "launch"), as in a SLURM job that ran other work for minutes before this
  process (a workflow inside one salloc: its elapsed is not the cell's). run.json's start is rank 0's, after its framework's imports, so
  it measures less, and differently for a one-rank cell and a torchrun one; job_s spans the same in
  both. A resumed cell (requeued, or retried after its job was killed) sums its attempts: the one
  before left its job_s in run.json (job_attempts counts them); where it left none (killed before
  launch.py could record it, or a version before job_s) job_s is empty with the reason, since what
  that attempt held is not known.

- step_energy_j: the step's ConsumedEnergyRaw from ``sacct`` (source "sacct"), in joules, as
  the cluster's AcctGatherEnergyType measures it (ipmi: whole nodes; rapl: CPU packages; gpu:
  the GPUs; recorded as step_energy_plugin). It spans the whole step (start-up, epochs,
  evaluation, checkpoints), where energy_j spans the epochs only. Empty with the reason where
  the cluster has no accounting or gathers no energy: sacct's 0 (and its empty field) means
  "not measured", never 0 J.
- alloc_gpu_hours: the GPUs of the allocation x its run time so far (scontrol's RunTime, read
  when the step has ended), in hours: what the cell held, where gpu_hours is the epochs' share.
  Empty with the reason outside SLURM or where the allocation holds no GPUs.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from scalebench.cluster.slurm import SlurmError, oneliner_fields, scontrol
from scalebench.records import store

ACCOUNTING_FIELDS = (
    "job_s",
    "job_s_source",
    "job_attempts",
    "job_s_reason",
    "alloc_gpu_hours",
    "alloc_gpu_hours_reason",
    "step_energy_j",
    "step_energy_source",
    "step_energy_plugin",
    "step_energy_reason",
)
NOT_SLURM = "not a SLURM job (a local run)"
SLURM_ELAPSED, LAUNCH_CLOCK = "slurm elapsed", "launch"
# A SLURM job whose elapsed exceeds launch.py's own age by more than this ran other work before the
# cell (the whole workflow inside one salloc): the cell's job wall is launch.py's clock then.
SHARED_ALLOCATION_S = 300.0
NONE_BEFORE = "it recorded none (killed before launch.py could, or a version before job_s)"
UNSET_PLUGINS = ("", "(null)", "none")
# A finished step's accounting reaches slurmdbd shortly after the step ends.
SACCT_WAIT_S = 30.0
SACCT_POLL_S = 2.0


def run_time_s(text: str) -> int | None:
    """Seconds of scontrol's RunTime ("[D-]HH:MM:SS"); None for anything else (INVALID)."""
    match = re.fullmatch(r"(?:(\d+)-)?(\d+):(\d\d):(\d\d)", text.strip())
    if not match:
        return None
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def gres_gpus(gres: str) -> int:
    """GPUs in a GRES list such as scontrol's JOB_GRES ("gpu:a100:4", "gpu:2(IDX:0-1),shard:4"):
    the untyped count where one is listed, else the typed counts summed."""
    untyped, typed = 0, 0
    for entry in re.sub(r"\([^)]*\)", "", gres).split(","):
        parts = entry.strip().split(":")
        if parts[0] != "gpu" or len(parts) < 2 or not parts[-1].isdigit():
            continue
        if len(parts) == 2:
            untyped = max(untyped, int(parts[1]))
        else:
            typed += int(parts[-1])
    return untyped or typed


def allocated_gpus(job: dict[str, str]) -> int:
    """GPUs of an allocation from `scontrol show job -d --oneliner` fields: AllocTRES's gres/gpu
    (tracked where AccountingStorageTRES names it), else JOB_GRES (the allocated GRES)."""
    tres = dict(item.split("=", 1) for item in job.get("AllocTRES", "").split(",") if "=" in item)
    if tres.get("gres/gpu", "").isdigit():
        return int(tres["gres/gpu"])
    return gres_gpus(job.get("JOB_GRES", ""))


def allocation_gpu_hours(job: dict[str, str]) -> tuple[float | None, str]:
    """(GPU-hours of the allocation so far, "") or (None, why not) from scontrol's job fields."""
    gpus = allocated_gpus(job)
    if not gpus:
        return None, "the allocation holds no GPUs (neither AllocTRES nor JOB_GRES names one)"
    seconds = run_time_s(job.get("RunTime", ""))
    if seconds is None:
        return None, f"scontrol's RunTime {job.get('RunTime')!r} is not a run time"
    return gpus * seconds / 3600, ""


def own_start() -> float:
    """When this process started (seconds since the epoch): before its imports, and the ranks'."""
    import psutil

    return psutil.Process().create_time()


def job_wall(
    job: dict[str, str] | None, began: float, now: float, prior: dict | None, resumed_from: int | None
) -> dict:
    """job_s, job_s_source, job_attempts and job_s_reason of the attempt that ends `now`: SLURM's
    RunTime from `job` (scontrol's fields of the cell's job; None outside SLURM, or unreadable:
    this process's clock from `began` then), summed with the attempt before (`prior`: run.json as it
    was before the ranks started) where the ranks resumed after epoch `resumed_from`."""
    seconds = run_time_s(job.get("RunTime", "")) if job else None
    own = max(now - began, 0.0)
    source = SLURM_ELAPSED
    if seconds is None or seconds - own > SHARED_ALLOCATION_S:
        # no job, or one that ran long before this process: an allocation of several cells (salloc)
        seconds, source = own, LAUNCH_CLOCK
    found = {"job_s": float(seconds), "job_s_source": source, "job_attempts": 1, "job_s_reason": None}
    if resumed_from is None:
        return found
    before = (prior or {}).get("job_s")
    if not isinstance(before, int | float) or isinstance(before, bool):
        why = (prior or {}).get("job_s_reason") or NONE_BEFORE
        return {
            "job_s": None,
            "job_s_source": None,
            "job_attempts": None,
            "job_s_reason": f"resumed after epoch {resumed_from}: the attempt before left no job wall ({why}); "
            f"this attempt's alone was {seconds:.1f} s",
        }
    attempts = (prior or {}).get("job_attempts") or 1
    return {**found, "job_s": float(before) + found["job_s"], "job_attempts": int(attempts) + 1}


def config_values(text: str) -> dict[str, str]:
    """`scontrol show config` as a dict ("Key = value" lines)."""
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^(\w+)\s*=\s*(.*)$", text, re.MULTILINE)}


def energy_problem(config: dict[str, str]) -> str:
    """Why this cluster cannot account a step's energy ("" where it can)."""
    storage = config.get("AccountingStorageType", "")
    if storage.rsplit("/", 1)[-1] in UNSET_PLUGINS:
        return f"no accounting: AccountingStorageType is {storage or 'unset'}, so sacct has no steps"
    gather = config.get("AcctGatherEnergyType", "")
    if gather.rsplit("/", 1)[-1] in UNSET_PLUGINS:
        return f"the cluster gathers no energy: AcctGatherEnergyType is {gather or 'unset'}"
    return ""


def parse_step_energy(text: str, step: str) -> tuple[float | None, str] | None:
    """`sacct -j <step> -n -P --format=ConsumedEnergyRaw,State` -> (joules, "") or (None, why);
    None while the step is not accounted as ended yet. SLURM prints 0 (or nothing) where no
    energy was gathered: that is "not measured", never 0 J."""
    lines = [line.split("|") for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    raw, state = (lines[0] + ["", ""])[:2]
    if state.split()[0:1] in (["RUNNING"], ["PENDING"], ["REQUEUED"]):
        return None
    if raw.strip().isdigit() and int(raw) > 0:
        return float(raw), ""
    return None, f"sacct reports no energy for step {step} (ConsumedEnergyRaw {raw.strip() or 'empty'}: not measured)"


def _sacct(step: str) -> str:
    result = subprocess.run(
        ["sacct", "-j", step, "-n", "-P", "--format=ConsumedEnergyRaw,State"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if result.returncode:
        raise SlurmError(f"sacct -j {step} failed: {result.stderr.strip()}")
    return result.stdout


def step_energy(
    step: str,
    config: dict[str, str],
    sacct: Callable[[str], str] = _sacct,
    wait_s: float = SACCT_WAIT_S,
    poll_s: float = SACCT_POLL_S,
) -> tuple[float | None, str]:
    """The joules SLURM accounted to job step `step` ("<job>.<step>"), or (None, why not)."""
    problem = energy_problem(config)
    if problem:
        return None, problem
    deadline = time.monotonic() + wait_s
    while True:
        try:
            answer = parse_step_energy(sacct(step), step)
        except (OSError, subprocess.TimeoutExpired, SlurmError) as error:
            return None, f"sacct cannot read step {step}: {error}"
        if answer is not None:
            return answer
        if time.monotonic() >= deadline:
            return None, f"sacct had not accounted step {step} as ended {wait_s:.0f} s after it ended"
        time.sleep(poll_s)


def read(job_id: str | None, step_id: str | None, job: dict[str, str] | None = None) -> dict:
    """The SLURM part of ACCOUNTING_FIELDS (no job_s) of the job `job_id` whose ranks ran as step
    `step_id` (None: no SLURM job); `job`: its scontrol fields where read already (None: not readable)."""
    fields = dict.fromkeys(field for field in ACCOUNTING_FIELDS if not field.startswith("job_"))
    if not job_id:
        return {**fields, "alloc_gpu_hours_reason": NOT_SLURM, "step_energy_reason": NOT_SLURM}
    try:
        if job is None:
            job = job_fields(job_id)
        fields["alloc_gpu_hours"], reason = allocation_gpu_hours(job)
    except SlurmError as error:
        reason = str(error)
    fields["alloc_gpu_hours_reason"] = reason or None
    try:
        config = config_values(scontrol("show", "config"))
    except SlurmError as error:
        fields["step_energy_reason"] = str(error)
        return fields
    plugin = config.get("AcctGatherEnergyType", "")
    fields["step_energy_plugin"] = plugin if plugin.rsplit("/", 1)[-1] not in UNSET_PLUGINS else None
    if step_id is None:
        fields["step_energy_reason"] = f"the ranks recorded no step of SLURM job {job_id} (not started by srun?)"
        return fields
    fields["step_energy_j"], reason = step_energy(f"{job_id}.{step_id}", config)
    fields["step_energy_source"] = "sacct" if fields["step_energy_j"] is not None else None
    fields["step_energy_reason"] = reason or None
    return fields


def job_fields(job_id: str) -> dict[str, str]:
    """scontrol's fields of the job (SlurmError where it cannot say)."""
    return oneliner_fields(scontrol("show", "job", "-d", "--oneliner", job_id))


def record(
    run_json: str | Path, job_id: str | None, began: float | None = None, prior: dict | None = None
) -> dict | None:
    """Add ACCOUNTING_FIELDS to a cell's run.json after its ranks ended (None where they wrote none).
    `began`: when launch.py's process started (default: this process's start); `prior`: run.json as
    it was before the ranks started (the attempt before, for a resumed cell). The step is the one
    rank 0 recorded (slurm.step_id), if it ran in this job: a run.json left by an earlier job names
    that job's step."""
    now = time.time()
    run = store.read_run(run_json)
    if run is None:
        return None
    slurm = run.get("slurm") or {}
    step = slurm.get("step_id") if job_id and slurm.get("job_id") == job_id else None
    job = None
    if job_id:
        try:
            job = job_fields(job_id)
        except SlurmError:
            job = None  # read() says why; the job's wall falls back to this process's clock
    resumed = run.get("resumed_from_epoch")
    fields = job_wall(job, own_start() if began is None else began, now, prior, resumed)
    fields |= read(job_id, step, job)
    run.update(fields)
    store.write_run(run_json, run)
    return fields
