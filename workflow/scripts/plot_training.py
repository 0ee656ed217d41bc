"""Snakemake script: runs.csv + epochs.csv -> loss curves, IOU against time, time to the target IOU."""

import sys

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

from scalebench import plots_training
from scalebench.tables import read_epochs, read_runs, save_figure

runs = read_runs(snakemake.input.runs)
epochs = read_epochs(snakemake.input.epochs)
target = snakemake.params.target_iou
out = snakemake.output
save_figure(plots_training.loss_figure(epochs), out.loss)
save_figure(plots_training.iou_time_figure(epochs, target), out.iou_time)
save_figure(plots_training.time_to_target_figure(runs, epochs, target), out.time_to_target)
