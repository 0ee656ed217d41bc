"""run.json's fields: where and with what a cell ran (hosts, devices, versions, SLURM job, git
commit, the training settings as the cell resolved them), and a failed rank 0's record of its
failure. run_record.py assembles them into run.json and writes it."""

from __future__ import annotations

import dataclasses
import os
import platform
import resource
import socket
import subprocess
import sys
from pathlib import Path

from scalebench import measures, records
from scalebench.architecture import CHANNELS
from scalebench.files import WriteFailed
from scalebench.records import store
from scalebench.records.definitions import BACKEND_SECTIONS, NOT_RECORDED
from scalebench.settings import TrainingSettings
from scalebench.train import flops
from scalebench.train.lr_schedule import scaled_lr


def git_commit(start: str | Path) -> tuple[str | None, str | None]:
    """(the commit of the checkout holding `start`, with "-dirty" where tracked files differ
    from it; None) or (None, why it is not known: not a git checkout, no git on this node)."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=start, capture_output=True, text=True, timeout=10)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            said = (head.stderr.strip().splitlines() or ["no output"])[0]
            return None, f"not a git checkout: {start} (git rev-parse: {said})"
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except FileNotFoundError:
        return None, "git is not installed where the rank ran"
    except (OSError, subprocess.SubprocessError) as error:
        return None, f"git failed: {error}"
    if dirty.returncode != 0:
        return (
            head.stdout.strip(),
            f"git status failed, so whether the tree was dirty is unknown: {dirty.stderr.strip()}",
        )
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else ""), None


SLURM_VARIABLES = {
    "job_id": "SLURM_JOB_ID",
    "job_name": "SLURM_JOB_NAME",
    "nodelist": "SLURM_JOB_NODELIST",
    "partition": "SLURM_JOB_PARTITION",
    "account": "SLURM_JOB_ACCOUNT",
    "restart_count": "SLURM_RESTART_COUNT",
    # where the step's ranks ran: on a test cluster all nodes share one hostname, so these
    # (SLURM's node names) show where the ranks ran
    "node": "SLURMD_NODENAME",
    "step_id": "SLURM_STEP_ID",  # launch.py reads the step's energy from sacct (launch/accounting.py)
    "step_nodelist": "SLURM_STEP_NODELIST",
    "step_tasks_per_node": "SLURM_STEP_TASKS_PER_NODE",
}


def slurm_info() -> dict:
    return {name: os.environ[var] for name, var in SLURM_VARIABLES.items() if var in os.environ}


def host_name() -> str:
    """This rank's node: SLURM's node name under srun (nodes may share a hostname), else the hostname."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def cpu_name() -> str:
    return f"cpu ({platform.processor() or platform.machine()})"


def peak_host_memory_mb() -> float:
    """Peak resident memory of this process (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def start_record(cell: dict, config_hash: str) -> dict:
    """The fields run.json has from the start (status running)."""
    commit, commit_reason = git_commit(Path(__file__).resolve().parent)  # the code this rank runs
    return {
        **cell,
        "config_hash": config_hash,
        "git_commit": commit,
        "git_commit_reason": commit_reason,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "launch_host": socket.gethostname(),
        "slurm": slurm_info(),
        "argv": sys.argv,
        "start": records.now_iso(),
        "status": "running",
    }


def rank_layout(
    hosts: list[str], devices: list[str], image_size: tuple[int, int], channels: tuple[int, ...] = CHANNELS
) -> dict:
    """run.json fields from every rank's host and device, and the model FLOPs for MFU (of the
    UNet with these encoder widths: model.width)."""
    return {
        "hosts": sorted(set(hosts)),
        "nodes": len(set(hosts)),
        "rank_hosts": hosts,
        "devices": devices,
        "model_flops_per_image": flops.train_flops_per_image(*image_size, channels),
    }


# training.loader's keys every framework applies; the rest (workers, pinning, prefetching) are
# PyTorch's DataLoader's, recorded for PyTorch cells only.
SHARED_LOADER_KEYS = ("placement", "device_memory_share")


def training_record(
    training: TrainingSettings,
    *,
    framework: str,
    device_type: str,
    replicas: int,
    threads: int,
    deterministic: bool,
    passes: int,
    compression: str,
    backend_options: dict,
) -> dict:
    """run.json's "training": the settings the cell trained with, as it resolved them, so that a
    cell describes itself without its train.log. Every field of TrainingSettings goes in under its
    own name (nested sections as objects), but those in NOT_RECORDED and BACKEND_SECTIONS; then
    the values this rank resolved replace or join them (records/definitions.py RESOLVED: the
    replicas' batch and rate, gradient compression as the backend applied it, determinism,
    device, threads); the backend's options beside them."""
    record = {
        name: value
        for name, value in dataclasses.asdict(training).items()
        if name not in NOT_RECORDED and name not in BACKEND_SECTIONS
    }
    if framework != "torch":
        record["loader"] = {key: record["loader"][key] for key in SHARED_LOADER_KEYS}
    record.update(
        backward_passes_per_step=passes,  # batches per optimizer step: 1 unless the backend accumulates
        global_batch=measures.images_per_step(training.batch_per_gpu, replicas, passes),  # images per step
        scaled_lr=scaled_lr(training, replicas),  # the rate after warm-up, before any decay
        compression=compression,  # the gradients' type in the reduction, as the backend applied it
        deterministic=deterministic,
        device=device_type,  # cuda or cpu, what training.device resolved to
        threads_per_rank=threads,
        # the target decides where training ends only when it stops there; otherwise it is the report's
        target_iou=training.target_iou if training.stop_at_target else None,
    )
    return {**record, **backend_options}


def record_failure(run_json: Path, cell: dict, error: BaseException) -> None:
    """A rank 0 that failed marks the cell failed, keeping what run.json already held. Where run.json
    cannot be written either (the file system that failed the run is full), it says so and the
    earlier run.json stays as it was."""
    state = store.read_run(run_json) or dict(cell)
    state.update(status="failed", error=f"{type(error).__name__}: {error}", end=records.now_iso())
    try:
        store.write_run(run_json, state)
    except WriteFailed as failed:
        print(f"the failure could not be recorded in run.json: {failed}", file=sys.stderr, flush=True)
