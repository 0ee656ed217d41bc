"""Snakemake script: every cell's records -> runs.csv and epochs.csv."""

import sys
from pathlib import Path

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821

from scalebench.analysis import collect  # noqa: E402

run_dirs = [Path(p).parent for p in snakemake.input.runs]  # noqa: F821
runs, epochs = collect(run_dirs)
runs.to_csv(snakemake.output.runs, index=False)  # noqa: F821
epochs.to_csv(snakemake.output.epochs, index=False)  # noqa: F821
print(f"collect_runs: {len(runs)} cells, {len(epochs)} epochs; status {runs['status'].value_counts().to_dict()}")
