"""Snakemake script: runs.csv -> scaling.csv."""

import sys

import pandas as pd

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821

from scalebench.analysis import scaling  # noqa: E402

table = scaling(pd.read_csv(snakemake.input.runs))  # noqa: F821
table.to_csv(snakemake.output.scaling, index=False)  # noqa: F821
print(f"derive_scaling: {len(table)} rows")
