"""Student's t quantile, the F distribution's upper tail and Welch's t-test: the analysis' uses of
scipy.stats, computed as scipy.stats computes them (t.ppf: stdtrit; f.sf: fdtrc; ttest_ind: its
moments, then stdtr and stdtrit) behind its argument checks, which are repeated here, so the
numbers are the same bits. Importing scipy.special alone costs each Snakemake job a third of what
scipy.stats does (~0.6 CPU-s less); the analysis jobs import this module, never scipy.stats.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special


def t_quantile(q: float, dof: float) -> float:
    """scipy.stats.t.ppf(q, dof): NaN where dof is not positive or q is outside [0, 1]."""
    if not dof > 0 or not 0 <= q <= 1:
        return math.nan
    if q in (0, 1):
        return -math.inf if q == 0 else math.inf
    return special.stdtrit(dof, q)


def f_tail(x: float, dfn: float, dfd: float) -> float:
    """scipy.stats.f.sf(x, dfn, dfd): P(F > x); NaN where x is NaN or a degree of freedom not positive."""
    if not (dfn > 0 and dfd > 0) or math.isnan(x):
        return math.nan
    if x <= 0:
        return 1.0
    if x == math.inf:
        return 0.0
    return special.fdtrc(dfn, dfd, x)


def welch(a: np.ndarray, b: np.ndarray, level: float) -> tuple[float, float, float]:
    """scipy.stats.ttest_ind(a, b, equal_var=False): (p, low, high), the two-sided p and the
    `level` interval of mean(a) - mean(b), in scipy's own order of operations (the same bits).
    Samples of fewer than two or with a non-finite value go to scipy.stats itself, whose
    nan_policy and small-sample handling are not repeated here."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2 or len(b) < 2 or not (np.isfinite(a).all() and np.isfinite(b).all()):
        from scipy import stats

        result = stats.ttest_ind(a, b, equal_var=False)
        interval = result.confidence_interval(level)
        return float(result.pvalue), float(interval.low), float(interval.high)
    (v1, m1, n1), (v2, m2, n2) = _var_mean_len(a), _var_mean_len(b)
    vn1, vn2 = v1 / n1, v2 / n2
    df = welch_dof(vn1, vn2, n1, n2)
    with np.errstate(divide="ignore", invalid="ignore"):
        denom = np.sqrt(vn1 + vn2)
        t = np.divide(m1 - m2, denom)
    p = 2 * special.stdtr(df, -np.abs(t))
    tail = (1 - np.asarray(level, dtype=float)) / 2
    low, high = special.stdtrit(df, np.stack((tail, 1 - tail)).reshape((2,) + (1,) * np.ndim(df)))
    estimate = m1 - m2
    return float(p), float(low * denom + estimate), float(high * denom + estimate)


def welch_dof(vn1: float, vn2: float, n1: int, n2: int) -> np.ndarray:
    """Welch's degrees of freedom of two sides whose variances of the mean are `vn1` and `vn2`
    (variance / n) over `n1` and `n2` values, as scipy computes them; 1 where both are zero (any
    will do: the interval has no width)."""
    vn1, vn2 = np.asarray(vn1, dtype=float), np.asarray(vn2, dtype=float)  # n = 1 divides by zero as numpy does
    with np.errstate(divide="ignore", invalid="ignore"):
        df = (vn1 + vn2) ** 2 / (vn1**2 / (n1 - 1) + vn2**2 / (n2 - 1))
    return np.where(np.isnan(df), 1.0, df)


def _var_mean_len(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """scipy.stats' _var(x, ddof=1) (the mean of squared deviations, times n / (n - 1)), mean, length."""
    n = x.shape[0]
    var = np.mean((x - np.mean(x, keepdims=True)) ** 2)
    var *= np.asarray(n, dtype=x.dtype) / (np.asarray(n, dtype=x.dtype) - 1)
    return var, np.mean(x), n
