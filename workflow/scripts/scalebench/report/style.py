"""The report's style kit: the backends' legend labels and colours, the statuses' colours, the
theme, the GPU axis, the series scales, placeholders for empty figures, captions, saving, and the
figure of one value per cell against GPUs that several figures share.

Every figure module draws with these, so the report reads the same everywhere: colour by backend,
shape and line type by source (own runs vs imported studies), a log2 GPU axis, the legend below.
"""

from __future__ import annotations

import textwrap

import pandas as pd
from plotnine import (
    aes,
    annotate,
    element_text,
    facet_wrap,
    geom_line,
    geom_point,
    ggplot,
    guide_legend,
    guides,
    labs,
    scale_colour_manual,
    scale_fill_manual,
    scale_linetype_manual,
    scale_shape_manual,
    scale_x_continuous,
    scale_y_continuous,
    theme,
    theme_bw,
    theme_void,
)

from scalebench.analysis.scaling import GROUP
from scalebench.cell import OWN_SOURCE
from scalebench.report.legend import backend_label, backend_label_colours

# backends with a variant of the optional axes (batch8_bf16, ...): a colour each, after the plain ones
VARIANT_COLOURS = ["#66a61e", "#e6ab02", "#a6761d", "#666666", "#a6cee3", "#fb9a99", "#cab2d6", "#b2df8a", "#fdbf6f"]
STATUS_COLOURS = {
    "ok": "#4daf4a",
    "stale": "#a6761d",
    "diverged": "#ff7f00",
    "oom": "#984ea3",
    "refused": "#f781bf",
    "failed": "#e41a1c",
    "held": "#377eb8",  # ended by the study after its SLURM job sat in such a state (cluster/stuck_jobs.py)
    "suspended": "#80b1d3",
    "preempted": "#fdb462",
    "stuck": "#b15928",
    "unreadable": "#666666",
    "missing": "#bdbdbd",
}
SHAPES = ["o", "^", "s", "D", "v", "P"]
LINETYPES = ["solid", "dashed", "dotted", "dashdot"]
WIDE = (10, 4.5)


def placeholder(title: str, reason: str):
    """An empty figure that says what is missing instead of crashing."""
    return (
        ggplot()
        + annotate("text", x=0, y=0, label=reason, size=12, colour="#555555")
        + labs(title=title)
        + theme_void()
        + theme(figure_size=(8, 2.5), plot_title=element_text(size=12, ha="center"))
    )


def wrap(text: str, width: int = 110) -> str:
    """Captions on several lines so they fit the figure's width."""
    return textwrap.fill(text, width)


def tidy(frame: pd.DataFrame) -> pd.DataFrame:
    """Readable backend names (with the variant of the optional axes where there is one: 'native
    bf16'), sources own-first, integer GPU counts."""
    frame = frame.copy()
    frame["backend"] = frame["backend"].map(backend_label)
    if "variant" in frame:
        # a study without optional axes reads its empty variant column as float NaN
        variants = frame["variant"].astype(object).where(frame["variant"].notna(), "").astype(str)
        frame["backend"] = [" ".join(filter(None, pair)) for pair in zip(frame["backend"], variants)]
    sources = [OWN_SOURCE] + sorted(set(frame["source"]) - {OWN_SOURCE})
    frame["source"] = pd.Categorical(frame["source"], categories=sources)
    frame["gpus"] = frame["gpus"].astype(int)
    return frame


def backend_colours(labels) -> dict[str, str]:
    """A colour per backend label: the backend's own for a plain one, the next of VARIANT_COLOURS
    for each label with a variant."""
    colours, extra = {}, iter(VARIANT_COLOURS * (1 + len(set(labels)) // len(VARIANT_COLOURS)))
    own = backend_label_colours()
    for label in sorted(set(labels)):
        colours[label] = own.get(label) or next(extra)
    return colours


def series_scales(frame: pd.DataFrame) -> list:
    """Colour by backend; shape and line type by source (own runs vs imported studies).
    The source legend is left out when there is only the project's own runs."""
    sources = list(frame["source"].cat.categories) if len(frame) else [OWN_SOURCE]
    hide = [guides(shape="none", linetype="none")] if sources == [OWN_SOURCE] else []
    colours = backend_colours(frame["backend"]) if len(frame) else backend_label_colours()
    if len(colours) > 4:  # variants' long labels: two columns, so the legend stays inside the figure
        hide.append(guides(colour=guide_legend(ncol=2), fill=guide_legend(ncol=2)))
    return hide + [
        scale_colour_manual(values=colours, name="backend"),
        scale_fill_manual(values=colours, name="backend"),
        scale_shape_manual(values=dict(zip(sources, SHAPES)), name="source", drop=False),
        scale_linetype_manual(values=dict(zip(sources, LINETYPES)), name="source", drop=False),
    ]


def gpu_axis(values) -> scale_x_continuous:
    breaks = sorted({int(v) for v in values})
    # One GPU count has no range to draw: widen it so the single value sits in the middle.
    limits = (breaks[0] / 2, breaks[0] * 2) if len(breaks) == 1 else None
    return scale_x_continuous(
        trans="log2", breaks=breaks, labels=[str(b) for b in breaks], minor_breaks=[], limits=limits
    )


def figure_theme(size: tuple[float, float] = WIDE):
    """The report's theme: white panels, the legend below, `size` inches."""
    return theme_bw() + theme(figure_size=size, legend_position="bottom", legend_box="horizontal")


def series_key(frame: pd.DataFrame) -> pd.Series:
    """One line per source, framework and backend label: the `group` of every line drawn."""
    return frame["source"].astype(str) + "/" + frame["framework"] + "/" + frame["backend"]


def per_cell_figure(
    runs: pd.DataFrame, column: str, title: str, ylab: str, empty: str, caption: str = "", min_span: float = 0.0
):
    """Seed points and a mean line per series against GPUs; the y axis spans at least `min_span`
    so that differences in the noise do not fill the whole panel."""
    cells = runs[runs["status"].eq("ok")].dropna(subset=[column])
    if cells.empty:
        return placeholder(title, empty)
    cells = tidy(cells)
    cells["series"] = series_key(cells)
    means = cells.groupby(["series", *GROUP, "gpus"], as_index=False, observed=True)[column].mean()
    means["source"] = pd.Categorical(means["source"], categories=cells["source"].cat.categories)
    low, high = cells[column].min(), cells[column].max()
    pad = max(0.0, min_span - (high - low)) / 2
    limits = (low - pad, high + pad) if pad else None
    return (
        ggplot(cells, aes("gpus", column, colour="backend", group="series"))
        + scale_y_continuous(limits=limits)
        + geom_line(means, aes(linetype="source"))
        + geom_point(aes(shape="source"), alpha=0.6, size=2)
        + series_scales(cells)
        + gpu_axis(cells["gpus"])
        + facet_wrap("~framework")
        + labs(x="GPUs (ranks)", y=ylab, title=title, caption=wrap(caption))
        + figure_theme()
    )
