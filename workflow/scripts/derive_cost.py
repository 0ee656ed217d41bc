"""Snakemake script: runs.csv and the predictions the cells started with -> cost.csv and its table."""

import sys
from pathlib import Path

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

from scalebench.analysis import cost
from scalebench.analysis.summary_csv import read_runs
from scalebench.report.html_tables import table_html

kept = list(snakemake.input.submitted)  # results/plan/submitted.csv, where the study kept one
submitted = cost.read_submitted(kept[0] if kept else None)
table = cost.cost(read_runs(snakemake.input.runs), submitted)
table.to_csv(snakemake.output.table, index=False)
note = cost.sentence(cost.summary(table)) + cost.rounds_sentence(cost.rounds_summary(submitted, table))
title = "The bill against what each cell cost"
empty = "No cell of this study has ended yet."
Path(snakemake.output.html).write_text(table_html(table, title, note, empty))
print(f"derive_cost: {len(table)} cells; {note}")
