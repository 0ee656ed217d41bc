"""Read the cells' records into tidy tables: runs.csv (one row per cell) and epochs.csv.

Only the structured records are read (metrics.jsonl, run.json), never logs. Every
cell of the matrix gets a row, whatever state its folder is in: a failed job keeps
its train.log but Snakemake deletes its outputs, so the status is derived from what
exists (see ``cell_status``). Numbers that are unknown stay NaN, never zero.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from scalebench import measures
from scalebench.analysis.tables import epochs_frame, runs_frame
from scalebench.cell import OWN_SOURCE, cell_path
from scalebench.cluster import stuck_jobs
from scalebench.config import settings_changes
from scalebench.measures import finite_number
from scalebench.records import FINISHED_STATUSES, read_metrics, read_run, run_problem
from scalebench.records.definitions import EPOCH, FINAL
from scalebench.records.tables import EPOCHS, KEYS, PROVENANCE_TABLE, RUNS, SETTING_COLUMNS
from scalebench.timing import cell_times, step_split


def time_to_target(epochs: list[dict], target: float | None, training: dict | None = None) -> tuple[float, str]:
    """Training time until validation IOU first reached `target`, and why it is NaN where it is
    (never reached, no validation during training). `training`: run.json's training settings."""
    if target is None:
        return math.nan, "no target IOU given"
    if not epochs:
        return math.nan, "no epoch record"
    evaluated = [e for e in epochs if not math.isnan(finite_number(e.get("val_iou")))]
    if not evaluated:
        if any(not math.isnan(finite_number(e.get("test_iou"))) for e in epochs):
            return math.nan, "evaluated the test pairs during training, not validation pairs (predates val_fraction)"
        every = (training or {}).get("eval_every")
        setting = f"training.eval_every: {every}" if every is not None else "training.eval_every"
        return math.nan, f"no validation evaluation during training ({setting})"
    for record in evaluated:
        if finite_number(record["val_iou"]) >= target:
            return finite_number(record.get("train_time_s")), ""
    best = max(finite_number(record["val_iou"]) for record in evaluated)
    return math.nan, f"never reached {target:g} (best {best:.3g} in {len(evaluated)} evaluations)"


def cell_status(run: dict | None, has_metrics: bool, has_log: bool, final: dict, complete: bool) -> tuple[str, str]:
    """(status, reason) of a cell from what its folder holds."""
    if run is None:
        if has_metrics or has_log:
            return "failed", "no run.json (the job failed; see train.log)"
        return "missing", "not run yet"
    status = run.get("status")
    if status == "running":
        return "failed", "run.json still says running (killed, or running now)"
    if not has_metrics:
        return "failed", "no metrics.jsonl"
    if not complete:
        return "failed", "metrics.jsonl ends in a truncated record (killed job)"
    if not final:
        return "failed", "metrics.jsonl has no final record"
    if status not in FINISHED_STATUSES:
        return "failed", f"unknown status {status!r} in run.json"
    if status == "ok":
        return status, ""
    return status, run.get("reason") or f"training ended {status}"


def stale_reason(run: dict, data_key: str | None, settings: dict | None, defaults: dict | None = None) -> str:
    """Why a finished cell does not belong to this study ('' if it does): it trained on other
    prepared arrays, or with other settings than the study's now (cells that predate the
    record of either are not judged; a key a record lacks counts as its default: `defaults`)."""
    trained_on = run.get("data_key")
    if data_key and trained_on and trained_on != data_key:
        return f"trained on prepared data {trained_on}, the study's is {data_key} (other dataset settings)"
    if settings is not None and run.get("settings") is not None:
        changes = settings_changes(run["settings"], settings, defaults)
        if changes:
            return "trained with other settings than the study's: " + "; ".join(changes)
    return ""


def read_cell(
    run_dir: str | Path,
    keys: dict,
    target_iou: float | None = None,
    data_key: str | None = None,
    settings: dict | None = None,
    defaults: dict | None = None,
) -> tuple[dict, list[dict]]:
    """One runs.csv row and the epochs.csv rows of the cell folder `run_dir`.

    `keys` (framework, backend, gpus, seed; variant, '' where not given) come from the matrix, so a cell whose
    run.json is missing or broken still gets its row. `data_key` (the study's prepared
    arrays) and `settings` (the cell's settings in the study now, `defaults` the same
    cell's at the schema's defaults): a cell that trained on other arrays or settings is
    stale, not ok.
    """
    keys = {"variant": "", **keys}  # a cell of a study without optional axes may be named without one
    run, epochs, final, status, reason = read_folder(Path(run_dir))
    if status == "ok" and stale_reason(run, data_key, settings, defaults):
        status, reason = "stale", stale_reason(run, data_key, settings, defaults)

    row = RUNS.row(
        {
            "source": OWN_SOURCE,
            **keys,
            **cell_settings(settings, run, keys),
            "status": status,
            "reason": reason,
            **epoch_figures(epochs, final, run, int(keys["gpus"])),
            **final_figures(epochs, final, run, target_iou),
            **cost(run, final, epochs),
            **slurm_cost(run),
            **observed_steps(run, epochs),
            **collective_figures(run),
            **{name: run.get(name) for name in RUNS.copied()},
            **provenance_values(run),
        },
        derived=("gpu_hours", "train_gpu_hours"),  # runs_frame: the one definition for every row
    )
    epoch_rows = [
        EPOCHS.row(
            {
                "source": OWN_SOURCE,
                **keys,
                "epoch": e.get("epoch"),
                **{name: finite_number(e.get(name)) for name in EPOCHS.copied()},
                **step_split.epoch_columns(e),
            }
        )
        for e in map(observed_rates, epochs)
    ]
    return row, epoch_rows


