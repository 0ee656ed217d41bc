"""Snakemake script: every cell's collectives.csv -> results/summary/collectives.csv."""

import json
import sys

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

from scalebench.analysis.collectives import gather

table = gather(snakemake.params.runs_root, json.loads(snakemake.params.cells))
table.to_csv(snakemake.output.collectives, index=False)
cells = table.groupby(["framework", "backend", "variant", "gpus", "seed"]).ngroups if len(table) else 0
print(f"collect_collectives: {len(table)} rows from {cells} cells ({int(table['latency_us'].notna().sum())} measured)")
