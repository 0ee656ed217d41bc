"""Scaling figures for the report (plotnine): speedup, efficiency, IOU, throughput, cost and
the completeness grid (where the time goes: time_split_figures.py).

Every function takes the summary tables and returns a ggplot; with no data to draw it
returns a placeholder that says why, so a partial or tiny study still renders. NaN
values are dropped before plotting (never drawn as zero). The project's own cells are
drawn as filled circles and solid lines; imported studies (source = their label) get
other shapes and dashed lines.
"""

from __future__ import annotations

import math

import pandas as pd
from plotnine import (
    aes,
    element_text,
    facet_grid,
    facet_wrap,
    geom_hline,
    geom_line,
    geom_point,
    geom_ribbon,
    geom_tile,
    ggplot,
    labs,
    scale_fill_manual,
    scale_y_continuous,
    theme,
)

from scalebench.analysis.scaling import (
    GROUP,
    METRICS,
    base_gpus_of,
    epoch_work,
    interval_summary,
    known,
    usable,
)
from scalebench.cell import OWN_SOURCE
from scalebench.records.tables import STATUSES
from scalebench.report.style import (
    STATUS_COLOURS,
    figure_theme,
    gpu_axis,
    per_cell_figure,
    placeholder,
    series_key,
    series_scales,
    tidy,
    wrap,
)


