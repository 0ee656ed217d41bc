"""One cell's settings: the study's training settings with the cell's axes, the JSON its ranks
are started with, and what changed since a finished cell trained."""

from __future__ import annotations

import copy
import json
from typing import Any

from scalebench.backends import BACKENDS
from scalebench.cell import AXES, Cell

# The optional axes that set a key of the model section (the others set training's key of their name).
MODEL_AXES = {"model_width": "width"}


def cell_training(config: dict, cell: Cell) -> dict:
    """The training settings of one cell: the study's, with the values of the cell's optional
    axes, and in strong scaling the batch per rank that divides the global batch."""
    training = copy.deepcopy(config["training"])
    axes = dict(cell.axes)
    for axis in AXES:
        if axis in axes and axis not in MODEL_AXES:
            training[axis] = axes[axis]
    if training["scaling"] == "strong" and training["global_batch"] and training["global_batch"] % cell.gpus == 0:
        training["batch_per_gpu"] = training["global_batch"] // cell.gpus
    return training


def cell_model(config: dict, cell: Cell) -> dict:
    """The model section of one cell: the study's, with the cell's model width where it sweeps it."""
    model = copy.deepcopy(config["model"])
    for axis, key in MODEL_AXES.items():
        model[key] = dict(cell.axes).get(axis, model[key])
    return model


def train_settings(config: dict, cell: Cell) -> dict:
    """Everything the training program needs for one cell, as plain JSON (a record without the
    model section trained width 1, its default: settings_changes)."""
    settings = {
        "cell": cell.to_json(),
        "model": cell_model(config, cell),
        "training": cell_training(config, cell),
        "peak_tflops": config["cluster"]["peak_tflops"],
        "gpus_per_node": config["cluster"]["gpus_per_node"],
        "dataset": {
            "source": config["dataset"]["source"],
            "image_size": config["dataset"]["image_size"],
            "split_seed": config["dataset"]["split_seed"],
        },
    }
    # only where set: the cells of a study without it keep their settings (and are not retrained)
    if config["cluster"]["network_interface"]:
        settings["network_interface"] = config["cluster"]["network_interface"]
    if config["cluster"]["gpu_binding"] != "node":  # a rank sees only its own GPUs (train/devices.py)
        settings["gpu_binding"] = config["cluster"]["gpu_binding"]
    if config["cluster"]["cpu_binding"] != "cores":  # the ranks run where the OS puts them (cluster/cpu_binding.py)
        settings["cpu_binding"] = config["cluster"]["cpu_binding"]
    return settings


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}


def _used_by(cell: dict, flat: dict[str, Any]) -> dict[str, Any]:
    """The settings a cell uses: a training section named after a backend (training.horovod)
    applies only to that backend's cells, so changing it retrains those cells alone."""
    others = {f"training.{name}." for name in BACKENDS if name != cell.get("backend")}
    return {key: value for key, value in flat.items() if not any(key.startswith(other) for other in others)}


def settings_changes(trained: dict, now: dict, defaults: dict | None = None) -> list[str]:
    """What differs between the settings a cell trained with and the study's now: 'key: old -> new'.

    `defaults`: the cell's settings with every key at its schema default (train_settings of the
    schema's defaults). A key one side lacks counts as being at its default there: a record
    written before a key existed ran with the behaviour its default reproduces, so a release that
    adds a key retrains nothing, while a changed default, or a value set away from it, does.
    """
    cell = now.get("cell") or trained.get("cell") or {}
    fallback = _flatten(defaults) if defaults else {}
    before, after = _used_by(cell, _flatten(trained)), _used_by(cell, _flatten(now))
    missing = "(not set)"
    changes = []
    for key in sorted(set(before) | set(after)):
        old = before.get(key, fallback.get(key, missing))
        new = after.get(key, fallback.get(key, missing))
        if old != new:
            changes.append(f"{key}: {json.dumps(old)} -> {json.dumps(new)}")
    return changes
