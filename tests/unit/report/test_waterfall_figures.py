"""The loss waterfall's drawing: the boxes stack from zero to the measured epoch, a term below zero
goes down, and the ideal keeps a line of its own where later boxes cover its top."""

from __future__ import annotations

import pandas as pd
import pytest
from scalebench.analysis import waterfall
from scalebench.report.waterfall_figures import stacked, waterfall_figure

pytestmark = pytest.mark.unit

# ideal 0.55 s; compute shrank by 0.12 s, exposed communication 0.08 s, rest 0.11 s: measured 0.62 s
SECONDS = {
    "ideal": 0.55,
    "compute_growth": -0.12,
    "imbalance": 0.0,
    "exposed_comm": 0.08,
    "data_wait": 0.0,
    "rest": 0.11,
    "measured": 0.62,
}


def table() -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "framework": "tensorflow",
                "backend": "horovod",
                "variant": "",
                "gpus": 2,
                "term": term,
                "seconds": seconds,
                "low": float("nan"),
                "high": float("nan"),
                "reason": "",
                "series": "tensorflow / horovod",
                "x": 0,
            }
            for term, seconds in SECONDS.items()
        ]
    )


def test_the_boxes_stack_to_the_measured_epoch_and_the_ideal_has_its_line():
    rects, measured, ideals = stacked(table())
    boxes = rects.set_index("term")
    growth = boxes.loc[waterfall.LABELS["compute_growth"]]
    assert (growth["ymin"], growth["ymax"], growth["alpha"]) == pytest.approx((0.43, 0.55, 0.35))  # faint, downwards
    communication = boxes.loc[waterfall.LABELS["exposed_comm"]]
    assert (communication["ymin"], communication["ymax"]) == pytest.approx((0.43, 0.51))  # covers the ideal's top
    assert boxes.loc[waterfall.LABELS["rest"], "ymax"] == pytest.approx(measured["seconds"].iloc[0]) == 0.62
    assert ideals["seconds"].tolist() == [0.55]


def test_the_figure_draws():
    drawn = table().drop(columns=["series", "x"])
    figure = waterfall_figure(drawn)
    figure.draw()
    assert len(figure.layers) == 4  # boxes, the ideal's line, the interval, the measured point
