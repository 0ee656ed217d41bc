"""The scaling model's figure: measured points, fit, split and a prediction marked as such; refusals said."""

from __future__ import annotations

import numpy as np
import pandas as pd
from PIL import Image
from scalebench.report.model_figures import model_figure
from scalebench.report.save import save_figure


def cells(backend: str, gpus=(1, 2, 4, 8), slow_at: int | None = None) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    rows = []
    for n in gpus:
        for seed in (1, 2, 3):
            seconds = (100 + 2 * (n > 1) + 8 * (n - 1) / n) / n * (1 + 0.005 * rng.standard_normal())
            rows.append({"gpus": n, "seed": seed, "nodes": 1, "status": "ok", "steady_epoch_s": seconds})
            rows[-1]["steady_epoch_s"] *= 1.3 if n == slow_at else 1.0
    return pd.DataFrame(rows).assign(source="scalebench", framework="torch", backend=backend, variant="")


def test_the_figure_shows_fit_split_and_a_marked_prediction_and_names_refusals(tmp_path):
    runs = pd.concat([cells("native"), cells("horovod", gpus=(1, 2)), cells("mirrored", (1, 2, 4, 8, 16), 8)])
    figure = model_figure(runs, per_node=16)
    predicted = next(layer.geom.data for layer in figure.layers if "label" in getattr(layer.geom.data, "columns", []))
    assert sorted(predicted["gpus"]) == [16, 32]  # twice the largest measured count of each fitted series
    assert all(label.startswith("predicted: efficiency") for label in predicted["label"])
    assert {"fit (total)", "compute", "communication"} == set(figure.data["part"])
    assert "torch / Mirrored — POOR FIT" in set(figure.data["panel"])
    caption = figure.labels.caption.replace("\n", " ")
    assert "PREDICTION" in caption and "Not fitted: torch/horovod" in caption
    save_figure(figure, tmp_path / "model.png")
    assert Image.open(tmp_path / "model.png").size[0] > 300


def test_nothing_to_fit_gives_a_placeholder_that_says_why(tmp_path):
    figure = model_figure(cells("native", gpus=(1,)))
    assert figure.data is None or len(figure.data) == 0
    save_figure(figure, tmp_path / "model.png")
