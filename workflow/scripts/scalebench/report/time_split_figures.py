"""Why a backend scales as it does, from the step split's critical path (timing/step_split.py):
where a steady epoch's time goes, how unevenly the ranks compute, and the exposed communication's
share beside the parallel efficiency. Drawn with the style kit of style.py; a cell that predates the split
shows its data wait and the rest unsplit, never zeros."""

from __future__ import annotations

import pandas as pd
from plotnine import (
    aes,
    facet_grid,
    facet_wrap,
    geom_col,
    geom_line,
    geom_point,
    geom_text,
    ggplot,
    labs,
    scale_fill_manual,
    scale_x_continuous,
    scale_y_continuous,
)

from scalebench.analysis.scaling import GROUP
from scalebench.cell import OWN_SOURCE
from scalebench.report.scaling_figures import seed_speedups
from scalebench.report.style import (
    figure_theme,
    gpu_axis,
    per_cell_figure,
    placeholder,
    series_key,
    series_scales,
    tidy,
    wrap,
)

PART_COLOURS = {
    "compute": "#7fa7c9",
    "imbalance (stragglers)": "#e6ab02",
    "exposed communication": "#d95f02",
    "waiting for data": "#7570b3",
    "rest": "#d9d9d9",
    "not split (the cell predates the step split)": "#9e9e9e",
}
SPLIT = {  # part: runs.csv column of the critical path (timing/step_split.py), per steady epoch
    "compute": "compute_typical_s",
    "imbalance (stragglers)": "imbalance_s",
    "exposed communication": "comm_exposed_critical_s",
    "waiting for data": "data_wait_critical_s",
    "rest": "rest_critical_s",
}
UNSPLIT = "not split (the cell predates the step split)"
EFFICIENCY, SHARE = "parallel efficiency", "exposed comm. share"


