"""The epoch-time model recovers known parameters of both forms (weak and strong scaling), refuses
what it cannot fit, flags a poor fit, and back-tests its extrapolation."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scalebench.timing.scaling_model import (
    Backtest,
    Fit,
    Refused,
    backtest,
    fit_series,
    regressors,
    row_columns,
    series_columns,
)

TRUE = {"compute": 120.0, "latency": 3.0, "bandwidth": 10.0, "node_step": 15.0}
TERMS = tuple(TRUE)
# strong scaling, seconds per epoch: 200 s of compute that divides, an 8 s floor per epoch's steps,
# 4 s of allreduce latency from 2 GPUs on and 6 s more across nodes
TRUE_STRONG = {"compute": 200.0, "floor": 8.0, "latency": 4.0, "node_step": 6.0}


def epoch_time(gpus: int, nodes: int, params: dict = TRUE, form: str = "weak") -> float:
    terms = tuple(params)
    row = regressors(np.array([gpus]), np.array([nodes]), terms, form)[0]
    return float(row @ np.array(list(params.values())))


def synthetic(
    gpus=(1, 2, 4, 8, 16),
    per_node=4,
    seeds=3,
    noise=0.0,
    rng=None,
    params: dict = TRUE,
    status="ok",
    form: str = "weak",
) -> pd.DataFrame:
    """Cells whose epoch times follow the model of `form`, times (1 + noise * normal) per seed."""
    rows = []
    for n in gpus:
        nodes = math.ceil(n / per_node)
        for seed in range(seeds):
            scatter = 1 + noise * rng.standard_normal() if noise else 1.0
            rows.append({"gpus": n, "nodes": nodes, "seed": seed, "status": status, "scaling": form})
            rows[-1]["steady_epoch_s"] = epoch_time(n, nodes, params, form) * scatter
    return pd.DataFrame(rows).assign(source="scalebench", framework="torch", backend="native", variant="")


def coverage(trials: int, params: dict, form: str, noise: float, seed: int) -> dict[str, float]:
    """Share of `trials` noisy series whose 95% interval of each term holds its true value."""
    rng = np.random.default_rng(seed)
    covered = dict.fromkeys(params, 0)
    for _ in range(trials):
        fit = fit_series(synthetic(noise=noise, rng=rng, params=params, form=form))
        assert fit.form == form
        for term, value in params.items():
            _, lo, hi = fit.parameter(term)
            covered[term] += lo <= value <= hi
    return {term: count / trials for term, count in covered.items()}


def test_exact_times_give_back_the_parameters():
    fit = fit_series(synthetic())
    assert isinstance(fit, Fit) and fit.terms == TERMS
    for term, value in TRUE.items():
        assert fit.parameter(term)[0] == pytest.approx(value, rel=1e-9)
    assert not fit.poor and fit.form == "weak"
    split = fit.split(8, 2)
    assert split["compute"] == pytest.approx(120 / 8)
    assert split["communication"] == pytest.approx((3 + 10 * 7 / 8 + 15) / 8)
    assert math.isnan(split["floor"])  # the weak form has none


def test_a_table_without_the_scaling_column_is_fitted_weak():
    fit = fit_series(synthetic().drop(columns="scaling"))  # imported studies, older tables
    assert fit.form == "weak" and fit.parameter("compute")[0] == pytest.approx(120.0)


def test_strong_scaling_is_fitted_with_its_own_form_and_split():
    fit = fit_series(synthetic(params=TRUE_STRONG, form="strong"))
    assert isinstance(fit, Fit) and fit.form == "strong"
    assert fit.terms == ("compute", "floor", "latency", "node_step")
    for term, value in TRUE_STRONG.items():
        assert fit.parameter(term)[0] == pytest.approx(value, rel=1e-9)
    split = fit.split(8, 2)
    assert split["compute"] == pytest.approx(200 / 8)
    assert split["floor"] == pytest.approx(8.0)
    assert split["communication"] == pytest.approx(4 + 6)
    columns = series_columns(fit)
    assert columns["model_form"] == "strong" and columns["model_terms"] == "compute + floor + latency + node_step"
    # an epoch has the same steps at every N: the efficiency at 32 GPUs on 8 nodes follows the strong form
    assert columns["model_predicted_efficiency"] == pytest.approx(208 / (32 * (200 / 32 + 8 + 4 + 6)))
    assert row_columns(fit, 4)["model_floor_epoch_s"] == pytest.approx(8.0)


def test_the_weak_form_misreads_strong_cells():
    """Why the form matters: fitted with the weak form, strong cells give another split."""
    cells = synthetic(params=TRUE_STRONG, form="strong")
    weak = fit_series(cells.assign(scaling="weak"))
    assert weak.poor and weak.split(8, 2)["communication"] > 2 * 10.0  # true communication at 8 GPUs: 10 s


def test_a_series_of_both_scalings_is_refused():
    cells = pd.concat([synthetic(gpus=(1, 2)), synthetic(gpus=(4, 8), params=TRUE_STRONG, form="strong")])
    assert "both weak and strong" in fit_series(cells).reason


def test_strong_noisy_seeds_recover_the_parameters_within_their_intervals():
    covered = coverage(200, TRUE_STRONG, "strong", noise=0.01, seed=11)
    for term, share in covered.items():
        assert 0.88 <= share <= 0.99, (term, share)
    fit = fit_series(synthetic(noise=0.01, rng=np.random.default_rng(12), params=TRUE_STRONG, form="strong"))
    for term, value in TRUE_STRONG.items():
        _, lo, hi = fit.parameter(term)
        assert lo <= value <= hi, term


def test_strong_without_a_one_gpu_cell_folds_latency_into_the_floor():
    params = {"compute": 200.0, "floor": 8.0, "latency": 4.0}
    fit = fit_series(synthetic(gpus=(2, 4, 8, 16), per_node=16, params=params, form="strong"))
    assert fit.terms == ("compute", "floor")
    assert fit.parameter("floor")[0] == pytest.approx(12.0)  # floor + latency
    assert "folded into it" in series_columns(fit)["model_note"]


def test_noisy_seeds_recover_the_parameters_within_their_intervals():
    covered = coverage(200, TRUE, "weak", noise=0.01, seed=7)
    # 95% intervals: each term's coverage near 0.95 (binomial sd ~0.015 at 200 trials)
    for term, share in covered.items():
        assert 0.88 <= share <= 0.99, (term, share)
    fit = fit_series(synthetic(noise=0.01, rng=np.random.default_rng(8)))
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


def test_the_back_test_of_a_series_the_model_fits_has_a_small_error():
    for params, form in ((TRUE, "weak"), (TRUE_STRONG, "strong")):
        cells = synthetic(noise=0.01, rng=np.random.default_rng(21), params=params, form=form)
        fit = fit_series(cells)
        test = backtest(cells, fit)
        assert isinstance(test, Backtest) and test.gpus == 16
        truth = epoch_time(1, 1, params, form) / (16 * epoch_time(16, 4, params, form))
        assert test.measured_efficiency == pytest.approx(truth, rel=0.02)
        assert abs(test.error) < 0.02, (form, test.sentence())
        _, lo, hi = test.predicted_efficiency
        assert lo <= test.measured_efficiency <= hi
        columns = series_columns(fit, test)
        assert columns["backtest_gpus"] == 16
        assert columns["backtest_predicted_efficiency"] == pytest.approx(test.predicted_efficiency[0])
        assert columns["backtest_measured_efficiency"] == pytest.approx(test.measured_efficiency)
        assert "back-test at 16 GPUs" in columns["model_note"]  # beside the published prediction


def test_the_back_test_of_a_series_the_model_does_not_fit_shows_the_error():
    cells = synthetic(noise=0.01, rng=np.random.default_rng(21))
    cells.loc[cells["gpus"] == 16, "steady_epoch_s"] *= 1.5  # contention the form has no term for
    test = backtest(cells, fit_series(cells))
    assert isinstance(test, Backtest)
    assert test.error > 0.1  # the shorter fit promised far more than 16 GPUs delivered
    assert test.measured_efficiency < test.predicted_efficiency[1]  # outside its interval
    assert f"error {test.error:+.2f}" in series_columns(fit_series(cells), test)["backtest_note"]


def test_a_series_too_short_to_back_test_is_left_empty_with_the_reason():
    cells = synthetic(gpus=(1, 2, 4), per_node=4)  # 3 points, 3 terms: fitted; without 4: 2 points
    fit = fit_series(cells)
    test = backtest(cells, fit)
    assert isinstance(fit, Fit) and isinstance(test, Refused)
    columns = series_columns(fit, test)
    assert math.isnan(columns["backtest_gpus"]) and math.isnan(columns["backtest_predicted_efficiency"])
    assert math.isnan(columns["backtest_measured_efficiency"])
    assert columns["backtest_note"].startswith("too short to back-test: without its largest GPU count (4)")
    refused = backtest(synthetic(gpus=(1, 2)), fit_series(synthetic(gpus=(1, 2))))
    assert refused.reason.startswith("not back-tested: the series is not fitted")


def test_a_back_test_across_a_node_boundary_never_crossed_says_the_step_is_unknown():
    cells = synthetic(gpus=(1, 2, 4, 8, 16), per_node=8)  # only 16 spans nodes
    test = backtest(cells, fit_series(cells))
    assert "node step unknown" in test.note and test.error > 0  # the step it left out was real


def test_measured_communication_is_fitted_apart_and_named():
    # the cells' exposed communication (step split) is what the communication terms say; an epoch
    # time that alone would blur them (here: compute that happens to scale like the bandwidth term)
    cells = synthetic()
    comm = {"latency": TRUE["latency"], "bandwidth": TRUE["bandwidth"], "node_step": TRUE["node_step"]}
    cells["comm_exposed_critical_s"] = [
        epoch_time(g, n, {"compute": 0.0, **comm}) for g, n in zip(cells["gpus"], cells["nodes"], strict=True)
    ]
    fit = fit_series(cells, per_node=4)
    assert isinstance(fit, Fit) and fit.communication == "measured" and not fit.poor
    for term, value in TRUE.items():
        assert fit.parameter(term)[0] == pytest.approx(value, rel=1e-9), term
    assert fit.split(8, 2)["communication"] == pytest.approx(epoch_time(8, 2, {"compute": 0.0, **comm}))
    columns = series_columns(fit)
    assert columns["model_communication"] == "measured" and "communication measured" in columns["model_note"]
    # what is measured wins over what the fit would infer: with twice the communication measured, the
    # communication terms double and compute takes the rest of the same epoch times
    cells["comm_exposed_critical_s"] *= 2
    doubled = fit_series(cells, per_node=4)
    assert doubled.parameter("bandwidth")[0] == pytest.approx(2 * TRUE["bandwidth"], rel=1e-6)


def test_a_series_with_a_cell_without_the_split_infers_its_communication():
    cells = synthetic()
    cells["comm_exposed_critical_s"] = 1.0
    cells.loc[0, "comm_exposed_critical_s"] = math.nan  # a cell recorded before the step split
    fit = fit_series(cells, per_node=4)
    assert fit.communication == "inferred"
    assert "communication inferred from the fit (1 of 15 cells have no step split)" in series_columns(fit)["model_note"]
    for term, value in TRUE.items():
        assert fit.parameter(term)[0] == pytest.approx(value, rel=1e-9), term
