"""The whole collection step: own cells + imported studies -> the summary tables."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from scalebench.analysis import collect as analysis
from scalebench.analysis import completeness, legacy, rounds, tables
from scalebench.cell import OWN_SOURCE
from scalebench.records.tables import KEYS
from scalebench.rerun import Invocation


@dataclass
class Summary:
    runs: pd.DataFrame
    epochs: pd.DataFrame
    provenance: pd.DataFrame
    incomplete: pd.DataFrame
    cells: list[dict]  # the study's cells (collect_runs' entries): with rounds, those they added


def collect_study(
    runs_root: str,
    cells: list[dict],
    target_iou: float | None,
    legacy_entries: list[dict],
    invocation: Invocation,
    data_key: str | None = None,
    left_out: list[dict] | None = None,
    submit_errors: dict[str, str] | None = None,
    rules: rounds.Rules | None = None,
) -> Summary:
    """submit_errors: {a job's output path: why its sbatch failed} (submissions.submit_errors): the
    reason of a missing cell whose job never started. rules: matrix.seeds {initial, max}, whose
    `cells` are every cell a round could add: the study's are those the rounds added (rounds.replay,
    from the records, as the rounds' checkpoints decided them)."""
    runs, epochs = analysis.collect(runs_root, cells, target_iou, data_key)
    runs = never_started(runs, runs_root, submit_errors or {})
    if rules is not None:
        cells, runs, epochs = added_by_rounds(cells, runs, epochs, rules)
    legacy_runs, legacy_epochs, skipped = legacy.import_all(legacy_entries, target_iou)
    for skip in skipped:
        print(f"WARNING: legacy file skipped: {skip.path}: {skip.reason}", file=sys.stderr)
    if legacy_runs:
        runs = analysis.sort_runs(pd.concat([runs, tables.runs_frame(legacy_runs)], ignore_index=True))
        epochs = analysis.sort_runs(pd.concat([epochs, tables.epochs_frame(legacy_epochs)], ignore_index=True))
    return Summary(
        runs=runs,
        epochs=epochs,
        provenance=analysis.provenance(runs[runs["source"] == OWN_SOURCE]),
        incomplete=completeness.incomplete(runs, skipped, invocation, left_out or []),
        cells=cells,
    )


def added_by_rounds(
    cells: list[dict], runs: pd.DataFrame, epochs: pd.DataFrame, rules: rounds.Rules
) -> tuple[list[dict], pd.DataFrame, pd.DataFrame]:
    """The entries, runs rows and epoch rows of the cells the rounds read: the first seeds and those the
    rounds added; a cell a round could have added but did not (an earlier study's, on disk) is left out."""
    keys = lambda frame: list(zip(*(frame[name] for name in KEYS), strict=True))  # noqa: E731
    possible = set(keys(runs))
    study = rounds.study_keys(rounds.replay(runs, rules, possible))
    entry_key = lambda entry: tuple(entry.get(name, "") for name in KEYS)  # noqa: E731
    kept = [key in study for key in keys(runs)]
    return (
        [entry for entry in cells if entry_key(entry) in study],
        runs[kept].reset_index(drop=True),
        epochs[[key in study for key in keys(epochs)]].reset_index(drop=True),
    )


def never_started(runs: pd.DataFrame, runs_root: str, submit_errors: dict[str, str]) -> pd.DataFrame:
    """Cells whose sbatch failed are failed with sbatch's error as their reason, not missing (or failed
    for the empty train.log that Snakemake leaves): launch.py, had it run, would have written to it."""
    runs = runs.copy()
    for index, row in runs.iterrows():
        if row["source"] != OWN_SOURCE or row["status"] not in ("missing", "failed"):
            continue
        folder = Path(runs_root) / completeness.row_path(row)
        log = folder / "train.log"
        reason = submit_errors.get(completeness.cell_target(row))
        if reason and not (folder / "run.json").exists() and (not log.exists() or log.stat().st_size == 0):
            runs.at[index, "status"], runs.at[index, "reason"] = "failed", reason
    return runs