def parts(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per cell and part: its seconds per steady epoch. A cell without the split (an older
    record, training.step_split off) has its mean data wait and the rest of its epoch, unsplit."""
    rows = []
    for _, cell in cells.iterrows():
        if pd.notna(cell["compute_typical_s"]):
            rows += [{**cell.to_dict(), "part": part, "seconds": cell[column]} for part, column in SPLIT.items()]
        elif pd.notna(cell["data_wait_s"]) and cell["epochs"]:
            wait = cell["data_wait_s"] / cell["epochs"]
            rest = max(cell["train_time_s"] / cell["epochs"] - wait, 0.0)
            rows += [
                {**cell.to_dict(), "part": "waiting for data", "seconds": wait},
                {**cell.to_dict(), "part": UNSPLIT, "seconds": rest},
            ]
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame = frame.dropna(subset=["seconds"])
        frame["part"] = pd.Categorical(frame["part"], categories=[*SPLIT, UNSPLIT][::-1])
    return frame


def time_split_figure(runs: pd.DataFrame):
    """Where a steady epoch's time goes, per cell: compute, exposed communication, data wait, the rest.

    One panel per framework / backend; bars grouped by GPU count, one bar per seed (a numeric x
    axis: a panel per GPU count would be slow to draw and hard to read)."""
    cells = runs[runs["source"] == OWN_SOURCE].dropna(subset=["epochs"])
    cells = cells[cells["epochs"] > 0]
    title = "Where the time goes (steady epoch, critical path)"
    long = parts(cells) if not cells.empty else pd.DataFrame()
    if long.empty:
        return placeholder(title, "No cell has epoch records with a step split or data-wait times yet.")
    long = tidy(long)
    long["cell"] = long["framework"] + " / " + long["backend"]
    sizes, seeds = sorted(set(long["gpus"])), sorted(set(long["seed"]))
    slot = len(seeds) + 1
    long["x"] = [sizes.index(g) * slot + seeds.index(s) for g, s in zip(long["gpus"], long["seed"])]
    panels = long["cell"].nunique()
    centres = [i * slot + (len(seeds) - 1) / 2 for i in range(len(sizes))]
    seed_note = f"seeds {', '.join(str(int(s)) for s in seeds)}" if len(seeds) > 1 else f"seed {int(seeds[0])}"
    caption = (
        f"Bars within a GPU group: {seed_note}. The steady median epoch (after the first, without a profiled "
        "one) along its critical path: the median rank's compute, the critical rank's compute above it "
        "(imbalance: stragglers), the exposed communication the critical rank waited for (the reduction, not "
        "its peers), its data wait, and the rest. Failed cells: the epochs they finished."
    )
    return (
        ggplot(long, aes("x", "seconds", fill="part"))
        + geom_col(width=0.85)
        + facet_wrap("~cell", ncol=min(panels, 2), scales="free_y")
        + scale_x_continuous(breaks=centres, labels=[str(g) for g in sizes], minor_breaks=[])
        + scale_fill_manual(values=PART_COLOURS)
        + labs(
            x="GPUs (one bar per seed, in order)", y="seconds per epoch", fill="", title=title, caption=wrap(caption)
        )
        + figure_theme((4.5 * min(panels, 2) + 1, 3.0 * -(-panels // 2) + 1.5))
    )


def straggler_figure(runs: pd.DataFrame):
    """How unevenly the ranks compute, against GPUs: (largest - smallest) / median of their compute
    time per steady epoch, each point labelled with the rank that computed longest (r<rank>)."""
    figure = per_cell_figure(
        runs,
        "compute_spread",
        "Stragglers: spread of the ranks' compute time",
        "(max - min) / median of the ranks' compute",
        "No cell with status ok has a step split on several ranks yet.",
        "0: every rank computes alike. Labels: the rank with the largest compute in most steady epochs "
        "(runs.csv straggler_rank, straggler_host). Points: one per seed; line: mean over seeds.",
    )
    if figure.data is None or not len(figure.data):
        return figure
    labelled = figure.data.dropna(subset=["straggler_rank"]).assign(
        label=lambda frame: "r" + frame["straggler_rank"].astype(int).astype(str)
    )
    span = float(figure.data["compute_spread"].max() - figure.data["compute_spread"].min()) or 0.1
    return figure + geom_text(labelled, aes(label="label"), size=7, nudge_y=0.06 * span, show_legend=False)


def comm_share_figure(runs: pd.DataFrame):
    """The parallel efficiency of the steady epoch and the share of it spent in exposed
    communication, against GPUs: which part grew as GPUs were added."""
    title = "Parallel efficiency and the exposed communication's share"
    ok = runs[runs["status"].eq("ok")]
    efficiency = seed_speedups(ok, "steady_epoch_s").dropna(subset=["efficiency"])
    measures = [
        efficiency.assign(measure=EFFICIENCY, value=efficiency["efficiency"]),
        ok.assign(measure=SHARE, value=ok["comm_share"]),
    ]
    cells = pd.concat([frame[[*GROUP, "gpus", "seed", "measure", "value"]] for frame in measures], ignore_index=True)
    cells = cells.dropna(subset=["value"])
    if cells[cells["measure"] == SHARE].empty:
        return placeholder(title, "No cell with status ok has a step split yet.")
    cells = tidy(cells)
    cells["series"] = series_key(cells)
    cells["measure"] = pd.Categorical(cells["measure"], categories=[EFFICIENCY, SHARE])
    means = cells.groupby(["measure", "series", *GROUP, "gpus"], as_index=False, observed=True)["value"].mean()
    means["source"] = pd.Categorical(means["source"], categories=cells["source"].cat.categories)
    caption = (
        "Top: the efficiency of the steady epoch against the series' smallest GPU count (as scaling.csv). "
        "Bottom: the exposed communication the critical rank waited for, per steady epoch, over the epoch time "
        "(a peer's lateness is imbalance, not communication): where it grows with the GPUs, the reduction is "
        "what the efficiency lost. Points: seeds; lines: means."
    )
    return (
        ggplot(cells, aes("gpus", "value", colour="backend", group="series"))
        + geom_line(means, aes(linetype="source"))
        + geom_point(aes(shape="source"), alpha=0.6, size=2)
        + scale_y_continuous(limits=(0, None))
        + series_scales(cells)
        + gpu_axis(cells["gpus"])
        + facet_grid("measure ~ framework", scales="free_y")
        + labs(x="GPUs (ranks)", y="", title=title, caption=wrap(caption))
        + figure_theme((10, 6))
    )
