"""scalebench/distributions.py against scipy.stats itself: the same bits for the t quantile, the F
tail and Welch's test (p and interval), edge cases included (a degree of freedom not positive or NaN,
q at 0 or 1, x at 0 or infinity, a side without spread, two identical sides, a side of one value,
a NaN), so the analysis' tables and answer.json do not change by dropping scipy.stats' import."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scalebench.distributions import f_tail, t_quantile, welch
from scipy import stats

pytestmark = pytest.mark.unit


def same_bits(a, b) -> bool:
    return np.asarray(a, dtype=float).tobytes() == np.asarray(b, dtype=float).tobytes()


@pytest.mark.parametrize("q", [0.975, 0.5, 1 - 0.05 / 6, 0.0, 1.0, 1e-9, math.nan, 1.5, -0.1])
@pytest.mark.parametrize("dof", [1, 2, 1.7, 5.5, 100, 1e6, math.inf, 0, -1, math.nan, np.int64(4)])
def test_t_quantile_is_scipy_stats_t_ppf(q, dof):
    assert same_bits(t_quantile(q, dof), stats.t.ppf(q, dof))


@pytest.mark.parametrize("x", [0.0, -1.0, 0.5, 3.2, 100.0, math.inf, math.nan])
@pytest.mark.parametrize(("dfn", "dfd"), [(1, 4), (2, 10), (3, 1), (7.5, 4), (0, 4), (2, -1)])
def test_f_tail_is_scipy_stats_f_sf(x, dfn, dfd):
    assert same_bits(f_tail(x, dfn, dfd), stats.f.sf(x, dfn, dfd))


def scipy_welch(a, b, level):
    result = stats.ttest_ind(a, b, equal_var=False)
    interval = result.confidence_interval(level)
    return result.pvalue, interval.low, interval.high


def samples(rng: np.random.Generator):
    """Pairs of log speeds like the verdicts' (a few seeds a side), with the edge cases among them."""
    for _ in range(400):
        sizes = rng.integers(2, 7, 2)
        scale = 10 ** rng.uniform(-6, 1)
        yield tuple(math.log(rng.uniform(1, 100)) + rng.normal(0, scale, n) for n in sizes)
    yield np.full(3, 1.5), np.full(2, 1.2)  # no spread on either side
    yield np.full(3, 1.5), np.array([1.2, 1.3])  # no spread on one
    yield np.array([2.0, 2.1, 2.2]), np.array([2.0, 2.1, 2.2])  # identical sides
    yield np.array([2.0]), np.array([1.0, 1.1])  # one value: scipy.stats' own small-sample answer
    yield np.array([2.0, math.nan]), np.array([1.0, 1.1])  # a NaN: scipy.stats' own


def test_welch_is_scipy_stats_ttest_ind():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy's notes on small samples and zero variance
        for a, b in samples(np.random.default_rng(0)):
            assert same_bits(welch(a, b, 0.95), scipy_welch(a, b, 0.95)), (a, b)
