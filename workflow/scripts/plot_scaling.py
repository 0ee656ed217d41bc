"""Snakemake script: runs.csv + scaling.csv -> the scaling figures and the completeness grid."""

import sys

sys.stdout = sys.stderr = open(snakemake.log[0], "w", buffering=1)

import pandas as pd
from scalebench.analysis.summary_csv import read_runs
from scalebench.report import scaling_figures as plots
from scalebench.report.model_figures import model_figure
from scalebench.report.save import save_figure

runs = read_runs(snakemake.input.runs)
scaling = pd.read_csv(snakemake.input.scaling)
out = snakemake.output
save_figure(plots.speedup_figure(scaling, runs, "train_time_s"), out.speedup)
save_figure(plots.speedup_figure(scaling, runs, "steady_epoch_s"), out.speedup_epoch)
save_figure(plots.efficiency_figure(scaling, runs, "train_time_s"), out.efficiency)
save_figure(plots.efficiency_figure(scaling, runs, "steady_epoch_s"), out.efficiency_epoch)
save_figure(plots.speedup_figure(scaling, runs, "time_to_target_s"), out.speedup_target)
save_figure(plots.efficiency_figure(scaling, runs, "time_to_target_s"), out.efficiency_target)
save_figure(plots.iou_figure(runs), out.iou)
save_figure(plots.throughput_figure(runs), out.throughput)
save_figure(plots.time_split_figure(runs), out.time_split)
save_figure(model_figure(runs, snakemake.params.per_node), out.model)
save_figure(plots.cost_figure(runs), out.cost)
save_figure(plots.completeness_figure(runs), out.completeness)
