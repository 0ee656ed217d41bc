"""Slow hosts and drift (analysis/hosts.py, analysis/drift.py): each host's ranks against the other
hosts' in the same cells and epochs, with intervals; each cell's residuals against the time it started."""

from __future__ import annotations

import numpy as np
import pandas as pd
from plotnine import (
    aes,
    facet_wrap,
    geom_errorbarh,
    geom_hline,
    geom_path,
    geom_point,
    geom_vline,
    ggplot,
    labs,
    scale_colour_manual,
    scale_x_log10,
    scale_y_log10,
)

from scalebench.analysis import drift as drift_analysis
from scalebench.analysis.hosts import MEASURES, MIN_CELLS, ONE_HOST
from scalebench.report.style import figure_theme, placeholder, series_scales, tidy, wrap

VERDICT_COLOURS = {
    "slower or longer": "#d95f02",
    "faster or shorter": "#1b9e77",
    "no different": "#7f7f7f",
    f"too few cells (< {MIN_CELLS})": "#c7c7c7",
}


def verdict_kind(verdict: str) -> str:
    if verdict.startswith(("slower", "longer")):
        return "slower or longer"
    if verdict.startswith(("faster", "shorter")):
        return "faster or shorter"
    if verdict.startswith("too few"):
        return f"too few cells (< {MIN_CELLS})"
    return "no different"


def hosts_figure(hosts: pd.DataFrame):
    """Per measure, each host's ratio to the other hosts' ranks of the same cells and epochs, with
    its interval (Bonferroni over the hosts), coloured by verdict."""
    title = "Hosts: their ranks against the other hosts' ranks of the same cells"
    if hosts is None or hosts.empty:
        return placeholder(title, "No cell with status ok has per-rank rows yet.")
    if (hosts["verdict"] == ONE_HOST).any():
        return placeholder(title, f"One host ({hosts['host'].iloc[0]}) ran every rank: nothing to compare.")
    shown = hosts[np.isfinite(pd.to_numeric(hosts["ratio"], errors="coerce"))].copy()
    if shown.empty:
        return placeholder(title, "No cell had ranks on more than one host: nothing to compare.")
    shown["verdict"] = pd.Categorical(shown["verdict"].map(verdict_kind), categories=list(VERDICT_COLOURS))
    shown["measure"] = pd.Categorical(shown["measure"], categories=list(MEASURES))
    count = shown["host"].nunique()
    caption = (
        "Each point: a host's compute, exposed communication or data wait over the other hosts' ranks in the "
        "same cell and epoch (the median of their medians) (steady epochs), geometric mean over the cells it ran; bars: 95% "
        f"intervals over cells, Bonferroni over the hosts (none under {MIN_CELLS} cells). A host is slower only "
        "where its bar stays right of 1 and the difference is at least 1% of an epoch; exposed communication grows "
        "on the hosts that wait for a slow one (hosts.csv, docs/report.md)."
    )
    return (
        ggplot(shown, aes("ratio", "host", colour="verdict"))
        + geom_vline(xintercept=1, linetype="dashed", colour="#555555")
        + geom_errorbarh(aes(xmin="low", xmax="high"), height=0.3, na_rm=True)
        + geom_point(size=2.5)
        + scale_x_log10()
        + scale_colour_manual(values=VERDICT_COLOURS, drop=False, name="")
        + facet_wrap("~measure", scales="free_x")
        + labs(x="ratio to the other hosts' ranks (log scale)", y="", title=title, caption=wrap(caption))
        + figure_theme((10, min(2.5 + 0.3 * count, 30)))
    )


def drift_figure(order: pd.DataFrame, drift: pd.DataFrame):
    """Per measure, each cell's residual (over the geometric mean of its configuration's seeds) against the hours since
    the study's first start, coloured by backend, with the fitted line where one was fitted."""
    title = "Drift: the cells against the time they started"
    if order is None or order.empty:
        return placeholder(title, "No cells.")
    frames, lines = [], []
    for measure in drift_analysis.MEASURES:
        used = drift_analysis.residual_rows(order, measure)
        if used.empty:
            continue
        frames.append(used.assign(measure=measure, residual=used[drift_analysis.RESIDUALS[measure]].astype(float)))
        verdict = drift.loc[drift["measure"] == measure, "verdict"]
        fit = drift_analysis.line(used, measure) if drift_analysis.dof(used) >= drift_analysis.MIN_DOF else None
        if fit is not None and np.isfinite(fit.slope) and len(verdict):
            hours = np.array([used["hours"].min(), used["hours"].max()])
            fitted = np.exp(fit.slope * (hours - fit.hours))
            lines.append(pd.DataFrame({"measure": measure, "hours": hours, "fitted": fitted}))
    if not frames:
        return placeholder(title, "No cell with status ok has another seed of its configuration to compare with.")
    cells = tidy(pd.concat(frames, ignore_index=True).assign(source="scalebench"))
    cells["measure"] = pd.Categorical(cells["measure"], categories=list(drift_analysis.MEASURES))
    figure = (
        ggplot(cells, aes("hours", "residual"))
        + geom_hline(yintercept=1, linetype="dashed", colour="#555555")
        + geom_point(aes(colour="backend", shape="source"), size=2, alpha=0.8)
        + series_scales(cells)
        + scale_y_log10()
        + facet_wrap("~measure", scales="free_y")
    )
    if lines:
        fitted = pd.concat(lines, ignore_index=True)
        fitted["measure"] = pd.Categorical(fitted["measure"], categories=list(drift_analysis.MEASURES))
        figure += geom_path(fitted, aes("hours", "fitted"), colour="#333333")  # two points, in order
    caption = (
        "Each point: a cell's steady epoch (or its compute, exposed communication, data wait: medians over ranks) "
        "over the geometric mean of its configuration's seeds, against the hours since the study's first start; "
        "line: the least-squares fit of the logarithms within configurations (drift.csv gives its change over the "
        "study with an interval). In a study run in a random order (order.seed), drift is spread over every backend."
    )
    return (
        figure
        + labs(x="hours since the first cell started", y="residual (log scale)", title=title, caption=wrap(caption))
        + figure_theme((10, 6))
    )
