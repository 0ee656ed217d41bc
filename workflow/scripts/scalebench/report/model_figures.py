"""The scaling model's figure: per framework and backend, the measured epoch times, the fit in the
form of the series' scaling with its 95% band, the fit's split into compute, the per-step floor
(strong form) and communication, the back-tested point (the fit without the largest GPU count,
predicting it) and the predicted point at twice the largest measured GPU count (marked as a
prediction, with the back-test's error beside its interval). The forms, as in scaling_model.py:

    weak:   epoch(N) = (compute + latency [N>1] + bandwidth (N-1)/N + node_step [nodes>1]) / N
    strong: epoch(N) = compute / N + floor + latency [N>1] + node_step [nodes>1]

Drawn with the style kit of style.py."""

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

from scalebench.cell import OWN_SOURCE
from scalebench.report.legend import backend_label
from scalebench.report.style import figure_theme, gpu_axis, placeholder, wrap
from scalebench.timing.scaling_model import FORMULAS, GROUP, METRIC, Backtest, Fit, backtests, curve, series_columns

PARTS = {"fit (total)": "#333333", "compute": "#1b6ca8", "per-step floor": "#7570b3", "communication": "#d95f02"}
BACKTEST_COLOUR = "#0f766e"
PREDICTION_COLOUR = "#b91c1c"
RANGES = {"measured range": "solid", "extrapolated": "dashed"}


def series_name(key: tuple) -> str:
    """'torch/native' or 'torch/native/bf16' for a caption."""
    return "/".join(str(part) for part in key[1:] if part)


def panel_name(key: tuple, fit: Fit) -> str:
    """'torch / Horovod' (and the variant: 'torch / Horovod bf16'), with the source where it is not
    the project's own, and POOR FIT where so."""
    source, framework, backend, variant = key
    name = f"{framework} / {backend_label(backend)}" + (f" {variant}" if variant else "")
    name += f" ({fit.form} form, communication {fit.communication})"
    if source != OWN_SOURCE:
        name += f" ({source})"
    return name + (" — POOR FIT" if fit.poor else "")


