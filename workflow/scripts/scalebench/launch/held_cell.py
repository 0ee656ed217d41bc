"""What launch.py does with a cell that another job held (cluster/cell_holder.py): adopt its outcome,
or go on from its checkpoint as a retry would.

A job that waited for another one of its cell adopts that job's outcome where it finished the
cell (status ok, diverged, oom or refused, with its final record) with this job's own settings:
it restores the records' names that its own Snakemake removed (records/store.py), prints the
other job's log, and ends successfully without training. Where the other job failed, was
cancelled or lost its node, this job trains, and the loop resumes from the cell's checkpoint.

Under SLURM a job trains only in an allocation that holds what the cell's job asks for
(`allocation_shortfall`): the job of a cell that a live job held when it was submitted asks only
for what waiting takes (one task of one CPU, no GPU: config/resources.py, waiting_resources). Where
the job it waited for ended without finishing, it ends failed, touching no record, and Snakemake's
retry submits the cell with its whole allocation, which resumes from the checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path

from scalebench import records
from scalebench.cluster import cell_holder, slurm
from scalebench.launch import accounting
from scalebench.records import store


def finished_status(out: Path, settings: dict) -> str | None:
    """The status of the cell in `out` where its records say it finished with `settings`; else None."""
    run = store.read_run(out / "run.json")
    text = store.read_text(out / "metrics.jsonl") or ""
    lines = [json.loads(line) for line in text.splitlines() if line.strip().endswith("}")]
    if not run or run.get("status") not in records.FINISHED_STATUSES or run.get("settings") != settings:
        return None
    return run["status"] if any(line.get("type") == "final" for line in lines) else None


def adopt(held: cell_holder.Held, out: str | Path, settings: dict) -> bool:
    """After waiting for `held.waited_for`: whether its outcome is this job's (said, with its log)."""
    out = Path(out)
    other = held.waited_for.describe()
    restored = store.restore(out)
    status = finished_status(out, settings)
    if status is None:
        run = store.read_run(out / "run.json") or {}
        print(
            f"launch: {other} ended without finishing the cell (run.json says {run.get('status', 'nothing')}): "
            "the cell is trained again, from its checkpoint where there is one",
            flush=True,
        )
        return False
    again = f" (the names {', '.join(restored)} restored)" if restored else ""
    print(
        f"launch: {other} finished the cell {status}: its outcome is this job's, nothing retrained{again}", flush=True
    )
    log = held.previous_log()
    if log is not None:
        print(f"launch: the log of {other} ({log}):\n{log.read_text()}", flush=True)
    return True


def say_previous(held: cell_holder.Held) -> None:
    """Where this job is the one before it run again (SLURM requeued it), or found the cell left by a
    job that did not release it (killed, its node lost): said once, at the top of the log."""
    previous = held.previous
    if previous is None or held.waited_for is not None:
        return
    if previous.slurm_job_id and previous.slurm_job_id == held.mine.slurm_job_id:
        print(f"launch: SLURM job {previous.slurm_job_id} runs again (requeued): it goes on from the checkpoint")
    elif not previous.released:
        print(f"launch: {previous.describe()} ended without finishing the cell: this job goes on from the checkpoint")


def granted(job: dict[str, str]) -> dict[str, int]:
    """What SLURM allocated a job, from `scontrol show job -d --oneliner`'s fields: its tasks, CPUs
    per task, and GPUs in all (launch/accounting.py reads them)."""
    tasks, cpus = job.get("NumTasks", "1"), job.get("CPUs/Task", "1")
    return {
        "tasks": int(tasks) if tasks.isdigit() else 1,
        "cpus_per_task": int(cpus) if cpus.isdigit() else 1,
        "gpus": accounting.allocated_gpus(job),
    }


def shortfall(request: dict, job: dict[str, str]) -> list[str]:
    """What an allocation lacks of what its cell's job asks for (config/resources.py: request), as
    'tasks: 1 of 2' (empty where it holds all of it)."""
    have = granted(job)
    return [f"{name}: {have[name]} of {need}" for name, need in request.items() if have.get(name, 0) < int(need)]


def allocation_shortfall(request: dict, job_id: str) -> str:
    """Why this SLURM job's allocation cannot train the cell ('' where it holds all its job asks for:
    `request`, the rule's resources as the job's own Snakemake evaluated them)."""
    try:
        job = slurm.oneliner_fields(slurm.scontrol("show", "job", "-d", "--oneliner", job_id))
    except slurm.SlurmError as error:
        print(f"launch: warning: the allocation of SLURM job {job_id} could not be read ({error}): not checked")
        return ""
    lacking = shortfall(request, job)
    if not lacking:
        return ""
    return (
        f"SLURM job {job_id} holds less than the cell's job asks for ({', '.join(lacking)}): it was submitted "
        "to wait for another job of the cell, which a restarted Snakemake found training it "
        "(config/bill.py, held by a live job), and that job ended without finishing; this job trains nothing "
        "in the smaller allocation and ends failed, so that Snakemake's retry submits the cell with its whole "
        "allocation (resumed from its checkpoint)"
    )
