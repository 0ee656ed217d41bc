"""Reading the summary CSVs (runs.csv, epochs.csv) back with the right types."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from scalebench.analysis.collect import EPOCH_COLUMNS, RUN_COLUMNS, epochs_frame, runs_frame
from scalebench.records.definitions import STEP_SPLIT

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
    # the epoch record's text fields of the step split, as records/definitions.py types them
    **{field.name: str for field in STEP_SPLIT if field.type == "str"},
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
