"""Snakemake script: the finished study's summary tables -> one entry of the history of studies
(history.path; scalebench/analysis/history.py). Adding a study that is already there writes nothing."""

import sys
from pathlib import Path

terminal = sys.stderr  # the one line that says what happened goes to the terminal too
sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

from scalebench.analysis import history

results = Path(snakemake.input.runs).parents[1]  # results/summary/runs.csv -> results
entry = history.add(results, Path(snakemake.params.history))
if entry.new:
    said = f"history: added this study as {entry.folder} ({entry.cells} cells, {len(entry.files)} files)"
else:
    said = f"history: this study is already in the history as {entry.folder} (added {entry.added}); nothing written"
print(said)
print(said, file=terminal)
