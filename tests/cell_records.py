"""Cell folders as training writes them (metrics.jsonl, run.json, train.log), for analysis and report tests."""

from __future__ import annotations

import json
from pathlib import Path

from scalebench.cell import cell_path


def epoch(number: int, seconds: float, **extra) -> dict:
    record = {
        "type": "epoch",
        "epoch": number,
        "loss": 1.0 / number,
        "lr": 0.001,
        "epoch_time_s": seconds,
        "images_per_s": 100.0 / seconds,
        "data_wait_s": 0.1 * seconds,
        "peak_mem_mb": 100.0 + number,
        "steps": 10,
        "train_time_s": None,
        "val_iou": None,
        "val_loss": None,
        **step_split(seconds),
    }
    record.update(extra)
    return record


def rank_row(rank: int, host: str, seconds: float, compute: float, comm: float) -> dict:
    """One rank's row of an epoch's split, its parts adding up to `seconds` (data wait 0.1, rest 0.05)."""
    return {
        "rank": rank,
        "host": host,
        "epoch_time_s": seconds,
        "compute_s": compute * seconds,
        "comm_exposed_s": comm * seconds,
        "data_wait_s": 0.1 * seconds,
        "rest_s": 0.05 * seconds,
        "steps": 10,
        "step_median_s": 0.085 * seconds,
        "step_p90_s": 0.09 * seconds,
        "step_max_s": 0.1 * seconds,
        "comm_total_s": 0.3 * seconds,
        "comm_overlap": 0.5,
    }


def step_split(seconds: float) -> dict:
    """An epoch's step split (records.STEP_SPLIT_FIELDS) whose parts add up to `seconds`: rank 1 computes
    longest (0.75 of the epoch) and waits least in the reduction (0.1), rank 0 waits for it (0.2).
    Its critical path: typical compute 0.65 (rank 0's), imbalance 0.1, exposed communication 0.1 (rank 1's),
    data wait 0.1, rest 0.05."""
    return {
        "compute_s": 0.7 * seconds,
        "compute_max_s": 0.75 * seconds,
        "comm_exposed_s": 0.15 * seconds,
        "comm_exposed_max_s": 0.2 * seconds,
        "data_wait_median_s": 0.1 * seconds,
        "rest_s": 0.05 * seconds,
        "rest_max_s": 0.05 * seconds,
        "comm_total_s": 0.3 * seconds,
        "comm_overlap": 0.5,
        "comm_total_reason": None,
        "step_median_s": 0.1 * seconds,
        "step_p90_s": 0.12 * seconds,
        "step_max_s": 0.15 * seconds,
        "compute_spread": 0.05,
        "straggler_rank": 1,
        "straggler_host": "n2",
        "step_split_reason": None,
        "ranks": [rank_row(0, "n1", seconds, 0.65, 0.2), rank_row(1, "n2", seconds, 0.75, 0.1)],
        "profiled": False,
        "profile_trace": None,
        "profile_reason": None,
    }


def rank_rows(seconds: float, hosts: list[str], slower: dict[str, float] | None = None) -> list[dict]:
    """An epoch record's `ranks` (records.RANK), one per host in `hosts` (rank order); the ranks on a
    host of `slower` compute that factor longer, and the others wait for them in the reduction."""
    computes = [0.7 * seconds * (slower or {}).get(host, 1.0) for host in hosts]
    return [
        {
            "rank": rank,
            "host": host,
            "epoch_time_s": seconds,
            "compute_s": compute,
            "comm_exposed_s": max(computes) - compute + 0.1 * seconds,
            "data_wait_s": 0.1 * seconds,
            "rest_s": 0.05 * seconds,
            "steps": 10,
            "step_median_s": 0.1 * seconds,
            "step_p90_s": 0.12 * seconds,
            "step_max_s": 0.15 * seconds,
            "comm_total_s": 0.3 * seconds,
            "comm_overlap": 0.5,
        }
        for rank, (host, compute) in enumerate(zip(hosts, computes))
    ]


# The fields of an epoch record written before the step split existed (tests of old records drop them).
SPLIT_FIELDS = tuple(step_split(1.0))


def write_cell(
    root: Path,
    framework="torch",
    backend="native",
    gpus=1,
    seed=1,
    times=(10.0, 4.0, 6.0, 5.0),
    status="ok",
    final=True,
    run_json=True,
    truncate=False,
    epochs_extra=None,
    data_key=None,
    settings=None,
    training=None,
    final_extra=None,
    run_extra=None,
    variant="",
) -> Path:
    folder = root / cell_path(framework, backend, variant, gpus, seed)
    folder.mkdir(parents=True)
    (folder / "train.log").write_text("log\n")
    records, total = [], 0.0
    for number, seconds in enumerate(times, start=1):
        total += seconds
        records.append(epoch(number, seconds, train_time_s=total, **(epochs_extra or {}).get(number, {})))
    if final:
        records.append(
            {
                "type": "final",
                "status": status,
                "setup_s": 2.0,
                "train_time_s": total,
                "iou": 0.9,
                "test_loss": 0.2,
                "test_time_s": 1.0,
                "epochs_completed": len(times),
                "stopped_at_target": False,
                **(final_extra or {}),
            }
        )
    text = "".join(json.dumps(r) + "\n" for r in records)
    if truncate:
        text = text[: -len(json.dumps(records[-1])) // 2]
    (folder / "metrics.jsonl").write_text(text)
    if run_json:
        run = {
            "framework": framework,
            "backend": backend,
            "gpus": gpus,
            "seed": seed,
            "status": status,
            "hosts": ["n1", "n2"],
            "nodes": 2,
            "devices": ["H100", "H100"],
            "python": "3.11.7",
            "versions": {"torch": "2.13.0", "horovod": None},
            "slurm": {"job_id": "42"},
            "git_commit": "abc",
            "config_hash": "h1",
        }
        if data_key:
            run["data_key"] = data_key
        if settings is not None:
            run["settings"] = settings
        if training is not None:
            run["training"] = training
        run.update(run_extra or {})
        (folder / "run.json").write_text(json.dumps(run))
    return folder


def cell(framework="torch", backend="native", gpus=1, seed=1, variant="", settings=None) -> dict:
    """An entry of the rules' cells_json (settings: the study's for the cell, where given)."""
    entry = {"framework": framework, "backend": backend, "variant": variant, "gpus": gpus, "seed": seed}
    return entry if settings is None else {**entry, "settings": settings}


def without_split(folder: Path) -> None:
    """Rewrite a cell's metrics.jsonl as a version before the step split wrote it."""
    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    records = [{k: v for k, v in record.items() if k not in SPLIT_FIELDS} for record in lines]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
