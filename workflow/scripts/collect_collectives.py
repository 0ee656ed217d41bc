"""Snakemake script: every cell's collectives.csv -> results/summary/collectives.csv (the cells of runs.csv:
with rounds of matrix.seeds, those they added)."""

import json
import sys

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

from scalebench.analysis.collect import study_entries
from scalebench.analysis.collectives import gather
from scalebench.analysis.summary_csv import read_runs

cells = study_entries(json.loads(snakemake.params.cells), read_runs(snakemake.input.runs))
table = gather(snakemake.params.runs_root, cells)
table.to_csv(snakemake.output.collectives, index=False)
cells = table.groupby(["framework", "backend", "variant", "gpus", "seed"]).ngroups if len(table) else 0
print(f"collect_collectives: {len(table)} rows from {cells} cells ({int(table['latency_us'].notna().sum())} measured)")
