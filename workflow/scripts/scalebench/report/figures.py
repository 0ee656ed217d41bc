"""Every figure of the report, once: its name, the rule that draws it, where the report files it,
and the function that draws it.

rules/analysis.smk makes one rule per `rule` group from this list (its outputs, report() entries and
captions), rules/common.smk asks for every figure, and the figure tests draw every entry: adding a
figure is one entry here and its caption, report/<name>.rst. Importing this module imports no
plotting library (Snakemake reads it on every start): an entry's drawing function imports the
function it calls when it draws.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
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
    "hosts": ("runs", "hosts", "drift", "order"),
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
    hosts: pd.DataFrame | None = None  # results/summary/hosts.csv
    drift: pd.DataFrame | None = None  # results/summary/drift.csv
    order: pd.DataFrame | None = None  # results/summary/order.csv


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


# One drawing function per kind of figure, each importing its plotting module when it draws
# (Snakemake imports this module on every start; plotnine takes seconds), so that an editor
# follows an entry to the function that draws it.


def _speedup(inputs: FigureInputs, metric: str):
    from scalebench.report.scaling_figures import speedup_figure

    return speedup_figure(inputs.scaling, inputs.runs, metric=metric)


def _efficiency(inputs: FigureInputs, metric: str):
    from scalebench.report.scaling_figures import efficiency_figure

    return efficiency_figure(inputs.scaling, inputs.runs, metric=metric)


def _throughput(inputs: FigureInputs):
    from scalebench.report.scaling_figures import throughput_figure

    return throughput_figure(inputs.runs)


def _time_split(inputs: FigureInputs):
    from scalebench.report.time_split_figures import time_split_figure

    return time_split_figure(inputs.runs)


def _waterfall(inputs: FigureInputs):
    from scalebench.analysis.waterfall import waterfall
    from scalebench.report.waterfall_figures import waterfall_figure

    return waterfall_figure(waterfall(inputs.runs))


def _comm_share(inputs: FigureInputs):
    from scalebench.report.time_split_figures import comm_share_figure

    return comm_share_figure(inputs.runs)


def _stragglers(inputs: FigureInputs):
    from scalebench.report.time_split_figures import straggler_figure

    return straggler_figure(inputs.runs)


def _scaling_model(inputs: FigureInputs):
    from scalebench.report.model_figures import model_figure

    return model_figure(inputs.runs, inputs.per_node)


def _cost(inputs: FigureInputs):
    from scalebench.report.scaling_figures import cost_figure

    return cost_figure(inputs.runs)


def _efficiency_gradient(inputs: FigureInputs):
    from scalebench.report.collective_figures import efficiency_gradient_figure

    return efficiency_gradient_figure(inputs.scaling, inputs.runs)


def _collective_bandwidth(inputs: FigureInputs):
    from scalebench.report.collective_figures import bandwidth_figure

    return bandwidth_figure(inputs.collectives, inputs.link_gbps)


def _iou(inputs: FigureInputs):
    from scalebench.report.scaling_figures import iou_figure

    return iou_figure(inputs.runs)


def _completeness(inputs: FigureInputs):
    from scalebench.report.scaling_figures import completeness_figure

    return completeness_figure(inputs.runs)


def _loss(inputs: FigureInputs):
    from scalebench.report.training_figures import loss_figure

    return loss_figure(inputs.epochs)


def _iou_time(inputs: FigureInputs):
    from scalebench.report.training_figures import iou_time_figure

    return iou_time_figure(inputs.epochs, inputs.target_iou)


def _time_to_target(inputs: FigureInputs):
    from scalebench.report.training_figures import time_to_target_figure

    return time_to_target_figure(inputs.runs, inputs.epochs, inputs.target_iou)


def _predictions(inputs: FigureInputs):
    from scalebench.report.predictions import picture_panel

    return picture_panel(inputs.runs, inputs.runs_root, inputs.prepared, inputs.images_shown)


def _hosts(inputs: FigureInputs):
    from scalebench.report.host_figures import hosts_figure

    return hosts_figure(inputs.hosts)


def _drift(inputs: FigureInputs):
    from scalebench.report.host_figures import drift_figure

    return drift_figure(inputs.order, inputs.drift)


def _measure(figure: str, measure: str) -> dict[str, str]:
    return {"figure": figure, "measure": measure}


TRAIN, EPOCH, TARGET = "total training time", "steady-state epoch time", "time to target IOU"
FIGURES: tuple[Figure, ...] = (
    Figure(
        "waterfall",
        "scaling",
        "Scaling",
        _measure("the loss waterfall: what each GPU cost, and why", "seconds per steady epoch"),
        _waterfall,
    ),
    Figure("speedup", "scaling", "Scaling", _measure("speedup", TRAIN), partial(_speedup, metric="train_time_s")),
    Figure(
        "speedup_epoch", "scaling", "Scaling", _measure("speedup", EPOCH), partial(_speedup, metric="steady_epoch_s")
    ),
    Figure(
        "efficiency",
        "scaling",
        "Scaling",
        _measure("parallel efficiency", TRAIN),
        partial(_efficiency, metric="train_time_s"),
    ),
    Figure(
        "efficiency_epoch",
        "scaling",
        "Scaling",
        _measure("parallel efficiency", EPOCH),
        partial(_efficiency, metric="steady_epoch_s"),
    ),
    Figure(
        "speedup_target",
        "scaling",
        "Scaling",
        _measure("speedup", TARGET),
        partial(_speedup, metric="time_to_target_s"),
    ),
    Figure(
        "efficiency_target",
        "scaling",
        "Scaling",
        _measure("parallel efficiency", TARGET),
        partial(_efficiency, metric="time_to_target_s"),
    ),
    Figure(
        "throughput",
        "scaling",
        "Scaling",
        _measure("throughput per GPU", "images / s / GPU"),
        _throughput,
    ),
    Figure(
        "time_split",
        "scaling",
        "Scaling",
        _measure("where the time goes", "seconds per steady epoch"),
        _time_split,
    ),
    Figure(
        "comm_share",
        "scaling",
        "Scaling",
        _measure("parallel efficiency and exposed communication", EPOCH),
        _comm_share,
    ),
    Figure(
        "stragglers",
        "scaling",
        "Scaling",
        _measure("stragglers", "spread of the ranks' compute"),
        _stragglers,
    ),
    Figure(
        "scaling_model",
        "scaling",
        "Scaling",
        _measure("scaling model and prediction", EPOCH),
        _scaling_model,
    ),
    Figure("cost", "scaling", "Scaling", _measure("cost", "images per kJ and per training GPU-hour"), _cost),
    Figure(
        "efficiency_gradient",
        "scaling",
        "Scaling",
        _measure("parallel efficiency", "gradient bytes (model width)"),
        _efficiency_gradient,
    ),
    Figure(
        "collective_bandwidth",
        "collectives",
        "Scaling",
        _measure("collective bus bandwidth", "message size"),
        _collective_bandwidth,
    ),
    Figure("iou", "scaling", "Quality", {"figure": "test IOU vs GPUs"}, _iou),
    Figure(
        "completeness",
        "scaling",
        "Completeness",
        {"figure": "status of every cell"},
        _completeness,
    ),
    Figure(
        "loss",
        "training",
        "Quality",
        {"figure": "training loss"},
        _loss,
    ),
    Figure(
        "iou_time",
        "training",
        "Quality",
        {"figure": "validation IOU vs training time"},
        _iou_time,
    ),
    Figure(
        "time_to_target",
        "training",
        "Quality",
        {"figure": "time to target IOU"},
        _time_to_target,
    ),
    Figure(
        "predictions",
        "predictions",
        "Quality",
        {"figure": "predictions on test images"},
        _predictions,
    ),
    Figure("hosts", "hosts", "Hosts and time", {"figure": "slow hosts"}, _hosts),
    Figure("drift", "hosts", "Hosts and time", {"figure": "drift over the study"}, _drift),
)


def figures_of(rule: str) -> list[Figure]:
    """The figures one drawing rule makes, in the report's order."""
    if rule not in RULE_INPUTS:
        raise KeyError(f"no drawing rule {rule!r}; the rules are {', '.join(RULE_INPUTS)}")
    return [figure for figure in FIGURES if figure.rule == rule]
