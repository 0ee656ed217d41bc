"""The picture panel: input, ground truth and the predictions of the smallest and the
largest cell of each framework and backend, for a few test images.

Training writes predictions as results/runs/<cell>/predictions/test_NNNNN.png, where
NNNNN indexes the prepared arrays. Images are drawn with matplotlib directly:
plotnine would draw every pixel as a tile, which is slow and adds nothing here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from scalebench.cell import OWN_SOURCE, cell_path
from scalebench.report.legend import backend_label


def chosen_cells(runs: pd.DataFrame, runs_root: str | Path) -> list[tuple[str, Path]]:
    """(title, predictions folder) of the smallest and largest ok cell (lowest seed) per framework and backend."""
    cells = runs[(runs["source"] == OWN_SOURCE) & runs["status"].eq("ok")].copy()
    cells["folder"] = [
        Path(runs_root) / cell_path(r.framework, r.backend, r.variant, int(r.gpus), int(r.seed)) / "predictions"
        for r in cells.itertuples()
    ]
    saved = [folder.is_dir() and any(folder.glob("test_*.png")) for folder in cells["folder"]]
    cells = cells.loc[pd.Series(saved, index=cells.index, dtype=bool)]  # a plain empty list would select columns
    chosen = []
    for (framework, backend, variant), group in cells.groupby(["framework", "backend", "variant"], sort=True):
        sizes = sorted(set(group["gpus"]))
        for gpus in dict.fromkeys([sizes[0], sizes[-1]]):
            cell = group[group["gpus"] == gpus].sort_values("seed").iloc[0]
            name = " ".join(filter(None, [framework, backend_label(backend), variant]))
            title = f"{name}\n{int(gpus)} GPU, seed {int(cell['seed'])}"
            chosen.append((title, cell["folder"]))
    return chosen


def common_indices(folders: list[Path], count: int) -> list[int]:
    """The first `count` test indices that every chosen cell has a prediction for."""
    sets = [{int(p.stem.split("_")[1]) for p in folder.glob("test_*.png")} for folder in folders]
    return sorted(set.intersection(*sets))[:count] if sets else []


def picture_panel(runs: pd.DataFrame, runs_root: str | Path, data_dir: str | Path, count: int = 3) -> Figure:
    from PIL import Image

    chosen = chosen_cells(runs, runs_root)
    indices = common_indices([folder for _, folder in chosen], count)
    if not indices:
        figure = Figure(figsize=(8, 2.5))
        figure.text(0.5, 0.6, "Predictions of test images", ha="center", size=13)
        figure.text(
            0.5,
            0.4,
            "No finished cell has saved predictions (training.predictions > 0 writes them).",
            ha="center",
            color="#555555",
        )
        return figure
    images = np.load(Path(data_dir) / "images.npy", mmap_mode="r")
    masks = np.load(Path(data_dir) / "masks.npy", mmap_mode="r")
    columns = 2 + len(chosen)
    height, width = images.shape[1:3]
    panel = 1.9
    figure = Figure(figsize=(panel * columns, panel * len(indices) * height / width + 0.9), layout="constrained")
    axes = figure.subplots(len(indices), columns, squeeze=False)
    for row, index in enumerate(indices):
        pictures = [(images[index], "input"), (masks[index], "ground truth")]
        pictures += [(np.asarray(Image.open(folder / f"test_{index:05d}.png")), title) for title, folder in chosen]
        for column, (picture, title) in enumerate(pictures):
            axis = axes[row, column]
            axis.imshow(picture, cmap="gray", vmin=0, vmax=picture.max() if picture.max() > 0 else 1)
            axis.set_xticks([])
            axis.set_yticks([])
            if row == 0:
                axis.set_title(title, fontsize=8)
            if column == 0:
                axis.set_ylabel(f"test image {index}", fontsize=8)
    return figure
