"""Snakemake script: runs.csv -> scaling.csv."""

import sys

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

from scalebench.analysis.scaling import scaling
from scalebench.analysis.summary_csv import read_runs

table = scaling(read_runs(snakemake.input.runs), snakemake.params.per_node)
table.to_csv(snakemake.output.scaling, index=False)
print(f"derive_scaling: {len(table)} rows")
