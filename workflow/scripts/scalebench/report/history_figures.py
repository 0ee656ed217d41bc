"""The History section's figures: each key figure across the studies of the history, a point per
study with its 95% interval, a line per series (backend, site, settings), and a dashed line where
a change point was found (analysis/history_changes.py)."""

from __future__ import annotations

import pandas as pd
from plotnine import (
    aes,
    facet_grid,
    geom_errorbar,
    geom_line,
    geom_point,
    geom_vline,
    ggplot,
    labeller,
    labs,
    scale_colour_manual,
    scale_shape_manual,
    scale_x_continuous,
)

from scalebench.analysis.history_changes import FIGURES
from scalebench.report.style import backend_colours, figure_theme, placeholder, tidy, wrap

# the panels' names: short, so that they fit beside the panel
PANELS = {
    "efficiency": "efficiency",
    "images_per_s_per_gpu": "images/s per GPU",
    "time_to_target_s": "to target (s)",
    "busbw_gbps": "bus bw (GB/s)",
    **{
        name: name.removeprefix("waterfall_").replace("_", " ") + " (s)"
        for name in FIGURES
        if name.startswith("waterfall_")
    },
}
KEY_FIGURES = ["efficiency", "images_per_s_per_gpu", "time_to_target_s", "busbw_gbps"]


def history_figure(series: pd.DataFrame, changes: pd.DataFrame, waterfall: bool = False):
    """The key figures (or, `waterfall`, the loss waterfall's terms) against the study's place in the
    history, faceted by figure and GPU count."""
    shown = [
        name for name in FIGURES if name.startswith("waterfall_") == waterfall and (waterfall or name in KEY_FIGURES)
    ]
    title = "The loss waterfall across the studies" if waterfall else "Key figures across the studies of the history"
    data = series[series["figure"].isin(shown)]
    if data.empty:
        return placeholder(title, "No study of the history has these figures yet.")
    data, found = labelled(data), labelled(changes[changes["figure"].isin(shown)])
    positions = sorted(data["position"].unique())
    figure = (
        ggplot(data, aes("position", "value", colour="backend", group="line"))
        + geom_line()
        + geom_errorbar(aes(ymin="low", ymax="high"), width=0.3)
        + geom_point(aes(shape="this_study"), size=1.8)
        + facet_grid("panel ~ gpus", scales="free_y", labeller=labeller(cols="label_both"))
        + scale_colour_manual(values=backend_colours(data["backend"]), name="backend")
        + scale_shape_manual(values={"earlier": "o", "this study": "^"}, name="")
        + scale_x_continuous(breaks=positions, minor_breaks=[])
    )
    if len(found):
        figure += geom_vline(
            found.assign(at=found["position"] - 0.5), aes(xintercept="at", colour="backend"), linetype="dashed"
        )
    sites = len(data[["site", "config_hash"]].drop_duplicates())
    caption = (
        "A point per study (its place in the history, oldest first; the triangle is this study) with its 95% "
        "interval from the study's own seeds; dashed: a change point found in that backend's series "
        "(results/summary/changes.csv)."
        + (f" {sites} sites or settings, each its own line, never compared." if sites > 1 else "")
    )
    height = 1.9 * data["panel"].nunique() + 1.8
    return figure + labs(x="study", y="", title=title, caption=wrap(caption)) + figure_theme((10, height))


def labelled(frame: pd.DataFrame) -> pd.DataFrame:
    """Backend labels as the report names them, a panel name per figure, a line per series."""
    if frame.empty:
        return frame.assign(panel=[], line=[])
    frame = tidy(frame.assign(source="scalebench"))
    frame["panel"] = [
        FIGURES[name][0] + (f" ({FIGURES[name][1]})" if FIGURES[name][1] else "") for name in frame["figure"]
    ]
    frame["line"] = frame["framework"] + " " + frame["backend"] + "|" + frame["site"] + "|" + frame["config_hash"]
    if "this_study" in frame:
        frame["this_study"] = frame["this_study"].map({True: "this study", False: "earlier"})
    return frame
