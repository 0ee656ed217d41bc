"""Figures of the training runs themselves (plotnine): loss curves, validation IOU against
wall-clock time, and time to reach the target validation IOU. Drawn with the style kit of style.py."""

from __future__ import annotations

import pandas as pd
from plotnine import (
    aes,
    facet_wrap,
    geom_hline,
    geom_line,
    geom_point,
    ggplot,
    guides,
    labs,
    scale_colour_cmap_d,
    scale_linetype_manual,
    scale_x_continuous,
    scale_x_log10,
    scale_y_continuous,
)

from scalebench.cell import OWN_SOURCE
from scalebench.report.style import LINETYPES, figure_theme, per_cell_figure, placeholder, tidy

PANEL = "framework + backend"


def _gpu_colours(frame: pd.DataFrame) -> pd.DataFrame:
    levels = sorted(set(frame["gpus"]))
    return frame.assign(gpu_label=pd.Categorical(frame["gpus"].astype(str), categories=[str(g) for g in levels]))


def _cell_group(frame: pd.DataFrame) -> pd.Series:
    return frame["source"].astype(str) + "/" + frame["gpus"].astype(str) + "/" + frame["seed"].astype(str)


def _panel_size(frame: pd.DataFrame) -> tuple[float, float]:
    panels = frame.groupby(["framework", "backend"]).ngroups
    columns = min(panels, 2)
    rows = -(-panels // columns)
    return (4.5 * columns + 1, 3.2 * rows + 1.5)


def loss_figure(epochs: pd.DataFrame):
    """Training loss per epoch, mean over seeds: panel per framework x backend, colour by GPUs.

    The mean keeps the figure readable (and quick) with many seeds; the spread across
    seeds is in epochs.csv."""
    data = epochs.dropna(subset=["loss", "epoch"])
    title = "Training loss"
    if data.empty:
        return placeholder(title, "No epoch records yet.")
    data = tidy(data)
    keys = ["source", "framework", "backend", "gpus", "epoch"]
    means = data.groupby(keys, observed=True, as_index=False).agg(loss=("loss", "mean"), seeds=("loss", "size"))
    means = _gpu_colours(means)
    means["source"] = pd.Categorical(means["source"], categories=data["source"].cat.categories)
    means["curve"] = means["source"].astype(str) + "/" + means["gpus"].astype(str)
    sources = list(data["source"].cat.categories)
    figure = (
        ggplot(means, aes("epoch", "loss", colour="gpu_label", group="curve", linetype="source"))
        + geom_line(alpha=0.9)
        + facet_wrap(f"~{PANEL}", ncol=2)
        + scale_colour_cmap_d("viridis", name="GPUs")
        + scale_linetype_manual(values=dict(zip(sources, LINETYPES)), name="source", drop=False)
        + scale_y_continuous(trans="log10")
        + labs(
            x="epoch",
            y="training loss (log scale)",
            title=title,
            caption="One line per GPU count: the mean over seeds (failed cells up to their last epoch).",
        )
        + figure_theme(_panel_size(means))
    )
    if sources == [OWN_SOURCE]:
        figure += guides(linetype="none")
    return figure


NO_VALIDATION = "No epoch record carries a validation IOU (set training.eval_every > 0)."


def iou_time_figure(epochs: pd.DataFrame, target_iou: float):
    """Validation IOU against training wall-clock time, colour by GPUs (needs training.eval_every > 0)."""
    data = epochs.dropna(subset=["val_iou", "train_time_s"])
    title = "Validation IOU against training time"
    if data.empty:
        return placeholder(title, NO_VALIDATION)
    data = _gpu_colours(tidy(data))
    data["cell"] = _cell_group(data)
    # Many GPU counts span orders of magnitude in time: a log axis keeps the large cells visible.
    wide = data["train_time_s"].max() > 20 * data["train_time_s"].min() > 0
    xlab = "training time (s, cumulative; evaluation excluded" + ("; log scale)" if wide else ")")
    return (
        ggplot(data, aes("train_time_s", "val_iou", colour="gpu_label", group="cell"))
        + (scale_x_log10() if wide else scale_x_continuous())
        + geom_hline(yintercept=target_iou, linetype="dashed", colour="grey")
        + geom_line(alpha=0.8)
        + geom_point(size=1.2)
        + facet_wrap(f"~{PANEL}", ncol=2)
        + scale_colour_cmap_d("viridis", name="GPUs")
        + labs(
            x=xlab,
            y="validation IOU",
            title=title,
            caption=f"Dashed: the target IOU {target_iou:g} (training.target_iou). One line per cell.",
        )
        + figure_theme(_panel_size(data))
    )


def time_to_target_figure(runs: pd.DataFrame, epochs: pd.DataFrame, target_iou: float):
    """Training time until validation IOU first reached the target, per cell, against GPUs."""
    title = f"Time to reach validation IOU {target_iou:g}"
    evaluated = epochs.dropna(subset=["val_iou"])
    if evaluated.empty:
        return placeholder(title, NO_VALIDATION)
    own = runs[(runs["source"] == OWN_SOURCE) & runs["status"].eq("ok")]
    keys = ["source", "framework", "backend", "gpus", "seed"]
    was_evaluated = own.merge(evaluated[keys].drop_duplicates(), on=keys)
    never = int(was_evaluated["time_to_target_s"].isna().sum())
    caption = (
        f"Points: one per seed; line: mean. {never} evaluated cell(s) never reached the target and are not "
        "drawn (runs.csv time_to_target_reason says why)."
    )
    return per_cell_figure(
        runs,
        "time_to_target_s",
        title,
        "training time to target (s)",
        f"No cell reached validation IOU {target_iou:g} (training.target_iou); {never} cell(s) evaluated.",
        caption,
    )
