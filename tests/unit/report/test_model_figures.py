"""The scaling model's figure: measured points, fit of each scaling's form, split, the back-tested point
and a prediction marked as such with the back-test's error; refusals said."""

from __future__ import annotations

import numpy as np
import pandas as pd
from PIL import Image
from scalebench.report.model_figures import model_figure
from scalebench.report.saving import save_figure


def cells(backend: str, gpus=(1, 2, 4, 8), slow_at: int | None = None, scaling: str = "weak") -> pd.DataFrame:
    rng = np.random.default_rng(5)
    rows = []
    for n in gpus:
        for seed in (1, 2, 3):
            if scaling == "strong":  # compute / N + floor + latency [N > 1]
                seconds = (100 / n + 5 + 2 * (n > 1)) * (1 + 0.005 * rng.standard_normal())
            else:
                seconds = (100 + 2 * (n > 1) + 8 * (n - 1) / n) / n * (1 + 0.005 * rng.standard_normal())
            rows.append({"gpus": n, "seed": seed, "nodes": 1, "status": "ok", "steady_epoch_s": seconds})
            rows[-1]["steady_epoch_s"] *= 1.3 if n == slow_at else 1.0
    frame = pd.DataFrame(rows).assign(source="scalebench", framework="torch", backend=backend, variant="")
    return frame.assign(scaling=scaling, variant="strong_global32" if scaling == "strong" else "")


def labelled(figure, prefix: str) -> pd.DataFrame:
    """The data of the figure's text layer whose labels start with `prefix`."""
    for layer in figure.layers:
        data = layer.geom.data
        if "label" in getattr(data, "columns", []) and all(str(t).startswith(prefix) for t in data["label"]):
            return data
    raise AssertionError(f"no layer labelled {prefix!r}")


def test_the_figure_shows_fit_split_and_a_marked_prediction_and_names_refusals(tmp_path):
    runs = pd.concat([cells("native"), cells("horovod", gpus=(1, 2)), cells("mirrored", (1, 2, 4, 8, 16), 8)])
    figure = model_figure(runs, per_node=16)
    predicted = labelled(figure, "predicted:")
    assert sorted(predicted["gpus"]) == [16, 32]  # twice the largest measured count of each fitted series
    assert all(label.startswith("predicted: efficiency") for label in predicted["label"])
    assert all("back-test error" in label for label in predicted["label"])  # beside the interval
    assert {"fit (total)", "compute", "communication"} == set(figure.data["part"])  # no floor in the weak form
    assert "torch / Mirrored (weak form, communication inferred) — POOR FIT" in set(figure.data["panel"])
    back = labelled(figure, "back-test:")
    assert sorted(back["gpus"]) == [8, 16]  # the largest measured count of each fitted series
    caption = figure.labels.caption.replace("\n", " ")
    assert "PREDICTION" in caption and "Not fitted: torch/horovod" in caption and "back-test" in caption
    assert "weak: epoch(N) = (compute + latency [N>1] + bandwidth (N-1)/N + node_step [nodes>1]) / N" in caption
    save_figure(figure, tmp_path / "model.png")
    assert Image.open(tmp_path / "model.png").size[0] > 300


def test_a_strong_series_shows_its_form_and_the_per_step_floor(tmp_path):
    figure = model_figure(cells("native", (1, 2, 4, 8, 16), scaling="strong"), per_node=16)
    assert {"fit (total)", "compute", "per-step floor", "communication"} == set(figure.data["part"])
    assert "torch / native strong_global32 (strong form, communication inferred)" in set(figure.data["panel"])
    caption = figure.labels.caption.replace("\n", " ")
    assert "strong: epoch(N) = compute / N + floor + latency [N>1] + node_step [nodes>1]" in caption
    save_figure(figure, tmp_path / "model.png")


def test_nothing_to_fit_gives_a_placeholder_that_says_why(tmp_path):
    figure = model_figure(cells("native", gpus=(1,)))
    assert figure.data is None or len(figure.data) == 0
    save_figure(figure, tmp_path / "model.png")
