"""Snakemake script: scaling.csv -> speedup figure."""

import sys

import pandas as pd

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821

from scalebench.plots import speedup_figure  # noqa: E402

figure = speedup_figure(pd.read_csv(snakemake.input.scaling))  # noqa: F821
figure.save(snakemake.output.figure, dpi=120, verbose=False)  # noqa: F821
