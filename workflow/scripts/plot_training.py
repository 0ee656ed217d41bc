"""Snakemake script: runs.csv + epochs.csv -> loss curves, IOU against time, time to the target IOU."""

import sys

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

from scalebench.analysis.summary_csv import read_epochs, read_runs
from scalebench.report import training_figures as plots_training
from scalebench.report.save import save_figure

runs = read_runs(snakemake.input.runs)
epochs = read_epochs(snakemake.input.epochs)
target = snakemake.params.target_iou
out = snakemake.output
save_figure(plots_training.loss_figure(epochs), out.loss)
save_figure(plots_training.iou_time_figure(epochs, target), out.iou_time)
save_figure(plots_training.time_to_target_figure(runs, epochs, target), out.time_to_target)
