"""An earlier study whose finished cells predict this study's (budget.from, else compare.baseline's).

Its results folder holds its cells' records under runs/, read as this study's own are
(timing/cell_times.py). A cell of it predicts a series of this study only where it ran the same work
the same way: the same framework and backend, and the same settings that set an epoch's time
(COMPARABLE: model width, image size, batch, precision, ...; and, for an epoch of one pass over the
data, the same prepared data). Where none of its cells of the framework and backend is comparable,
the bill says which setting differs and falls back to the formula (config/prediction.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from scalebench.timing.cell_times import Measured, read, setting, with_cold_starts

KEY = "budget.from"
BASELINE_KEY = "compare.baseline"
# The settings that set an epoch's time, as a cell's settings name them (config/cell_settings.py).
COMPARABLE = (
    "model.width",
    "dataset.image_size",
    "training.batch_per_gpu",  # weak scaling; strong scaling compares training.global_batch instead
    "training.precision",
    "training.compression",
    "training.compile",
    "training.scaling",
    "training.threads_per_rank",
    "training.device",
    "training.steps_per_epoch",
)


def study_folder(config: dict) -> tuple[str | None, str]:
    """The earlier study's results folder and the key that names it (budget.from, else compare.baseline)."""
    if config["budget"]["from"] is not None:
        return config["budget"]["from"], KEY
    return config["compare"]["baseline"], BASELINE_KEY


def runs_folder(folder: str | Path) -> Path:
    return Path(folder).expanduser() / "runs"


def folder_problem(folder: str) -> str | None:
    """Why budget.from's folder cannot predict (naming the key), or None: checked before any job."""
    path = Path(folder).expanduser()
    if not path.is_dir():
        return f"config key '{KEY}': {path} is not a folder (name an earlier study's results folder)"
    if not records(path):
        return (
            f"config key '{KEY}': {path} holds no cell records ({runs_folder(path)}/.../run.json); name an "
            "earlier study's results folder, the one that holds runs/ and summary/"
        )
    return None


def records(folder: str | Path) -> list[Path]:
    """Each cell's run.json under the study's runs/ (not the copies kept under .kept/ or .holders/)."""
    root = runs_folder(folder)
    return sorted(
        path for path in root.glob("**/run.json") if not any(p.startswith(".") for p in path.relative_to(root).parts)
    )


@dataclass(frozen=True)
class EarlierStudy:
    """The earlier study's finished cells, and the key and folder that named it."""

    key: str
    folder: str
    cells: tuple[Measured, ...]

    def comparable(self, framework: str, backend: str, settings: dict, data_key: str) -> tuple[list[Measured], str]:
        """Its cells of `framework`/`backend` that ran a cell of `settings` (this study's) alike, and
        where there are none, which setting differs (a sentence naming the key)."""
        own = [cell for cell in self.cells if (cell.framework, cell.backend) == (framework, backend)]
        if not own:
            return [], f"{self.key}: {self.folder} has no finished {framework}/{backend} cell"
        differences = [difference(cell, settings, data_key) for cell in own]
        alike = [cell for cell, differs in zip(own, differences, strict=True) if differs is None]
        if alike:
            return alike, ""
        return [], f"{self.key}: {self.folder}'s {framework}/{backend} cells differ in {differences[0]}"

    def kin(self, framework: str, settings: dict, data_key: str, alike: list[Measured]) -> list[Measured]:
        """Its cells of `framework`'s backends that ran a cell of `settings` alike (their start-up
        stands in where `alike`, one backend's, holds only a cold start: config/prediction.py)."""
        return [
            cell
            for cell in self.cells
            if cell.framework == framework and cell not in alike and difference(cell, settings, data_key) is None
        ]

    def devices(self, cells: list[Measured]) -> str:
        names = sorted({device for cell in cells for device in cell.devices})
        return ", ".join(names) or "devices not recorded"


def difference(cell: Measured, settings: dict, data_key: str) -> str | None:
    """The first setting of COMPARABLE in which the earlier `cell` differs from `settings` ('model.width
    (2 there, 1 here)'), or None where it ran the same work. A record without its settings differs."""
    if not cell.settings:
        return "its settings (its run.json predates them)"
    strong = setting(settings, "training.scaling") == "strong"
    keys = [("training.global_batch" if strong and key == "training.batch_per_gpu" else key) for key in COMPARABLE]
    for key in keys:
        there, here = cell.setting(key), setting(settings, key)
        if key == "model.width" and there is None:
            there = 1  # a record from before model.width trained width 1
        if there != here:
            return f"{key} ({json.dumps(there)} there, {json.dumps(here)} here)"
    if setting(settings, "training.steps_per_epoch") is None and cell.data_key != data_key:
        return f"the prepared data, which sets an epoch's length ({cell.data_key} there, {data_key} here)"
    return None


def read_study(folder: str, key: str) -> EarlierStudy:
    """The finished cells under `folder`/runs (cells that did not finish ok are not read)."""
    found = (read(path.parent) for path in records(folder))
    return EarlierStudy(key, folder, tuple(with_cold_starts([cell for cell in found if cell is not None])))
