"""The loss waterfall (analysis/waterfall.py) as a figure: per framework / backend, at each GPU count
beyond the base, the measured steady epoch stacked from its ideal, so a reader sees which cause grows
with the GPU count. A term below zero (the cell did better than the base, scaled, in that part) is
drawn faint, going down from where the stack stood."""

from __future__ import annotations

import pandas as pd
from plotnine import (
    aes,
    facet_wrap,
    geom_errorbar,
    geom_point,
    geom_rect,
    geom_segment,
    ggplot,
    labs,
    scale_alpha_identity,
    scale_fill_manual,
    scale_x_continuous,
)

from scalebench.analysis import waterfall as losses
from scalebench.report.style import figure_theme, placeholder, wrap

TERM_COLOURS = {
    losses.LABELS["ideal"]: "#bdbdbd",
    losses.LABELS["compute_growth"]: "#7fa7c9",
    losses.LABELS["imbalance"]: "#e6ab02",
    losses.LABELS["exposed_comm"]: "#d95f02",
    losses.LABELS["data_wait"]: "#7570b3",
    losses.LABELS["rest"]: "#8c8c8c",
}
HALF_WIDTH = 0.35


def stacked(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(one rectangle per GPU count and term, one measured point per GPU count, one ideal line per GPU
    count) of the drawn table. The ideal gets a line of its own: where a term below zero is followed by
    terms above it, their boxes cover the ideal's top."""
    rects, measured, ideals = [], [], []
    table = table.dropna(subset=["seconds"])
    for (series, gpus), rows in table.groupby(["series", "gpus"], sort=True):
        values = rows.set_index("term")
        x = float(values["x"].iloc[0])
        ideal = float(values.loc["ideal", "seconds"])
        ideals.append({"series": series, "xmin": x - HALF_WIDTH, "xmax": x + HALF_WIDTH, "seconds": ideal})
        top = 0.0
        for term in ["ideal", *losses.PARTS]:
            seconds = float(values.loc[term, "seconds"])
            low, high = sorted((top, top + seconds))
            rects.append(
                {
                    "series": series,
                    "gpus": gpus,
                    "term": losses.LABELS[term],
                    "seconds": seconds,
                    "xmin": x - HALF_WIDTH,
                    "xmax": x + HALF_WIDTH,
                    "ymin": low,
                    "ymax": high,
                    "alpha": 1.0 if seconds >= 0 else 0.35,
                }
            )
            top += seconds
        total = values.loc["measured"]
        measured.append(
            {"series": series, "x": x, "seconds": total["seconds"], "low": total["low"], "high": total["high"]}
        )
    return pd.DataFrame(rects), pd.DataFrame(measured), pd.DataFrame(ideals)


def waterfall_figure(table: pd.DataFrame):
    """The loss waterfall of every series beyond its base count (module docstring)."""
    title = "The loss waterfall: what each GPU count cost, and to which cause"
    if table.empty:
        return placeholder(
            title, "No series has usable cells at two GPU counts: nothing beyond a base count to explain."
        )
    drawn = table.dropna(subset=["seconds"]).copy()
    if drawn.empty:
        reasons = "; ".join(sorted(set(table["reason"]) - {""}))
        return placeholder(title, f"No GPU count could be split: {reasons}.")
    variant = drawn["variant"].fillna("")
    drawn["series"] = drawn["framework"] + " / " + drawn["backend"] + variant.map(lambda v: f" ({v})" if v else "")
    sizes = sorted(set(drawn["gpus"]))
    drawn["x"] = drawn["gpus"].map(sizes.index)
    rects, measured, ideals = stacked(drawn)
    rects["term"] = pd.Categorical(rects["term"], categories=list(TERM_COLOURS))
    panels = rects["series"].nunique()
    left_out = sorted(set(table.loc[table["seconds"].isna(), "reason"]) - {""})
    caption = (
        "At each GPU count beyond the series' base: the ideal steady epoch (the base's, scaled as the efficiency "
        "scales it) and on it, in order, the growth of the typical rank's compute, imbalance (stragglers: the "
        "critical rank's compute above it), the exposed communication the critical rank waited for, data wait and "
        "the rest, each above the base's scaled; they stack to the measured epoch (black point, with the 95% "
        "interval over seeds). Means over seeds. Faint boxes: a term below zero, drawn downwards. Dashed line: the ideal."
        + (f" Left out: {'; '.join(left_out)}." if left_out else "")
    )
    return (
        ggplot(rects, aes(xmin="xmin", xmax="xmax", ymin="ymin", ymax="ymax", y="ymax"))
        + geom_rect(aes(fill="term", alpha="alpha"))
        + geom_segment(
            ideals, aes(x="xmin", xend="xmax", y="seconds", yend="seconds"), linetype="dashed", inherit_aes=False
        )
        + geom_errorbar(measured, aes(x="x", ymin="low", ymax="high"), width=0.2, inherit_aes=False)
        + geom_point(measured, aes(x="x", y="seconds"), size=2.2, inherit_aes=False)
        + scale_alpha_identity()
        + scale_fill_manual(values=TERM_COLOURS, drop=False)
        + scale_x_continuous(breaks=list(range(len(sizes))), labels=[str(g) for g in sizes], minor_breaks=[])
        + facet_wrap("~series", ncol=min(panels, 3), scales="free_y")
        + labs(x="GPUs (ranks)", y="seconds per steady epoch", fill="", title=title, caption=wrap(caption))
        + figure_theme((4.2 * min(panels, 3) + 1.5, 3.2 * -(-panels // 3) + 1.8))
    )
