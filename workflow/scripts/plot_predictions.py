"""Snakemake script: saved test predictions of the smallest and largest cells -> the picture panel."""

import sys
from pathlib import Path

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

from scalebench.analysis.summary_csv import read_runs
from scalebench.report.predictions import picture_panel

figure = picture_panel(
    read_runs(snakemake.input.runs),
    snakemake.params.runs_root,
    Path(snakemake.input.images).parent,
    snakemake.params.images_shown,
)
figure.savefig(snakemake.output.figure, dpi=120)
