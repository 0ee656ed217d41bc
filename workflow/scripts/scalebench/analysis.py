"""Read the cells' records into tidy tables and derive the scaling numbers.

Only the structured records are read (metrics.jsonl, run.json), never logs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

KEYS = ["framework", "backend", "gpus", "seed"]


def read_metrics(path: str | Path) -> tuple[list[dict], bool]:
    """The records of a metrics.jsonl, and whether it ended cleanly.

    A killed job can leave a truncated last line: everything before it is kept.
    """
    records, complete = [], True
    with open(path) as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                complete = False
                break
    return records, complete


def read_cell(run_dir: str | Path) -> tuple[dict, list[dict]]:
    """One runs.csv row and the epochs.csv rows of a cell folder."""
    run_dir = Path(run_dir)
    run_json = run_dir / "run.json"
    run = json.loads(run_json.read_text()) if run_json.exists() else {}
    metrics_path = run_dir / "metrics.jsonl"
    records, complete = read_metrics(metrics_path) if metrics_path.exists() else ([], False)
    epochs = [r for r in records if r.get("type") == "epoch"]
    final = next((r for r in records if r.get("type") == "final"), {})
    status = run.get("status", "failed")
    if not final or not complete or status == "running":
        status = "failed"
    times = [e["epoch_time_s"] for e in epochs]
    steady = float(np.median(times[1:])) if len(times) > 1 else (times[0] if times else np.nan)
    gpus = run.get("world_size") or run.get("gpus")
    wait = sum(e["data_wait_s"] for e in epochs)
    images_per_s = (
        float(np.median([e["images_per_s"] for e in epochs[1:]]))
        if len(epochs) > 1
        else (epochs[0]["images_per_s"] if epochs else np.nan)
    )
    row = {
        "framework": run.get("framework"),
        "backend": run.get("backend"),
        "gpus": gpus,
        "seed": run.get("seed"),
        "status": status,
        "epochs": len(epochs),
        "train_time_s": final.get("train_time_s", np.nan),
        "steady_epoch_s": steady,
        "first_epoch_s": times[0] if times else np.nan,
        "setup_s": final.get("setup_s", np.nan),
        "images_per_s": images_per_s,
        "images_per_s_per_gpu": images_per_s / gpus if gpus else np.nan,
        "data_wait_share": wait / sum(times) if times else np.nan,
        "iou": final.get("iou", np.nan),
        "test_loss": final.get("test_loss", np.nan),
        "peak_mem_mb": max((e.get("peak_mem_mb") or 0 for e in epochs), default=np.nan),
        "parameters": run.get("parameters"),
        "hosts": ",".join(run.get("hosts", [])),
        "nodes": run.get("nodes"),
        "devices": ",".join(sorted(set(run.get("devices", [])))),
        "versions": json.dumps(run.get("versions", {}), sort_keys=True),
        "slurm_job_id": run.get("slurm", {}).get("job_id"),
        "git_commit": run.get("git_commit"),
        "config_hash": run.get("config_hash"),
        "source": "scalebench",
    }
    epoch_rows = [{**{k: row[k] for k in KEYS}, **{k: v for k, v in e.items() if k != "type"}} for e in epochs]
    return row, epoch_rows


def collect(run_dirs: list[str | Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows, epoch_rows = [], []
    for run_dir in run_dirs:
        row, epochs = read_cell(run_dir)
        rows.append(row)
        epoch_rows.extend(epochs)
    runs = pd.DataFrame(rows)
    epochs = pd.DataFrame(epoch_rows)
    if not runs.empty:
        runs = runs.sort_values(KEYS, kind="stable").reset_index(drop=True)
    return runs, epochs


def scaling(runs: pd.DataFrame) -> pd.DataFrame:
    """Speedup and parallel efficiency per (framework, backend, gpus), relative to
    the same framework and backend on the smallest world size, from cells with status ok."""
    ok = runs[runs["status"] == "ok"]
    rows = []
    for (framework, backend), group in ok.groupby(["framework", "backend"]):
        base_gpus = group["gpus"].min()
        base = group[group["gpus"] == base_gpus]
        for gpus, cells in group.groupby("gpus"):
            row = {
                "framework": framework,
                "backend": backend,
                "gpus": gpus,
                "base_gpus": base_gpus,
                "seeds": len(cells),
            }
            for metric in ("train_time_s", "steady_epoch_s"):
                speedup = base[metric].mean() / cells[metric].mean()
                row[f"speedup_{metric}"] = speedup
                row[f"efficiency_{metric}"] = speedup * base_gpus / gpus
            row["iou_mean"] = cells["iou"].mean()
            row["images_per_s_mean"] = cells["images_per_s"].mean()
            rows.append(row)
    return pd.DataFrame(rows)
