"""The whole collection step: own cells + imported studies -> the summary tables."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pandas as pd

from scalebench.analysis import collect as analysis
from scalebench.analysis import completeness, legacy
from scalebench.rerun import Invocation


@dataclass
class Summary:
    runs: pd.DataFrame
    epochs: pd.DataFrame
    provenance: pd.DataFrame
    incomplete: pd.DataFrame


def collect_study(
    runs_root: str,
    cells: list[dict],
    target_iou: float | None,
    legacy_entries: list[dict],
    invocation: Invocation,
    data_key: str | None = None,
    left_out: list[dict] | None = None,
) -> Summary:
    runs, epochs = analysis.collect(runs_root, cells, target_iou, data_key)
    legacy_runs, legacy_epochs, skipped = legacy.import_all(legacy_entries)
    for skip in skipped:
        print(f"WARNING: legacy file skipped: {skip.path}: {skip.reason}", file=sys.stderr)
    if legacy_runs:
        runs = analysis.sort_runs(pd.concat([runs, analysis.runs_frame(legacy_runs)], ignore_index=True))
        epochs = analysis.sort_runs(pd.concat([epochs, analysis.epochs_frame(legacy_epochs)], ignore_index=True))
    return Summary(
        runs=runs,
        epochs=epochs,
        provenance=analysis.provenance(runs[runs["source"] == analysis.OWN_SOURCE]),
        incomplete=completeness.incomplete(runs, skipped, invocation, left_out or []),
    )