def seed_speedups(runs: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per usable cell that knows `metric`: base time (same seed at the base GPU count, else the
    base mean) / its time. The base GPU count is that of the timings, as in scaling.csv."""
    rows = []
    for _, all_usable in usable(runs).groupby(GROUP, dropna=False):
        base_gpus = base_gpus_of(all_usable)
        group = all_usable[known(all_usable, metric)]
        base = group[group["gpus"] == base_gpus]
        by_seed = base.dropna(subset=["seed"]).set_index("seed")[metric]
        for _, cell in group.iterrows():
            reference = (
                by_seed.get(cell["seed"], base[metric].mean()) if pd.notna(cell["seed"]) else base[metric].mean()
            )
            # per unit of work, as scaling.csv (analysis/scaling.py): fixed-step epochs grow with the GPUs
            work = epoch_work(cell.to_frame().T) / epoch_work(base) if metric != "time_to_target_s" else 1.0
            rows.append({**cell[[*GROUP, "gpus", "seed"]].to_dict(), "speedup": work * reference / cell[metric]})
            rows[-1]["efficiency"] = rows[-1]["speedup"] * base_gpus / cell["gpus"]
    return pd.DataFrame(rows, columns=[*GROUP, "gpus", "seed", "speedup", "efficiency"])


def _scaling_figure(scaling: pd.DataFrame, runs: pd.DataFrame, kind: str, metric: str):
    name = METRICS[metric]
    column = f"{kind}_{name}"
    measure = {
        "train_time": "total training time",
        "epoch_time": "steady-state epoch time",
        "time_to_target": "time to the target validation IOU",
    }[name]
    title = f"{'Speedup' if kind == 'speedup' else 'Parallel efficiency'} of the {measure}"
    means = scaling.dropna(subset=[column])
    if means.empty:
        if name == "time_to_target":
            return placeholder(title, "No ratio: no cell with status ok reached the target at two GPU counts.")
        return placeholder(title, "No cell with status ok: nothing to compare yet.")
    means = tidy(means)
    points = tidy(seed_speedups(runs, metric).rename(columns={kind: column}).dropna(subset=[column]))
    means["series"] = series_key(means)
    points["series"] = series_key(points)
    band = means.dropna(subset=[f"{column}_lo", f"{column}_hi"])
    figure = (
        ggplot(means, aes("gpus", column, colour="backend", group="series"))
        + series_scales(means)
        + gpu_axis(means["gpus"])
        + facet_wrap("~framework")
        + figure_theme()
    )
    if kind == "speedup":
        # one ideal line per base in a panel: fsdp's starts at 2 GPUs where the others start at 1
        ideal = pd.concat(
            pd.DataFrame({"framework": framework, "gpus": sorted(g for g in set(means["gpus"]) if g >= base)})
            .assign(base=base)
            .eval(f"{column} = gpus / base")
            for (framework, base), group in means.groupby(["framework", "base_gpus"])
        )
        figure += geom_line(
            ideal, aes("gpus", column, group="base"), inherit_aes=False, linetype="dashed", colour="grey"
        )
        values = pd.concat([means[column], points[column], ideal[column]]).dropna()
        low, high = math.floor(math.log2(values.min())), math.ceil(math.log2(values.max()))
        breaks = [2.0**k for k in range(low, high + 1)]
        limits = (breaks[0] / 2, breaks[0] * 2) if len(breaks) == 1 else None
        labels = [f"{b:g}" for b in breaks]
        figure += scale_y_continuous(trans="log2", breaks=breaks, labels=labels, minor_breaks=[], limits=limits)
        ylab = "speedup (dashed: ideal)"
    else:
        figure += geom_hline(yintercept=1, linetype="dashed", colour="grey")
        figure += scale_y_continuous(limits=(0, None))
        ylab = "parallel efficiency (dashed: ideal)"
    if not band.empty:
        figure += geom_ribbon(
            band,
            aes(ymin=f"{column}_lo", ymax=f"{column}_hi", fill="backend", group="series"),
            alpha=0.2,
            colour="none",
        )
    figure += geom_line(means, aes(linetype="source"))
    figure += geom_point(points, aes(shape="source"), alpha=0.5, size=1.8)
    figure += geom_point(means, aes(shape="source"), size=3)
    caption = f"{base_note(means)} {interval_summary(scaling, name)}"
    return figure + labs(x="GPUs (ranks)", y=ylab, title=title, caption=wrap(caption))


def base_note(means: pd.DataFrame) -> str:
    """Which GPU count each series is relative to, e.g. 'Relative to the same framework and backend
    on 1 GPU (native, Horovod) or 2 GPUs (FSDP).' (backend labels, as in the legend)."""
    bases = means.dropna(subset=["base_gpus"]).groupby("base_gpus")
    if len(bases) == 1:
        base = next(iter(bases.groups))
        return f"Relative to {base:g} GPU(s) of the same framework and backend."
    parts = []
    for base, group in bases:
        series = sorted(set(group["framework"] + " " + group["backend"].astype(str)))
        parts.append(f"{base:g} GPU{'' if base == 1 else 's'} ({', '.join(series)})")
    return "Relative to the same framework and backend on " + " or ".join(parts) + "."


def speedup_figure(scaling: pd.DataFrame, runs: pd.DataFrame, metric: str = "train_time_s"):
    """Speedup vs GPUs with the ideal line: panel per framework, colour by backend, interval ribbon, seed points."""
    return _scaling_figure(scaling, runs, "speedup", metric)


def efficiency_figure(scaling: pd.DataFrame, runs: pd.DataFrame, metric: str = "train_time_s"):
    """Parallel efficiency vs GPUs, 1 = ideal."""
    return _scaling_figure(scaling, runs, "efficiency", metric)


def iou_figure(runs: pd.DataFrame):
    """Test IOU vs GPUs: the quality cost of the larger global batch."""
    return per_cell_figure(
        runs,
        "iou",
        "Test IOU after training",
        "test IOU (whole test set)",
        "No cell with status ok has a test IOU yet.",
        "Points: one per seed; line: mean over seeds.",
        min_span=0.05,
    )


def throughput_figure(runs: pd.DataFrame):
    """Steady-state images per second per GPU vs GPUs (flat = perfect weak scaling)."""
    return per_cell_figure(
        runs,
        "images_per_s_per_gpu",
        "Throughput per GPU",
        "images / s / GPU (median after epoch 1)",
        "No cell with status ok has a throughput yet.",
        "Flat is perfect scaling. Points: one per seed; line: mean over seeds.",
    )


PER_TRAIN_HOUR = "images / training GPU-hour"


def cost_figure(runs: pd.DataFrame):
    """Images per kilojoule (where energy was measured) and per training GPU-hour (every cell) vs
    GPUs: what the epochs cost, both over the same window (train_gpu_hours; what a cell's job held,
    gpu_hours, is the bill's cost table's). Unmeasured energy is left out, never drawn as zero."""
    ok = runs[runs["status"].eq("ok")]
    panels = []
    for column, label in (("energy_j", "images / kJ"), ("train_gpu_hours", PER_TRAIN_HOUR)):
        per = 1000 if column == "energy_j" else 1
        panel = ok.assign(measure=label, value=ok["images"] / ok[column] * per).dropna(subset=["value"])
        panels.append(panel[panel["value"].map(math.isfinite)])
    cells = pd.concat(panels, ignore_index=True)
    # the title names only the panels drawn; a missing energy panel says why instead
    energy_drawn = not panels[0].empty
    title = (
        "Cost: images per kilojoule and per training GPU-hour" if energy_drawn else "Cost: images per training GPU-hour"
    )
    unmeasured = "" if energy_drawn else f"No images per kilojoule: {unmeasured_energy(ok)}. "
    if cells.empty:
        return placeholder(title, unmeasured + "No cell with status ok has a training time yet.")
    cells = tidy(cells)
    cells["series"] = series_key(cells)
    means = cells.groupby(["measure", "series", *GROUP, "gpus"], as_index=False, observed=True)["value"].mean()
    means["source"] = pd.Categorical(means["source"], categories=cells["source"].cat.categories)
    sources = cells.dropna(subset=["energy_source"])["energy_source"].unique()
    caption = unmeasured + (
        "Training GPU-hours: GPUs x the epochs' summed training time (what the cells' jobs held, start-up "
        "included, is the bill's cost table's gpu_hours). Energy over the same epochs, summed over ranks: "
        f"{', '.join(sorted(sources)) or 'not measured in any cell'} (nvml: the GPUs only; rapl: the nodes' CPU "
        "packages, other jobs on them included). Higher is cheaper. Points: seeds; lines: means."
    )
    return (
        ggplot(cells, aes("gpus", "value", colour="backend", group="series"))
        + geom_line(means, aes(linetype="source"))
        + geom_point(aes(shape="source"), alpha=0.6, size=2)
        + series_scales(cells)
        + gpu_axis(cells["gpus"])
        + facet_grid("measure ~ framework", scales="free_y")
        + labs(x="GPUs (ranks)", y="", title=title, caption=wrap(caption))
        + figure_theme((10, 6))
    )


def unmeasured_energy(cells: pd.DataFrame) -> str:
    """Why no cell has an energy figure, in the cells' own words (runs.csv's energy_reason)."""
    reasons = sorted(cells["energy_reason"].dropna().unique()) if "energy_reason" in cells else []
    if not reasons:
        return "no cell with status ok measured its energy"
    shown = "; ".join(reasons[:2]) + ("; ..." if len(reasons) > 2 else "")
    return f"no cell with status ok measured its energy ({shown})"


def completeness_figure(runs: pd.DataFrame):
    """Status of every cell of the matrix: framework x backend by GPUs x seed."""
    cells = runs[runs["source"] == OWN_SOURCE]
    title = "Completeness of the study"
    if cells.empty:
        return placeholder(title, "The matrix has no cells.")
    cells = tidy(cells)
    cells["cell"] = cells["framework"] + " / " + cells["backend"]
    cells["seed_label"] = "s" + cells["seed"].astype(int).astype(str)
    cells["gpu_label"] = pd.Categorical(
        cells["gpus"].astype(str) + " GPU", categories=[f"{g} GPU" for g in sorted(set(cells["gpus"]))]
    )
    cells["status"] = pd.Categorical(cells["status"], categories=STATUSES)
    counts = cells["status"].value_counts()
    summary = ", ".join(f"{status} {counts[status]}" for status in STATUSES if counts[status])
    return (
        ggplot(cells, aes("seed_label", "cell", fill="status"))
        + geom_tile(colour="white", size=0.8)
        + facet_grid(". ~ gpu_label")
        + scale_fill_manual(values=STATUS_COLOURS, drop=False)
        + labs(x="seed", y="", title=title, caption=f"{len(cells)} cells: {summary}.")
        + figure_theme((max(6, 1.1 * cells["gpus"].nunique() + 3), 1.0 + 0.5 * cells["cell"].nunique() + 1.5))
        + theme(axis_text_x=element_text(size=7), legend_position="right")
    )
