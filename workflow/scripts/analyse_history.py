"""Snakemake script: the history of studies (history.path) with this study among them ->
results/summary/history.csv (each key figure per study and series), changes.csv (the change points),
the History section's table and figures (scalebench/analysis/history_changes.py)."""

import sys
from pathlib import Path

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

from scalebench.analysis import history_changes
from scalebench.report.history_figures import history_figure
from scalebench.report.html_tables import table_html
from scalebench.report.saving import save_figure

found = history_changes.analyse(
    Path(snakemake.params.history), Path(snakemake.input.runs).parent, snakemake.params.alpha
)
found.series.to_csv(snakemake.output.series, index=False)
found.changes.to_csv(snakemake.output.changes, index=False)
said = history_changes.sentences(found)
Path(snakemake.output.html).write_text(
    table_html(found.changes, "Change points across the history", said, "No change point was found.")
)
save_figure(history_figure(found.series, found.changes), snakemake.output.figure)
save_figure(history_figure(found.series, found.changes, waterfall=True), snakemake.output.waterfall)
print(said)
