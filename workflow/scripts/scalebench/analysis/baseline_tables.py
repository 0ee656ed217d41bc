"""Where a baseline study's tables are and whether they can be compared (no pandas: common.smk
checks `compare.baseline` with this before Snakemake builds any job).

`compare.baseline` names another study's results folder; its ``summary/runs.csv`` holds one row
per cell with the values the comparison needs. Tables written by an older version of this
project lack some columns: those in REQUIRED_COLUMNS cannot be done without (the error names
them); the others only empty the comparison that needs them (analysis/baseline.py says which).
"""

from __future__ import annotations

import csv
from pathlib import Path

KEY = "compare.baseline"
# a cell's key, its outcome and the two measures every compared cell has
REQUIRED_COLUMNS = ["framework", "backend", "gpus", "seed", "status", "images_per_s", "train_time_s"]


def runs_table(folder: str | Path) -> Path:
    """The baseline's runs.csv: <results folder>/summary/runs.csv."""
    return Path(folder).expanduser() / "summary" / "runs.csv"


def missing_columns(path: str | Path) -> list[str]:
    """The REQUIRED_COLUMNS the header of the CSV at `path` lacks."""
    with open(path, newline="") as handle:
        header = next(csv.reader(handle), [])
    return [column for column in REQUIRED_COLUMNS if column not in header]


def baseline_problem(folder: str | Path) -> str | None:
    """Why `folder` cannot be a baseline (naming the config key), or None if it can."""
    path = Path(folder).expanduser()
    if not path.is_dir():
        return f"config key '{KEY}': {path} is not a folder (name another study's results folder)"
    runs = runs_table(path)
    if not runs.is_file():
        return (
            f"config key '{KEY}': {path} has no summary tables ({runs} is missing); name a study's "
            "results folder, the one that holds summary/runs.csv"
        )
    try:
        missing = missing_columns(runs)
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        return f"config key '{KEY}': {runs} cannot be read ({error})"
    if missing:
        return (
            f"config key '{KEY}': {runs} is from a version of the tables without the column(s) "
            f"{', '.join(missing)}, which the comparison needs"
        )
    return None
