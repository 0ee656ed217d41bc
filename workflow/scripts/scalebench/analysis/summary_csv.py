"""Reading the summary CSVs (runs.csv, epochs.csv) back with the right types."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from scalebench.analysis.tables import epochs_frame, runs_frame
from scalebench.records.tables import EPOCHS, RUNS

# the text columns of both tables, read back as written ("0" is an id, not a number)
TEXT = {**RUNS.text(), **EPOCHS.text()}


def read_runs(path: str | Path) -> pd.DataFrame:
    frame = pd.read_csv(path, dtype=TEXT, keep_default_na=True)
    frame["reason"] = frame["reason"].fillna("")
    return runs_frame(frame.reindex(columns=RUNS.names).to_dict("records"))


def read_epochs(path: str | Path) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path, dtype=TEXT)
    except pd.errors.EmptyDataError:  # no epochs at all
        frame = pd.DataFrame(columns=EPOCHS.names)
    return epochs_frame(frame.reindex(columns=EPOCHS.names).to_dict("records"))
