"""Student's t quantile and the F distribution's upper tail, the analysis' only uses of scipy.stats
outside the Welch test (analysis/verdicts.py).

scipy.stats computes both with these scipy.special functions (t.ppf: stdtrit; f.sf: fdtrc) behind
its argument checks, which are repeated here, so the numbers are the same bits; importing
scipy.special alone costs each Snakemake job a third of what scipy.stats does (~0.6 CPU-s less).
"""

from __future__ import annotations

import math

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
