"""Every figure of the report, once: its name, the rule that draws it, where the report files it,
and the function that draws it.

rules/analysis.smk makes one rule per `rule` group from this list (its outputs, report() entries and
captions), rules/common.smk asks for every figure, and the figure tests draw every entry: adding a
figure is one entry here and its caption, report/<name>.rst. Importing this module imports no
plotting library (Snakemake reads it on every start); an entry's function imports what it draws with.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

# What each drawing rule reads, by the name its script finds the file under in snakemake.input.
RULE_INPUTS = {
    "scaling": ("runs", "scaling"),
    "training": ("runs", "epochs"),
    "predictions": ("runs", "images", "masks"),
    "collectives": ("runs", "collectives"),
}


@dataclass
class FigureInputs:
    """The tables and settings a figure may draw from (the rule's inputs and params)."""

    runs: pd.DataFrame
    scaling: pd.DataFrame | None = None
    epochs: pd.DataFrame | None = None
    target_iou: float = 0.8
    per_node: int | None = None  # GPUs per node, for the scaling model's node boundary
    runs_root: Path | None = None  # the cells' folders, for their saved predictions
    prepared: Path | None = None  # the prepared dataset's folder (images.npy, masks.npy)
    images_shown: int = 3
    collectives: pd.DataFrame | None = None  # results/summary/collectives.csv
    link_gbps: dict | None = None  # cluster.link_gbps: the links' peaks, GB/s


@dataclass(frozen=True)
class Figure:
    name: str  # results/figures/<name>.png, captioned by report/<name>.rst
    rule: str  # a key of RULE_INPUTS: the rule that draws it
    category: str  # the report's section
    labels: dict[str, str] = field(hash=False)
    draw: Callable[[FigureInputs], Any] = field(hash=False)  # a plotnine ggplot or a matplotlib Figure

    @property
    def path(self) -> str:
        return f"results/figures/{self.name}.png"

    @property
    def caption(self) -> str:
        """The caption file, relative to the repository."""
        return f"report/{self.name}.rst"


def drawn_by(module: str, function: str, *fields: str, **fixed: Any) -> Callable[[FigureInputs], Any]:
    """Draw with scalebench.report.<module>.<function>, given these fields of FigureInputs in order
    and the fixed keyword arguments; the module is imported when the figure is drawn."""

    def draw(inputs: FigureInputs):
        drawing = getattr(importlib.import_module(f"scalebench.report.{module}"), function)
        return drawing(*(getattr(inputs, name) for name in fields), **fixed)

    return draw


def _scaling(function: str, metric: str) -> Callable[[FigureInputs], Any]:
    return drawn_by("scaling_figures", function, "scaling", "runs", metric=metric)


def _runs_only(function: str) -> Callable[[FigureInputs], Any]:
    return drawn_by("scaling_figures", function, "runs")


def _measure(figure: str, measure: str) -> dict[str, str]:
    return {"figure": figure, "measure": measure}


SPEEDUP, EFFICIENCY = "speedup_figure", "efficiency_figure"
TRAIN, EPOCH, TARGET = "total training time", "steady-state epoch time", "time to target IOU"
FIGURES: tuple[Figure, ...] = (
    Figure("speedup", "scaling", "Scaling", _measure("speedup", TRAIN), _scaling(SPEEDUP, "train_time_s")),
    Figure("speedup_epoch", "scaling", "Scaling", _measure("speedup", EPOCH), _scaling(SPEEDUP, "steady_epoch_s")),
    Figure(
        "efficiency", "scaling", "Scaling", _measure("parallel efficiency", TRAIN), _scaling(EFFICIENCY, "train_time_s")
    ),
    Figure(
        "efficiency_epoch",
        "scaling",
        "Scaling",
        _measure("parallel efficiency", EPOCH),
        _scaling(EFFICIENCY, "steady_epoch_s"),
    ),
    Figure("speedup_target", "scaling", "Scaling", _measure("speedup", TARGET), _scaling(SPEEDUP, "time_to_target_s")),
    Figure(
        "efficiency_target",
        "scaling",
        "Scaling",
        _measure("parallel efficiency", TARGET),
        _scaling(EFFICIENCY, "time_to_target_s"),
    ),
    Figure(
        "throughput",
        "scaling",
        "Scaling",
        _measure("throughput per GPU", "images / s / GPU"),
        _runs_only("throughput_figure"),
    ),
    Figure(
        "time_split",
        "scaling",
        "Scaling",
        _measure("where the time goes", "seconds per steady epoch"),
        drawn_by("time_split_figures", "time_split_figure", "runs"),
    ),
    Figure(
        "comm_share",
        "scaling",
        "Scaling",
        _measure("parallel efficiency and exposed communication", EPOCH),
        drawn_by("time_split_figures", "comm_share_figure", "runs"),
    ),
    Figure(
        "stragglers",
        "scaling",
        "Scaling",
        _measure("stragglers", "spread of the ranks' compute"),
        drawn_by("time_split_figures", "straggler_figure", "runs"),
    ),
    Figure(
        "scaling_model",
        "scaling",
        "Scaling",
        _measure("scaling model and prediction", EPOCH),
        drawn_by("model_figures", "model_figure", "runs", "per_node"),
    ),
    Figure("cost", "scaling", "Scaling", _measure("cost", "images per kJ and per GPU-hour"), _runs_only("cost_figure")),
    Figure(
        "efficiency_gradient",
        "scaling",
        "Scaling",
        _measure("parallel efficiency", "gradient bytes (model width)"),
        drawn_by("collective_figures", "efficiency_gradient_figure", "scaling", "runs"),
    ),
    Figure(
        "collective_bandwidth",
        "collectives",
        "Scaling",
        _measure("collective bus bandwidth", "message size"),
        drawn_by("collective_figures", "bandwidth_figure", "collectives", "link_gbps"),
    ),
    Figure("iou", "scaling", "Quality", {"figure": "test IOU vs GPUs"}, _runs_only("iou_figure")),
    Figure(
        "completeness",
        "scaling",
        "Completeness",
        {"figure": "status of every cell"},
        _runs_only("completeness_figure"),
    ),
    Figure(
        "loss",
        "training",
        "Quality",
        {"figure": "training loss"},
        drawn_by("training_figures", "loss_figure", "epochs"),
    ),
    Figure(
        "iou_time",
        "training",
        "Quality",
        {"figure": "validation IOU vs training time"},
        drawn_by("training_figures", "iou_time_figure", "epochs", "target_iou"),
    ),
    Figure(
        "time_to_target",
        "training",
        "Quality",
        {"figure": "time to target IOU"},
        drawn_by("training_figures", "time_to_target_figure", "runs", "epochs", "target_iou"),
    ),
    Figure(
        "predictions",
        "predictions",
        "Quality",
        {"figure": "predictions on test images"},
        drawn_by("predictions", "picture_panel", "runs", "runs_root", "prepared", "images_shown"),
    ),
)


def figures_of(rule: str) -> list[Figure]:
    """The figures one drawing rule makes, in the report's order."""
    if rule not in RULE_INPUTS:
        raise KeyError(f"no drawing rule {rule!r}; the rules are {', '.join(RULE_INPUTS)}")
    return [figure for figure in FIGURES if figure.rule == rule]
