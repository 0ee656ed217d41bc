"""Snakemake script: one drawing rule's figures (scalebench/report/figures.py lists them)."""

import sys
from pathlib import Path

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

import pandas as pd
from scalebench.analysis import collectives
from scalebench.analysis.drift import read_drift, read_order
from scalebench.analysis.hosts import read_hosts
from scalebench.analysis.summary_csv import read_epochs, read_runs
from scalebench.report.figures import FigureInputs, figures_of
from scalebench.report.style import save_figure

given, params = snakemake.input, snakemake.params
inputs = FigureInputs(
    runs=read_runs(given.runs),
    scaling=pd.read_csv(given.scaling) if "scaling" in given.keys() else None,
    epochs=read_epochs(given.epochs) if "epochs" in given.keys() else None,
    target_iou=params.target_iou,
    per_node=params.per_node,
    runs_root=Path(params.runs_root),
    prepared=Path(given.images).parent if "images" in given.keys() else None,
    images_shown=params.images_shown,
    collectives=collectives.read(given.collectives) if "collectives" in given.keys() else None,
    link_gbps=params.link_gbps,
    hosts=read_hosts(given.hosts) if "hosts" in given.keys() else None,
    drift=read_drift(given.drift) if "drift" in given.keys() else None,
    order=read_order(given.order) if "order" in given.keys() else None,
)
for figure in figures_of(params.drawing):
    save_figure(figure.draw(inputs), snakemake.output[figure.name])
