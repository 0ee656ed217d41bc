"""The epoch-time model recovers known parameters, refuses what it cannot fit, and flags a poor fit."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scalebench.analysis.scaling_model import Fit, Refused, fit_series, regressors, row_columns, series_columns

TRUE = {"compute": 120.0, "latency": 3.0, "bandwidth": 10.0, "node_step": 15.0}
TERMS = tuple(TRUE)


def epoch_time(gpus: int, nodes: int, params: dict = TRUE) -> float:
    terms = tuple(params)
    return float(regressors(np.array([gpus]), np.array([nodes]), terms)[0] @ np.array(list(params.values())))


def synthetic(
    gpus=(1, 2, 4, 8, 16), per_node=4, seeds=3, noise=0.0, rng=None, params: dict = TRUE, status="ok"
) -> pd.DataFrame:
    """Cells whose epoch times follow the model, times (1 + noise * normal) per seed."""
    rows = []
    for n in gpus:
        nodes = math.ceil(n / per_node)
        for seed in range(seeds):
            scatter = 1 + noise * rng.standard_normal() if noise else 1.0
            rows.append({"gpus": n, "nodes": nodes, "seed": seed, "status": status})
            rows[-1]["steady_epoch_s"] = epoch_time(n, nodes, params) * scatter
    return pd.DataFrame(rows).assign(source="scalebench", framework="torch", backend="native", variant="")


def test_exact_times_give_back_the_parameters():
    fit = fit_series(synthetic())
    assert isinstance(fit, Fit) and fit.terms == TERMS
    for term, value in TRUE.items():
        assert fit.parameter(term)[0] == pytest.approx(value, rel=1e-9)
    assert not fit.poor
    compute, communication = fit.split(8, 2)
    assert compute == pytest.approx(120 / 8)
    assert communication == pytest.approx((3 + 10 * 7 / 8 + 15) / 8)


def test_noisy_seeds_recover_the_parameters_within_their_intervals():
    rng = np.random.default_rng(7)
    covered = {term: 0 for term in TRUE}
    trials = 200
    for _ in range(trials):
        fit = fit_series(synthetic(noise=0.01, rng=rng))
        for term, value in TRUE.items():
            _, lo, hi = fit.parameter(term)
            covered[term] += lo <= value <= hi
    # 95% intervals: each term's coverage near 0.95 (binomial sd ~0.015 at 200 trials)
    for term, count in covered.items():
        assert 0.88 <= count / trials <= 0.99, term
    fit = fit_series(synthetic(noise=0.01, rng=rng))
    assert fit.parameter("compute")[0] == pytest.approx(120.0, rel=0.03)


def test_the_prediction_is_at_twice_the_largest_count_and_marked_as_such():
    columns = series_columns(fit_series(synthetic(noise=0.01, rng=np.random.default_rng(1))))
    assert columns["model_status"] == "fitted"
    assert (columns["model_predicted_gpus"], columns["model_predicted_nodes"]) == (32, 8)
    expected = 1 * epoch_time(1, 1) / (32 * epoch_time(32, 8))
    assert columns["model_predicted_efficiency_lo"] < columns["model_predicted_efficiency"]
    assert columns["model_predicted_efficiency"] < columns["model_predicted_efficiency_hi"]
    assert columns["model_predicted_efficiency"] == pytest.approx(expected, rel=0.05)


def test_too_few_points_are_refused_not_extrapolated():
    fit = fit_series(synthetic(gpus=(1, 2)))  # compute, latency, bandwidth: 3 parameters, 2 points
    assert isinstance(fit, Refused) and "2 distinct" in fit.reason and "3 parameters" in fit.reason
    columns = series_columns(fit)
    assert columns["model_status"] == "refused" and "too few" in columns["model_note"]
    assert math.isnan(columns["model_predicted_efficiency"]) and math.isnan(columns["model_compute_s"])
    assert math.isnan(row_columns(fit, 2)["model_epoch_s"])


def test_cells_not_ok_do_not_count_and_single_gpu_only_is_refused():
    cells = pd.concat([synthetic(gpus=(1,)), synthetic(gpus=(2, 4), status="failed")])
    assert "single-GPU" in fit_series(cells).reason


def test_without_a_one_gpu_cell_latency_folds_into_compute():
    fit = fit_series(synthetic(gpus=(2, 4, 8, 16), per_node=8, params={k: TRUE[k] for k in TERMS[:3]}))
    assert fit.terms == ("compute", "bandwidth", "node_step")
    assert fit.parameter("compute")[0] == pytest.approx(123.0)  # compute + latency
    assert math.isnan(fit.parameter("latency")[0])
    assert "folded into" in series_columns(fit)["model_note"]


ONE_NODE = {k: TRUE[k] for k in ("compute", "latency", "bandwidth")}


def test_a_point_far_off_the_fit_is_flagged_poor_with_its_residual():
    def cells():
        return synthetic(
            gpus=(1, 2, 4, 8, 16, 32), per_node=64, noise=0.005, rng=np.random.default_rng(3), params=ONE_NODE
        )

    bumped = cells()
    bumped.loc[bumped["gpus"] == 8, "steady_epoch_s"] *= 1.2  # a slow point no curve of the model passes
    fit = fit_series(bumped)
    assert fit.poor and "negative" not in fit.note
    columns = series_columns(fit)
    assert columns["model_poor_fit"] is True and columns["model_note"].startswith("POOR FIT")
    assert row_columns(fit, 8)["model_residual"] > 0.05
    assert not fit_series(cells()).poor


def test_a_term_negative_beyond_its_interval_is_flagged_poor():
    cells = synthetic(noise=0.005, rng=np.random.default_rng(3))
    cells.loc[cells["gpus"] == 4, "steady_epoch_s"] *= 1.4  # the fit bends to a negative latency to follow it
    fit = fit_series(cells)
    assert fit.poor and "negative beyond its interval: latency" in fit.note
    assert not fit_series(synthetic(noise=0.005, rng=np.random.default_rng(3))).poor


def test_a_prediction_across_a_node_boundary_never_crossed_says_the_step_is_unknown():
    cells = synthetic(gpus=(1, 2, 4, 8), per_node=8)
    columns = series_columns(fit_series(cells, per_node=8))
    assert columns["model_predicted_nodes"] == 2 and "node step unknown" in columns["model_note"]