def read_folder(run_dir: Path) -> tuple[dict, list[dict], dict, str, str]:
    """A cell folder's run.json ({} where it is missing or unreadable), epoch and final records
    (read through their definitions, records/definitions.py: a name they lack raises), and its
    status and reason from what exists."""
    run: dict | None = None
    run_json = run_dir / "run.json"
    if run_json.exists():
        try:
            run = json.loads(run_json.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            run = None
    metrics_path = run_dir / "metrics.jsonl"
    lines, complete = read_metrics(metrics_path) if metrics_path.exists() else ([], True)
    epochs = [EPOCH.read(r) for r in lines if r.get("type") == "epoch"]
    final = FINAL.read(next((r for r in lines if r.get("type") == "final"), {}))
    status, reason = cell_status(run, metrics_path.exists(), (run_dir / "train.log").exists(), final, complete)
    ended = stuck_jobs.read_mark(run_dir)
    if ended is not None and status in ("failed", "missing"):  # its job sat stuck and the study ended it
        status, reason = ended.status, ended.describe()
    if run_json.exists() and (run is None or run_problem(run)):
        status, reason = "unreadable", run_problem(run) if run is not None else "run.json is not valid JSON"
        run = None
    return read_run(run or {}), epochs, final, status, reason


def epoch_figures(epochs: list[dict], final: dict, run: dict, gpus: int) -> dict:
    """A cell's times, throughput, data waits and step split from its epoch records."""
    profiled = measures.steady_flags(epochs)  # profiled, resumed, or on other nodes: out of the steady figures
    times = [finite_number(e.get("epoch_time_s")) for e in epochs]
    waits = [finite_number(e.get("data_wait_s")) for e in epochs]
    throughputs = [finite_number(e.get("images_per_s")) for e in epochs]
    total_time = float(np.nansum(times)) if times else math.nan
    total_wait = float(np.sum(waits)) if waits else math.nan  # NaN if any epoch lacks it
    images_per_s = measures.steady_median(throughputs, profiled)
    timed = cell_times.figures(epochs, final, run)  # the bill reads a cell's time alike (config/bill.py)
    memory = [m for m in (finite_number(e.get("peak_mem_mb")) for e in epochs) if not math.isnan(m)]
    placed = measures.placement(epochs)
    return {
        **timed,  # epochs, train_time_s, steady_epoch_s, first_epoch_s, setup_s, test_time_s
        "node_sets": len(placed.sets) if placed.sets else math.nan,
        "node_sets_note": placed.note([e.get("epoch") for e in epochs]),
        **run_time(run),
        "images_per_s": images_per_s,
        "images_per_s_per_gpu": images_per_s / gpus,
        "data_wait_s": total_wait,
        "data_wait_share": total_wait / total_time if total_time else math.nan,
        **step_split.run_columns(epochs, timed["steady_epoch_s"]),
        "peak_mem_mb": max(memory) if memory else math.nan,
        "mfu": measures.steady_median([e.get("mfu") for e in epochs], profiled),  # per GPU, steady epochs
        "images": float(np.sum([t * s for t, s in zip(throughputs, times, strict=True)])) if epochs else math.nan,
    }


def final_figures(epochs: list[dict], final: dict, run: dict, target_iou: float | None) -> dict:
    """The test figures of the final record and the time to the target IOU."""
    to_target, to_target_reason = time_to_target(epochs, target_iou, run.get("training"))
    return {
        "iou": finite_number(final.get("iou")),
        "test_loss": finite_number(final.get("test_loss")),
        "time_to_target_s": to_target,
        "time_to_target_reason": to_target_reason or None,
        "stopped_at_target": bool(final.get("stopped_at_target")) if final else None,
    }


def provenance_values(run: dict) -> dict:
    """The provenance columns that are not run.json's fields as they are (lists joined, JSON)."""
    return {
        "hosts": ",".join(run.get("hosts") or []),
        "devices": ",".join(sorted(set(run.get("devices") or []))),
        "versions": _versions(run),
        "slurm_job_id": (run.get("slurm") or {}).get("job_id"),
        "training": json.dumps(flat_settings(run["training"]), sort_keys=True) if run.get("training") else None,
        "local_gpu_ids": ",".join(run["local_gpu_ids"]) if run.get("local_gpu_ids") else None,
        "rank_cpus": ";".join(run["rank_cpus"]) if run.get("rank_cpus") else None,
        "site": json.dumps(flat_settings(run["site"]), sort_keys=True) if run.get("site") else None,
    }


def run_time(run: dict) -> dict:
    """run_s, the job's wall (job_s: what the cell cost) and why each is empty (timing/cell_times.py)."""
    if not run:
        return {
            "run_s": math.nan,
            "run_s_reason": "no run.json",
            "job_s": math.nan,
            "job_s_source": None,
            "job_s_reason": "no run.json",
        }
    seconds, reason = cell_times.run_seconds(run)
    wall, source, why = cell_times.job_seconds(run)
    return {
        "run_s": seconds,
        "run_s_reason": reason or None,
        "job_s": wall,
        "job_s_source": source or None,
        "job_s_reason": why or None,
    }


NOT_OBSERVED = "not recorded (the cell predates run.json's observed compute_dtype and compiled)"


def observed_steps(run: dict, epochs: list[dict]) -> dict:
    """What the steps did (run.json's compute_dtype, compiled), or empty with the reason: a record
    from before they were observed (its `compiled` was the setting's description), or a cell that
    ended before run.json recorded them, after its first epoch."""
    compiled = run.get("compiled")
    if "compute_dtype" not in run or not isinstance(compiled, dict):
        if not run:
            reason = "no run.json"
        elif epochs:
            reason = NOT_OBSERVED
        else:
            reason = f"no epoch finished (status {run.get('status')})"
        return {"compute_dtype": None, "compiled_graphs": None, "recompiles": None, "observed_reason": reason}
    return {
        "compute_dtype": run["compute_dtype"],
        "compiled_graphs": compiled.get("graphs"),
        "recompiles": compiled.get("recompiles"),
        "observed_reason": None,
    }


def observed_rates(epoch: dict) -> dict:
    """An epoch record with `lr` as the optimizer's rate: a record from before scheduled_lr holds
    the schedule's rate in `lr`, which moves there (the optimizer's is not known)."""
    if "scheduled_lr" in epoch:
        return epoch
    return EPOCH.read({**epoch, "lr": None, "scheduled_lr": epoch.get("lr")})


def cell_settings(settings: dict | None, run: dict, keys: dict) -> dict:
    """The SETTING_COLUMNS of a cell: as it trained (run.json), else as the study sets it."""
    trained = run.get("training") or {}
    study = (settings or {}).get("training") or {}
    values = {column: trained.get(column, study.get(column)) for column in SETTING_COLUMNS}
    values["model_width"] = trained_width(run, settings)
    if "global_batch" not in trained and study.get("scaling") != "strong" and "batch_per_gpu" in study:
        # as run.json records it: a cell without run.json (failed, missing) has the study's
        passes = measures.backward_passes(keys["framework"], keys["backend"], study)
        values["global_batch"] = measures.images_per_step(study["batch_per_gpu"], int(keys["gpus"]), passes)
    return values


def cost(run: dict, final: dict, epochs: list[dict]) -> dict:
    """Energy of a cell's epochs from its records (gpu_hours and train_gpu_hours follow from the row: runs_frame).
    A final record without the fields (out of memory, killed) falls back to the epochs' sum."""
    if "energy_j" in final:
        joules, reason = finite_number(final["energy_j"]), final.get("energy_reason") or ""
    elif epochs and all("energy_j" in e for e in epochs):
        total, reason = measures.cell_energy([e["energy_j"] for e in epochs], run.get("energy_reason") or "")
        joules = finite_number(total)
    else:
        joules, reason = math.nan, "not recorded (the cell predates energy measurement, or has no epoch)"
    return {"energy_j": joules, "energy_source": run.get("energy_source") or None, "energy_reason": reason or None}


def slurm_cost(run: dict) -> dict:
    """The allocation's GPU-hours and the step's energy as SLURM accounted them (run.json)."""
    if "alloc_gpu_hours_reason" not in run and "alloc_gpu_hours" not in run:
        reason = "not recorded (the cell predates SLURM's accounting in run.json)"
        return {
            "alloc_gpu_hours": math.nan,
            "alloc_gpu_hours_reason": reason,
            "step_energy_j": math.nan,
            "step_energy_source": None,
            "step_energy_reason": reason,
        }
    return {
        "alloc_gpu_hours": finite_number(run.get("alloc_gpu_hours")),
        "alloc_gpu_hours_reason": run.get("alloc_gpu_hours_reason") or None,
        "step_energy_j": finite_number(run.get("step_energy_j")),
        "step_energy_source": run.get("step_energy_source") or None,
        "step_energy_reason": run.get("step_energy_reason") or None,
    }


def trained_width(run: dict, settings: dict | None) -> int | None:
    """The cell's model.width: as run.json records it, or its recorded settings say; 1 for a record
    from before model.width (the only model it could train); the study's for a cell without one."""
    if "model_width" in run:
        return run["model_width"]
    if run.get("settings") is not None:
        return run["settings"].get("model", {}).get("width", 1)
    if run.get("training") is not None:
        return 1
    return (settings or {}).get("model", {}).get("width")


def collective_figures(run: dict) -> dict:
    """The collective benchmark at the gradient size (run.json's collectives), empty with the reason."""
    if "collectives" not in run:
        reason = "not recorded (the cell predates the collective benchmark)" if run else "no run.json"
        return {
            "collective_op": None,
            "collective_latency_us": math.nan,
            "collective_algbw_gbps": math.nan,
            "collective_busbw_gbps": math.nan,
            "collective_reason": reason,
        }
    summary = run["collectives"]
    return {
        "collective_op": summary.get("op"),
        "collective_latency_us": finite_number(summary.get("latency_us")),
        "collective_algbw_gbps": finite_number(summary.get("algbw_gbps")),
        "collective_busbw_gbps": finite_number(summary.get("busbw_gbps")),
        "collective_reason": summary.get("reason") or None,
    }


def _versions(run: dict) -> str:
    """'python 3.11.7, torch 2.13.0, ...' without the entries that are not there (None)."""
    versions = {"python": run.get("python"), **(run.get("versions") or {})}
    return ", ".join(f"{name} {value}" for name, value in versions.items() if value not in (None, ""))


def collect(
    runs_root: str | Path, cells: list[dict], target_iou: float | None = None, data_key: str | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """runs.csv and epochs.csv frames for every cell of `cells` (keys, and the cell's settings
    where known) under `runs_root`."""
    rows, epoch_rows = [], []
    for entry in cells:
        keys = {k: entry.get(k, "") for k in KEYS}  # entries of older studies have no variant
        folder = Path(runs_root) / cell_path(**keys)
        row, epochs = read_cell(folder, keys, target_iou, data_key, entry.get("settings"), entry.get("defaults"))
        rows.append(row)
        epoch_rows.extend(epochs)
    return sort_runs(runs_frame(rows)), sort_runs(epochs_frame(epoch_rows))


def study_entries(cells: list[dict], runs: pd.DataFrame) -> list[dict]:
    """The entries of `cells` (collect_runs' list: with rounds, every cell a round could add) that are
    rows of runs.csv, the study's cells."""
    own = runs[runs["source"] == OWN_SOURCE]
    rows = set(zip(*(own[name] for name in KEYS), strict=True))
    return [entry for entry in cells if tuple(entry.get(name, "") for name in KEYS) in rows]


def sort_runs(frame: pd.DataFrame) -> pd.DataFrame:
    order = ["source", *KEYS] + (["epoch"] if "epoch" in frame else [])
    return frame.sort_values(order, kind="stable", na_position="first").reset_index(drop=True)


def flat_settings(settings: dict, prefix: str = "") -> dict:
    """Nested settings as one level with dotted keys: {"horovod": {"allow_cpu_reductions": x}} ->
    {"horovod.allow_cpu_reductions": x}."""
    flat = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            flat.update(flat_settings(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def training_settings(runs: pd.DataFrame) -> list[dict]:
    """Each row's flattened training settings ({} for a cell without them in run.json)."""
    return [json.loads(text) if isinstance(text, str) and text else {} for text in runs["training"]]


def differing_settings(settings: list[dict]) -> list[str]:
    """The settings whose values are not the same in every cell that has them (a backend's or a
    framework's own options are absent from the other cells, which do not count)."""
    keys = sorted({key for cell in settings for key in cell})
    return [key for key in keys if len({json.dumps(cell[key]) for cell in settings if key in cell}) > 1]


def provenance(runs: pd.DataFrame) -> pd.DataFrame:
    """Per cell: where and with what it ran (the report's provenance table), and a
    training.<setting> column for each resolved training setting that differs between cells."""
    table = runs[PROVENANCE_TABLE.names]
    settings = training_settings(runs)
    differing = {f"training.{key}": [cell.get(key) for cell in settings] for key in differing_settings(settings)}
    return pd.concat([table.reset_index(drop=True), pd.DataFrame(differing, dtype=object)], axis=1)