def model_figure(runs: pd.DataFrame, per_node: int | None = None):
    """Epoch time against GPUs with the fitted model, per (source, framework, backend, variant)."""
    title = "Why it scales as it does: epoch time, the fitted model and a prediction"
    series = backtests(runs, per_node)
    fitted = {key: fit for key, (fit, _) in series.items() if isinstance(fit, Fit)}
    refused = {key: fit.reason for key, (fit, _) in series.items() if not isinstance(fit, Fit)}
    tested = {key: test for key, (_, test) in series.items() if isinstance(test, Backtest)}
    if not fitted:
        reasons = "; ".join(f"{series_name(k)}: {r}" for k, r in refused.items()) or "no cells"
        return placeholder(title, wrap(f"No series could be fitted ({reasons}).", 80))
    lines, bands, predicted, back = model_layers(fitted, tested)
    cells = fitted_cells(runs, fitted)
    return (
        ggplot(lines, aes("gpus", "seconds"))
        + geom_ribbon(bands, aes("gpus", ymin="lo", ymax="hi"), inherit_aes=False, fill="#999999", alpha=0.25)
        + geom_line(aes(colour="part", linetype="range", group="group"))
        + geom_point(cells, aes("gpus", METRIC), inherit_aes=False, size=1.8, alpha=0.7)
        + marked_points(back, "^", BACKTEST_COLOUR, va="bottom", nudge_y=0.08)
        + marked_points(predicted, "D", PREDICTION_COLOUR, va="top", nudge_y=-0.08)
        + scale_colour_manual(values=PARTS, name="")
        + scale_linetype_manual(values=RANGES, name="")
        + scale_y_continuous(trans="log10")
        + gpu_axis(pd.concat([cells["gpus"], predicted["gpus"]]))
        + facet_wrap("~panel", scales="free_y")
        + labs(x="GPUs (ranks)", y="steady-state epoch time (s)", title=title, caption=wrap(caption(fitted, refused)))
        + figure_theme((10, 3.2 * -(-len(fitted) // 2) + 1.5))
    )


def model_layers(fitted: dict, tested: dict) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The figure's data over every fitted series: the lines of the fit's parts, the fit's 95% band,
    the predicted points and the back-tested ones, each ready for a log axis."""
    lines, bands, predicted, back = [], [], [], []
    for key, fit in fitted.items():
        panel = panel_name(key, fit)
        largest = int(fit.points["gpus"].max())
        fitted_curve = curve(fit).assign(panel=panel)
        fitted_curve["range"] = ["measured range" if g <= largest else "extrapolated" for g in fitted_curve["gpus"]]
        bands.append(fitted_curve)
        lines += part_lines(fitted_curve, largest)
        test = tested.get(key)
        predicted.append(prediction_point(panel, fit, test))
        if test is not None:
            back.append(backtest_point(panel, test))
    lines = pd.concat(lines, ignore_index=True)
    lines = lines[lines["seconds"] > 0]  # no communication on one GPU, no floor when weak: nothing on a log axis
    lines["group"] = lines["part"] + lines["range"]
    bands = pd.concat(bands, ignore_index=True).dropna(subset=["lo", "hi"])
    bands["lo"] = bands["lo"].clip(lower=bands["epoch_s"] / 10)  # a log axis cannot show a band through zero
    back = pd.DataFrame(back, columns=["panel", "gpus", "seconds", "label"])
    return lines, bands, pd.DataFrame(predicted), back[back["seconds"] > 0]


def part_lines(fitted_curve: pd.DataFrame, largest: int) -> list[pd.DataFrame]:
    """One line per part of the fit (PARTS), in seconds against GPUs, over one series' curve."""
    lines = []
    for part, column in (
        ("fit (total)", "epoch_s"),
        ("compute", "compute_s"),
        ("per-step floor", "floor_s"),  # strong form only (NaN in the weak form: dropped by model_layers)
        ("communication", "communication_s"),
    ):
        part_curve = fitted_curve[["gpus", "range", "panel"]].assign(part=part, seconds=fitted_curve[column])
        # the measured and extrapolated pieces share the boundary point so the line is unbroken
        boundary = part_curve[part_curve["gpus"] == largest].assign(range="extrapolated")
        lines.append(pd.concat([part_curve, boundary]))
    return lines


def prediction_point(panel: str, fit: Fit, test: Backtest | None) -> dict:
    """The predicted point at twice the largest measured GPU count, labelled with its interval."""
    columns = series_columns(fit)
    return {
        "panel": panel,
        "gpus": columns["model_predicted_gpus"],
        "seconds": columns["model_predicted_epoch_s"],
        "label": prediction_label(columns, test),
    }


def backtest_point(panel: str, test: Backtest) -> dict:
    """The back-tested point at the largest measured GPU count: predicted against measured efficiency."""
    return {
        "panel": panel,
        "gpus": test.gpus,
        "seconds": test.predicted_epoch_s,
        "label": f"back-test: {test.predicted_efficiency[0]:.2f} vs {test.measured_efficiency:.2f}",
    }


def fitted_cells(runs: pd.DataFrame, fitted: dict) -> pd.DataFrame:
    """The measured cells the fits used (status ok, an epoch time), each with its series' panel."""
    cells = runs[runs["status"].eq("ok") & (runs[METRIC] > 0)]
    cells = cells[[tuple(k) in fitted for k in cells[GROUP].itertuples(index=False)]]
    cells = cells.assign(panel=[panel_name(tuple(k), fitted[tuple(k)]) for k in cells[GROUP].values])
    cells["gpus"] = cells["gpus"].astype(int)
    return cells


def marked_points(points: pd.DataFrame, shape: str, colour: str, va: str, nudge_y: float) -> list:
    """White-filled markers of `shape` with their labels beside them (the back-test, the prediction)."""
    return [
        geom_point(points, aes("gpus", "seconds"), shape=shape, fill="white", colour=colour, size=3.5),
        geom_text(
            points,
            aes("gpus", "seconds", label="label"),
            colour=colour,
            size=7,
            ha="right",
            va=va,
            nudge_y=nudge_y,
        ),
    ]


def prediction_label(columns: dict, test: Backtest | None) -> str:
    """'predicted: efficiency 0.71 [0.65, 0.77], back-test error +0.02': the interval and, beside
    it, how far the same fit was off where it could be checked."""
    label = (
        f"predicted: efficiency {columns['model_predicted_efficiency']:.2f}"
        f" [{columns['model_predicted_efficiency_lo']:.2f}, {columns['model_predicted_efficiency_hi']:.2f}]"
    )
    return label + (f"\nback-test error {test.error:+.2f} at {test.gpus}" if test else "\nnot back-tested")


def caption(fitted: dict, refused: dict) -> str:
    """What the figure shows, which fits are poor, and which series were not fitted and why."""
    forms = sorted({fit.form for fit in fitted.values()}, key=["weak", "strong"].index)
    text = (
        "Points: measured cells (one per seed). Lines: the model of each series' scaling fitted to them, "
        + "; ".join(f"{form}: {FORMULAS[form]}" for form in forms)
        + "; split into compute"
        + (
            ", the per-step floor (strong: the step's fixed work and the whole gradient's allreduce bandwidth)"
            if "strong" in forms
            else ""
        )
        + " and communication; grey: 95% band of the fit. Dashed: extrapolated beyond the largest measured "
        "GPU count. Green triangle: the back-test, the fit without the largest count predicting it "
        "(predicted vs measured efficiency). Red diamond: a PREDICTION at twice that count, not a measurement, "
        "with its interval and the back-test's error."
    )
    poor = [k for k, fit in fitted.items() if fit.poor]
    if poor:
        text += f" Poor fit ({', '.join(series_name(k) for k in poor)}): see model_note in scaling.csv."
    if refused:
        text += " Not fitted: " + "; ".join(f"{series_name(k)} ({r})" for k, r in refused.items()) + "."
    return text
