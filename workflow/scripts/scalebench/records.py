"""The per-cell output contract: metrics.jsonl and run.json.

metrics.jsonl holds one JSON object per line: an ``epoch`` record per epoch and
one ``final`` record, written by rank 0 only, after values are reduced across
ranks. run.json holds the provenance and the outcome (status) of the cell.
Both frameworks write through this module.
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

STATUSES = ("ok", "diverged", "oom", "failed")


def diverged(loss: float, training: dict) -> bool:
    """The run diverged: the epoch's mean loss is not finite or above training.max_loss."""
    return not math.isfinite(loss) or loss > training["max_loss"]


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _clean(value: Any) -> Any:
    """JSON has no NaN: non-finite floats become null so no reader mistakes them for numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def write_json_atomic(path: str | Path, data: dict) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w") as handle:
        json.dump(_clean(data), handle, indent=1, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class MetricsWriter:
    """Appends records to metrics.jsonl (rank 0) and keeps them for checkpoints."""

    def __init__(self, path: str | Path, enabled: bool, previous: list[dict] | None = None):
        self.path = Path(path)
        self.enabled = enabled
        self.records: list[dict] = []
        if enabled:
            self.path.write_text("")
        for record in previous or []:
            self.write(record)

    def write(self, record: dict) -> None:
        self.records.append(record)
        if self.enabled:
            with open(self.path, "a") as handle:
                handle.write(json.dumps(_clean(record), sort_keys=True) + "\n")
                handle.flush()


def git_commit(start: str | Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=start, capture_output=True, text=True, timeout=10, check=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=start,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def slurm_info() -> dict:
    keys = {
        "job_id": "SLURM_JOB_ID",
        "job_name": "SLURM_JOB_NAME",
        "nodelist": "SLURM_JOB_NODELIST",
        "partition": "SLURM_JOB_PARTITION",
        "account": "SLURM_JOB_ACCOUNT",
        "restart_count": "SLURM_RESTART_COUNT",
        # the step's placement: on a test cluster all nodes share one hostname, so these
        # (SLURM's node names) show where the ranks ran
        "node": "SLURMD_NODENAME",
        "step_nodelist": "SLURM_STEP_NODELIST",
        "step_tasks_per_node": "SLURM_STEP_TASKS_PER_NODE",
    }
    return {name: os.environ[var] for name, var in keys.items() if var in os.environ}


def base_provenance(cell: dict, config_hash: str) -> dict:
    return {
        **cell,
        "config_hash": config_hash,
        "git_commit": git_commit(Path(__file__).resolve().parent),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "launch_host": socket.gethostname(),
        "slurm": slurm_info(),
        "argv": sys.argv,
        "start": now_iso(),
        "status": "running",
    }


def peak_host_memory_mb() -> float:
    """Peak resident memory of this process (Linux reports kilobytes)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Clock:
    """Wall-clock seconds since construction."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def progress_line(record: dict, epochs: int, remaining_s: float) -> str:
    wait_share = record["data_wait_s"] / record["epoch_time_s"] if record["epoch_time_s"] else 0.0
    line = (
        f"epoch {record['epoch']}/{epochs}  loss {record['loss']:.4f}  lr {record['lr']:.2e}  "
        f"{record['epoch_time_s']:.2f} s  {record['images_per_s']:.1f} img/s  "
        f"data-wait {100 * wait_share:.1f}%  left {format_duration(remaining_s)}"
    )
    if record.get("test_iou") is not None:
        line += f"  test IOU {record['test_iou']:.3f}"
    return line


def host_name() -> str:
    """This rank's node: SLURM's node name under srun (nodes may share a hostname), else the hostname."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def placement(hosts: list[str], devices: list[str], image_size: list[int], training: dict, peaks: dict) -> dict:
    """run.json fields from every rank's host and device, and the model FLOPs for MFU."""
    from . import flops

    flops_per_image = flops.train_flops_per_image(*image_size)
    return {
        "hosts": sorted(set(hosts)),
        "nodes": len(set(hosts)),
        "rank_hosts": hosts,
        "devices": devices,
        "model_flops_per_image": flops_per_image,
        "peak_tflops": flops.peak_tflops(devices[0], flops.precision_key(training), peaks),
    }


def epoch_record(
    epoch: int,
    loss: float,
    lr: float,
    slowest: list[float],
    steps: int,
    batch: int,
    train_time_s: float,
    provenance: dict,
) -> dict:
    """The epoch record of the contract. `slowest` = [epoch time, data wait, peak memory], each the
    maximum over ranks; `steps` = steps summed over ranks; throughput fields from the model FLOPs."""
    from . import flops

    epoch_time_s, data_wait_s, peak_mem_mb = slowest
    images_per_s = steps * batch / epoch_time_s
    return {
        "type": "epoch",
        "epoch": epoch,
        "loss": float(loss),
        "lr": lr,
        "epoch_time_s": epoch_time_s,
        "images_per_s": images_per_s,
        "data_wait_s": data_wait_s,
        "peak_mem_mb": peak_mem_mb,
        "steps": int(steps),
        "train_time_s": train_time_s,
        "test_iou": None,
        "test_loss": None,
        **flops.throughput_fields(images_per_s, provenance["model_flops_per_image"], provenance["peak_tflops"]),
    }


def final_record(status: str, setup_s: float, train_time_s: float, epochs_completed: int) -> dict:
    """The final record; evaluation fills test_loss, iou and test_time_s when the run is ok."""
    return {
        "type": "final",
        "status": status,
        "setup_s": setup_s,
        "train_time_s": train_time_s,
        "epochs_completed": epochs_completed,
        "test_loss": None,
        "iou": None,
        "test_time_s": None,
    }


def finish(run_json: Path, provenance: dict, final: dict, start_epoch: int) -> None:
    """Rank 0 at the end: one summary line and the cell's outcome in run.json."""
    print(
        f"final: status {final['status']}  test loss {final['test_loss']}  IOU {final['iou']}  "
        f"train {final['train_time_s']:.1f} s",
        flush=True,
    )
    provenance.update(
        status=final["status"], end=now_iso(), setup_s=final["setup_s"], resumed_from_epoch=start_epoch or None
    )
    write_json_atomic(run_json, provenance)


def ignore_unreadable_checkpoint(path: Path, error: object) -> None:
    """A truncated or corrupt checkpoint is never fatal and never loaded: say so and start fresh."""
    import warnings

    warnings.warn(f"ignoring unreadable checkpoint {path}: {error}", stacklevel=3)


def checkpoint_matches(path: Path, written_for: str | None, config_hash: str) -> bool:
    """Whether a checkpoint was written for this cell's configuration; warns when it was not."""
    import warnings

    if written_for == config_hash:
        return True
    warnings.warn(
        f"ignoring checkpoint {path}: written for config {written_for}, this run is {config_hash}", stacklevel=3
    )
    return False
