"""Snakemake script: one drawing rule's figures (scalebench/report/figures.py lists them)."""

import sys
from pathlib import Path

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

from scalebench.analysis.summary_csv import read_epochs, read_runs
from scalebench.report.figures import FigureInputs, figures_of
from scalebench.report.saving import save_figure

given, params = snakemake.input, snakemake.params


def read(name: str):
    """The rule's input `name` read as its table, None where this drawing rule has no such input. Each
    reader is imported here only where its rule has the file: the hosts' and drift's modules import
    the planner's config package, which the other four drawing rules do not need."""
    if name not in given.keys():
        return None
    path = given[name]
    if name == "scaling":
        import pandas as pd

        return pd.read_csv(path)
    if name == "epochs":
        return read_epochs(path)
    if name == "collectives":
        from scalebench.analysis import collectives

        return collectives.read(path)
    if name == "hosts":
        from scalebench.analysis.hosts import read_hosts

        return read_hosts(path)
    from scalebench.analysis.drift import read_drift, read_order

    return {"drift": read_drift, "order": read_order}[name](path)


inputs = FigureInputs(
    runs=read_runs(given.runs),
    scaling=read("scaling"),
    epochs=read("epochs"),
    target_iou=params.target_iou,
    per_node=params.per_node,
    runs_root=Path(params.runs_root),
    prepared=Path(given.images).parent if "images" in given.keys() else None,
    images_shown=params.images_shown,
    collectives=read("collectives"),
    link_gbps=params.link_gbps,
    hosts=read("hosts"),
    drift=read("drift"),
    order=read("order"),
)
for figure in figures_of(params.drawing):
    save_figure(figure.draw(inputs), snakemake.output[figure.name])
