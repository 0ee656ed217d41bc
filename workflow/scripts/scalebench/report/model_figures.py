"""The scaling model's figure: per framework and backend, the measured epoch times, the fit with
its 95% band, the fit's split into compute and communication, and the predicted point at twice
the largest measured GPU count (marked as a prediction). Same conventions as scaling_figures.py."""

from __future__ import annotations

import pandas as pd
from plotnine import (
    aes,
    facet_wrap,
    geom_line,
    geom_point,
    geom_ribbon,
    geom_text,
    ggplot,
    labs,
    scale_colour_manual,
    scale_linetype_manual,
    scale_y_continuous,
)

from scalebench.analysis.collect import OWN_SOURCE
from scalebench.analysis.scaling_model import GROUP, METRIC, Fit, curve, fits, series_columns
from scalebench.report.scaling_figures import BACKEND_LABELS, gpu_axis, placeholder, style, wrap

PARTS = {"fit (total)": "#333333", "compute": "#1b6ca8", "communication": "#d95f02"}
RANGES = {"measured range": "solid", "extrapolated": "dashed"}


def series_name(key: tuple) -> str:
    """'torch/native' or 'torch/native/bf16' for a caption."""
    return "/".join(str(part) for part in key[1:] if part)


def panel_name(key: tuple, fit: Fit) -> str:
    """'torch / Horovod' (and the variant: 'torch / Horovod bf16'), with the source where it is not
    the project's own, and POOR FIT where so."""
    source, framework, backend, variant = key
    name = f"{framework} / {BACKEND_LABELS.get(backend, backend)}" + (f" {variant}" if variant else "")
    if source != OWN_SOURCE:
        name += f" ({source})"
    return name + (" — POOR FIT" if fit.poor else "")


def model_figure(runs: pd.DataFrame, per_node: int | None = None):
    """Epoch time against GPUs with the fitted model, per (source, framework, backend, variant)."""
    title = "Why it scales as it does: epoch time, the fitted model and a prediction"
    fitted = {key: fit for key, fit in fits(runs, per_node).items() if isinstance(fit, Fit)}
    refused = {key: fit.reason for key, fit in fits(runs, per_node).items() if not isinstance(fit, Fit)}
    if not fitted:
        reasons = "; ".join(f"{series_name(k)}: {r}" for k, r in refused.items()) or "no cells"
        return placeholder(title, wrap(f"No series could be fitted ({reasons}).", 80))
    lines, bands, predicted = [], [], []
    for key, fit in fitted.items():
        panel = panel_name(key, fit)
        largest = int(fit.points["gpus"].max())
        fitted_curve = curve(fit).assign(panel=panel)
        fitted_curve["range"] = ["measured range" if g <= largest else "extrapolated" for g in fitted_curve["gpus"]]
        bands.append(fitted_curve)
        for part, column in (
            ("fit (total)", "epoch_s"),
            ("compute", "compute_s"),
            ("communication", "communication_s"),
        ):
            part_curve = fitted_curve[["gpus", "range", "panel"]].assign(part=part, seconds=fitted_curve[column])
            # the measured and extrapolated pieces share the boundary point so the line is unbroken
            boundary = part_curve[part_curve["gpus"] == largest].assign(range="extrapolated")
            lines.append(pd.concat([part_curve, boundary]))
        columns = series_columns(fit)
        predicted.append(
            {
                "panel": panel,
                "gpus": columns["model_predicted_gpus"],
                "seconds": columns["model_predicted_epoch_s"],
                "label": (
                    f"predicted: efficiency {columns['model_predicted_efficiency']:.2f}"
                    f" [{columns['model_predicted_efficiency_lo']:.2f}, {columns['model_predicted_efficiency_hi']:.2f}]"
                ),
            }
        )
    lines = pd.concat(lines, ignore_index=True)
    lines = lines[lines["seconds"] > 0]  # no communication on one GPU: nothing to draw on a log axis
    lines["group"] = lines["part"] + lines["range"]
    bands = pd.concat(bands, ignore_index=True).dropna(subset=["lo", "hi"])
    bands["lo"] = bands["lo"].clip(lower=bands["epoch_s"] / 10)  # a log axis cannot show a band through zero
    predicted = pd.DataFrame(predicted)
    keys = set(fitted)
    cells = runs[runs["status"].eq("ok") & (runs[METRIC] > 0)]  # the cells the fit used
    cells = cells[[tuple(k) in keys for k in cells[GROUP].itertuples(index=False)]]
    cells = cells.assign(panel=[panel_name(tuple(k), fitted[tuple(k)]) for k in cells[GROUP].values])
    cells["gpus"] = cells["gpus"].astype(int)

    figure = (
        ggplot(lines, aes("gpus", "seconds"))
        + geom_ribbon(bands, aes("gpus", ymin="lo", ymax="hi"), inherit_aes=False, fill="#999999", alpha=0.25)
        + geom_line(aes(colour="part", linetype="range", group="group"))
        + geom_point(cells, aes("gpus", METRIC), inherit_aes=False, size=1.8, alpha=0.7)
        + geom_point(predicted, aes("gpus", "seconds"), shape="D", fill="white", colour="#b91c1c", size=3.5)
        + geom_text(
            predicted, aes("gpus", "seconds", label="label"), colour="#b91c1c", size=7, ha="right", nudge_y=0.15
        )
        + scale_colour_manual(values=PARTS, name="")
        + scale_linetype_manual(values=RANGES, name="")
        + scale_y_continuous(trans="log10")
        + gpu_axis(pd.concat([cells["gpus"], predicted["gpus"]]))
        + facet_wrap("~panel", scales="free_y")
        + labs(x="GPUs (ranks)", y="steady-state epoch time (s)", title=title, caption=wrap(caption(fitted, refused)))
        + style((10, 3.2 * -(-len(fitted) // 2) + 1.5))
    )
    return figure


def caption(fitted: dict, refused: dict) -> str:
    """What the figure shows, which fits are poor, and which series were not fitted and why."""
    text = (
        "Points: measured cells (one per seed). Lines: the model epoch(N) = (compute + latency [N>1] + "
        "bandwidth (N-1)/N + node step [nodes>1]) / N fitted to them, split into compute and communication; "
        "grey: 95% band of the fit. Dashed: extrapolated beyond the largest measured GPU count. "
        "Red diamond: a PREDICTION at twice that count, not a measurement."
    )
    poor = [k for k, fit in fitted.items() if fit.poor]
    if poor:
        text += f" Poor fit ({', '.join(series_name(k) for k in poor)}): see model_note in scaling.csv."
    if refused:
        text += " Not fitted: " + "; ".join(f"{series_name(k)} ({r})" for k, r in refused.items()) + "."
    return text
