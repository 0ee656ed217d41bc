"""Figures of the latency- and bandwidth-bound regimes (plotnine): each backend's bus bandwidth
against message size with the model's gradient size and the link's peak, and parallel efficiency
against the gradient bytes of each model width. Drawn with the style kit of style.py."""

from __future__ import annotations

import math

import pandas as pd
from plotnine import (
    aes,
    facet_wrap,
    geom_hline,
    geom_line,
    geom_point,
    geom_vline,
    ggplot,
    labs,
    scale_colour_manual,
    scale_linetype_manual,
    scale_x_log10,
    scale_y_log10,
)

from scalebench.analysis.tables import no_variant_as_empty
from scalebench.cell import OWN_SOURCE
from scalebench.report.style import LINETYPES, backend_colours, figure_theme, placeholder, tidy, wrap

OP_NAMES = {
    "all_reduce": "all-reduce",
    "reduce_scatter": "reduce-scatter",
    "all_gather": "all-gather",
    "reduce": "reduce",
    "broadcast": "broadcast",
}
UNITS = ["B", "KiB", "MiB", "GiB"]
GPU_COLOURS = ["#1b6ca8", "#d95f02", "#1b9e77", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d"]


def byte_label(size: float) -> str:
    """4 B, 16 KiB, 256 MiB: a power of two in its unit."""
    unit = min(int(math.log2(size)) // 10, len(UNITS) - 1)
    return f"{size / 2 ** (10 * unit):g} {UNITS[unit]}"


def byte_axis(values) -> scale_x_log10:
    """Message sizes on a log axis, labelled at powers of 4 in B, KiB, MiB and GiB (every other one
    over a wide range); one size alone is widened to a range around it (as gpu_axis does)."""
    low, high = float(min(values)), float(max(values))
    if high < 4 * low:
        low, high = low / 4, high * 4
    first, last = math.ceil(math.log(low, 4)), math.floor(math.log(high, 4))
    step = 1 if last - first <= 8 else 2
    breaks = [4.0**k for k in range(first, last + 1, step)]
    return scale_x_log10(breaks=breaks, labels=[byte_label(b) for b in breaks], minor_breaks=[], limits=(low, high))


def peak_lines(cells: pd.DataFrame, link_gbps: dict | None) -> tuple[pd.DataFrame, str]:
    """The link peaks (cluster.link_gbps) that apply to the cells drawn: within a node for cells on
    one node, between nodes for those on several; and a sentence for the caption."""
    link = link_gbps or {}
    spans = {"intra_node": cells["nodes"].fillna(1) <= 1, "inter_node": cells["nodes"].fillna(1) > 1}
    lines = [
        {"peak": float(link[kind]), "link": kind.replace("_", "-")}
        for kind, where in spans.items()
        if link.get(kind) and where.any()
    ]
    given = ", ".join(f"{line['link']} {line['peak']:g} GB/s" for line in lines)
    if given:
        return pd.DataFrame(lines), f"Dashed lines: the link's peak (cluster.link_gbps: {given})."
    return pd.DataFrame(columns=["peak", "link"]), "No link peak given (cluster.link_gbps): nothing to compare with."


def bandwidth_figure(collectives: pd.DataFrame | None, link_gbps: dict | None = None):
    """Bus bandwidth against message size, a panel per framework, backend (and variant) and
    operation, a line per GPU count (median over seeds); the model's gradient size marked."""
    title = "Collective bus bandwidth against message size"
    measured = collectives.dropna(subset=["busbw_gbps"]) if collectives is not None else pd.DataFrame()
    if measured.empty:
        return placeholder(title, "No cell of more than one GPU has measured its collectives yet.")
    data = tidy(measured.assign(source=OWN_SOURCE))
    data["panel"] = data["framework"] + " " + data["backend"] + ": " + data["op"].map(OP_NAMES).fillna(data["op"])
    keys = ["panel", "gpus", "bytes"]
    curves = data.groupby(keys, as_index=False).agg(busbw_gbps=("busbw_gbps", "median"), nodes=("nodes", "max"))
    counts = sorted(curves["gpus"].unique())
    curves["GPUs"] = pd.Categorical(curves["gpus"].astype(str), categories=[str(g) for g in counts])
    gradients = data[data["size"] == "gradient"].groupby("panel", as_index=False)["bytes"].median()
    peaks, peak_note = peak_lines(curves, link_gbps)
    figure = (
        ggplot(curves, aes("bytes", "busbw_gbps", colour="GPUs", group="GPUs"))
        + geom_line()
        + geom_point(size=1.2)
        + geom_vline(gradients, aes(xintercept="bytes"), linetype="dotted", colour="#555555")
        + facet_wrap("~panel")
        + byte_axis(curves["bytes"])
        + scale_y_log10()
        + scale_colour_manual(values=dict(zip(map(str, counts), GPU_COLOURS * 4)), name="GPUs")
    )
    if len(peaks):
        figure += geom_hline(peaks, aes(yintercept="peak"), linetype="dashed", colour="#b91c1c")
    devices = set(data["device"].dropna())
    cpu = (
        " CPU ranks: these are the host's own reductions (Gloo over loopback, TensorFlow's RING), not a GPU "
        "interconnect's, and say nothing about one."
        if "cpu" in devices
        else ""
    )
    caption = (
        "nccl-tests' bus bandwidth (algorithm bandwidth x 2(n-1)/n for all-reduce, x (n-1)/n for "
        "reduce-scatter and all-gather), median over seeds; dotted: the model's gradient bytes. "
        f"{peak_note}{cpu}"
    )
    return (
        figure
        + labs(x="message size", y="bus bandwidth (GB/s)", title=title, caption=wrap(caption))
        + figure_theme((10, 3.4 * math.ceil(curves["panel"].nunique() / 3) + 1.6))
    )


def efficiency_gradient_figure(scaling: pd.DataFrame, runs: pd.DataFrame):
    """Parallel efficiency of the steady epoch time at each GPU count against the gradient bytes
    of each model width, a line per framework and backend (the variant's other axes kept apart)."""
    title = "Parallel efficiency against gradient bytes"
    own = runs[(runs["source"] == OWN_SOURCE) & (runs["status"] == "ok")].dropna(subset=["gradient_bytes"])
    sizes = own.groupby(["framework", "backend", "variant"], as_index=False)["gradient_bytes"].median()
    rows = scaling[(scaling["source"] == OWN_SOURCE) & (scaling["gpus"] > scaling["base_gpus"])]
    rows = rows.assign(variant=no_variant_as_empty(rows["variant"]))  # read back from CSV: '' is NaN
    data = rows.merge(sizes, on=["framework", "backend", "variant"]).dropna(subset=["efficiency_epoch_time"])
    if data.empty:
        why = "No cell with status ok records its gradient bytes at more GPUs than its base yet."
        return placeholder(title, why)
    data = data.assign(source=OWN_SOURCE, width=data["variant"])
    data["variant"] = data["variant"].str.replace(r"(^|_)width\d+", "", regex=True).str.strip("_")
    data = tidy(data)  # the backend's name with the variant's axes other than the width
    data["series"] = data["framework"] + " " + data["backend"]
    data["GPUs"] = data["gpus"].map(lambda g: f"{g} GPUs")
    frameworks = sorted(set(data["framework"]))
    caption = (
        "Each point is a model width's cells (the variant's widthN), its mean steady-epoch efficiency "
        "against the base GPU count, at the gradient bytes its run.json records (float32, before any "
        "compression). Small gradients: the latency-bound regime; large: the bandwidth-bound one. "
        "Cells from before model.width record no gradient bytes and are left out."
    )
    return (
        ggplot(
            data,
            aes("gradient_bytes", "efficiency_epoch_time", colour="backend", linetype="framework", group="series"),
        )
        + geom_line()
        + geom_point(size=2)
        + geom_hline(yintercept=1.0, linetype="dotted", colour="#888888")
        + facet_wrap("~GPUs")
        + byte_axis(data["gradient_bytes"])
        + scale_colour_manual(values=backend_colours(data["backend"]), name="backend")
        + scale_linetype_manual(values=dict(zip(frameworks, LINETYPES)), name="framework")
        + labs(x="gradient bytes per step", y="parallel efficiency (epoch time)", title=title, caption=wrap(caption))
        + figure_theme()
    )
