"""Figures for the report (plotnine)."""

from __future__ import annotations

import pandas as pd
from plotnine import (
    aes,
    facet_wrap,
    geom_abline,
    geom_line,
    geom_point,
    ggplot,
    labs,
    scale_x_continuous,
    scale_y_continuous,
    theme,
    theme_bw,
)

BACKEND_LABELS = {"native": "native (DDP / MultiWorkerMirrored)", "horovod": "Horovod"}


def _gpu_axis(values: pd.Series):
    breaks = sorted(set(int(v) for v in values))
    return scale_x_continuous(trans="log2", breaks=breaks)


def speedup_figure(scaling: pd.DataFrame):
    """Speedup of the total training time vs GPUs, ideal line dashed, one panel per framework."""
    data = scaling.assign(backend=scaling["backend"].map(BACKEND_LABELS).fillna(scaling["backend"]))
    return (
        ggplot(data, aes("gpus", "speedup_train_time_s", colour="backend"))
        + geom_abline(slope=1, intercept=0, linetype="dashed", colour="grey")
        + geom_line()
        + geom_point(size=2.5)
        + facet_wrap("~framework")
        + _gpu_axis(data["gpus"])
        + scale_y_continuous(trans="log2")
        + labs(x="GPUs (ranks)", y="speedup of training time", colour="backend")
        + theme_bw()
        + theme(figure_size=(8, 4), legend_position="bottom")
    )
