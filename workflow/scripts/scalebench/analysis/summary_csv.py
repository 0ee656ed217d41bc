"""Reading the summary CSVs (runs.csv, epochs.csv) back with the right types."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from scalebench.analysis.collect import EPOCH_COLUMNS, RUN_COLUMNS, epochs_frame, runs_frame

TEXT = {
    "source": str,
    "framework": str,
    "backend": str,
    "variant": str,
    "status": str,
    "reason": str,
    "scaling": str,
    "precision": str,
    "compression": str,
    "compute_dtype": str,
    "local_gpu_ids": str,  # "0" is an id, not a number
    "rank_cpus": str,
    "straggler_host": str,
    "step_split_reason": str,
    "comm_total_reason": str,
    "profile_trace": str,
    "profile_reason": str,
}


def read_runs(path: str | Path) -> pd.DataFrame:
    frame = pd.read_csv(path, dtype=TEXT, keep_default_na=True)
    frame["reason"] = frame["reason"].fillna("")
    return runs_frame(frame.reindex(columns=RUN_COLUMNS).to_dict("records"))


def read_epochs(path: str | Path) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path, dtype=TEXT)
    except pd.errors.EmptyDataError:  # no epochs at all
        frame = pd.DataFrame(columns=EPOCH_COLUMNS)
    return epochs_frame(frame.reindex(columns=EPOCH_COLUMNS).to_dict("records"))
