"""Change points in a series of studies: where a figure's level moved, how sure, and by how much.

The method, and why:
- **Where**: ruptures' binary segmentation (`Binseg`) with its least-squares cost (`l2`, a change
  of the mean): the split of a segment that leaves the smallest summed squared deviation. ruptures
  is a maintained library (1.1.10, wheels for Python 3.11 to 3.13) that needs only numpy and scipy,
  which the analysis already has; apache-otava's E-Divisive, the other candidate, pins numpy 2.2.0
  and brings a server's dependencies.
- **Whether**: ruptures finds a split in any series, noise too; it has no significance test. Each
  split is tested as E-Divisive tests its own (Matteson and James, 2014): a permutation test of the
  same statistic (the best split's reduction of the cost, `k (n - k) / n` times the squared
  difference of the two sides' means, maximised over the splits, so the search is part of the
  null), with `PERMUTATIONS` orderings of the segment's own values. A split whose p-value is below
  `alpha` is a change point, and both sides are searched again (binary segmentation); the first
  split that is not ends the search of its segment. Under noise alone (the studies exchangeable)
  a series shows a false change with probability at most `alpha`.
- **How much**: the ratio of the mean after the change to the mean before it (the studies between
  the neighbouring change points, or the history's ends), with the Welch t-interval on its log
  (`scaling.unpaired_speedup`, as a speedup's); for an additive figure (seconds that may be near
  0 or below, as the loss waterfall's terms) the difference of the means, with Welch's interval.

A series is the per-study values of one figure of one cell key; a positive series of a ratio figure
is searched on its logarithm (a change is a factor, and noise grows with the level). The permutations are drawn
from a generator seeded by the series' own values, so the same history gives the same answer.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np
import ruptures

from scalebench.analysis.scaling import LEVEL, unpaired_speedup
from scalebench.distributions import welch

PERMUTATIONS = 999
MIN_SIDE = 2  # studies on each side of a change: one study alone is the gate's question, not a level


@dataclass(frozen=True)
class Change:
    """A change point: the series' level moved at `index` (the first study of the new level)."""

    index: int
    p_value: float
    size: float  # mean after / mean before, or (additive) mean after - mean before
    low: float  # its 95% interval (NaN with one study on a side)
    high: float
    before: tuple[int, int]  # the studies compared, [start, end) indices
    after: tuple[int, int]


def find(values: np.ndarray, alpha: float, additive: bool = False, permutations: int = PERMUTATIONS) -> list[Change]:
    """The change points of `values` (one per study, oldest first), in order (module docstring)."""
    values = np.asarray(values, dtype=float)
    additive = additive or not (len(values) and (values > 0).all())
    signal = values if additive else np.log(values)
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(values.tobytes()).digest()[:8], "little"))
    splits = sorted(search(signal, 0, len(signal), alpha, permutations, rng))
    bounds = [0, *(index for index, _ in splits), len(values)]
    changes = []
    for number, (index, p_value) in enumerate(splits, start=1):
        before, after = (bounds[number - 1], index), (index, bounds[number + 1])
        changes.append(
            Change(
                index,
                p_value,
                *size(values[after[0] : after[1]], values[before[0] : before[1]], additive),
                before,
                after,
            )
        )
    return changes


def size(after: np.ndarray, before: np.ndarray, additive: bool) -> tuple[float, float, float]:
    """The change's size and its 95% interval: after / before, or after - before where `additive`."""
    if not additive:
        return unpaired_speedup(after, before)
    difference = float(after.mean() - before.mean())
    if len(after) < 2 or len(before) < 2:
        return difference, math.nan, math.nan
    _, low, high = welch(after, before, LEVEL)
    return difference, low, high


def search(
    signal: np.ndarray, start: int, end: int, alpha: float, permutations: int, rng: np.random.Generator
) -> list[tuple[int, float]]:
    """The significant splits of signal[start:end] as (index, p-value), recursively."""
    segment = signal[start:end]
    if len(segment) < 2 * MIN_SIDE or np.ptp(segment) == 0:
        return []
    split = ruptures.Binseg(model="l2", min_size=MIN_SIDE, jump=1).fit(segment).predict(n_bkps=1)[0]
    p_value = permutation_p(segment, split, permutations, rng)
    if p_value >= alpha:
        return []
    return [
        *search(signal, start, start + split, alpha, permutations, rng),
        (start + split, p_value),
        *search(signal, start + split, end, alpha, permutations, rng),
    ]


def permutation_p(segment: np.ndarray, split: int, permutations: int, rng: np.random.Generator) -> float:
    """The share of orderings of `segment` whose best split reduces the cost as much as `split` does
    (the observed ordering counted among them, so it is never 0)."""
    observed = reduction(segment[None, :])[0, split - MIN_SIDE]
    shuffled = rng.permuted(np.broadcast_to(segment, (permutations, len(segment))), axis=1)
    best = reduction(shuffled).max(axis=1)
    # the relative tolerance keeps the observed ordering's own best split from losing to itself by rounding
    return (1 + int((best >= observed * (1 - 1e-9)).sum())) / (1 + permutations)


def reduction(rows: np.ndarray) -> np.ndarray:
    """For each row, the l2 cost removed by each split k of MIN_SIDE..n - MIN_SIDE: k (n - k) / n
    times the squared difference of the means of the two sides (ruptures' CostL2 before less after)."""
    n = rows.shape[1]
    k = np.arange(MIN_SIDE, n - MIN_SIDE + 1)
    left = np.cumsum(rows, axis=1)[:, k - 1]
    total = rows.sum(axis=1, keepdims=True)
    difference = left / k - (total - left) / (n - k)
    return k * (n - k) / n * difference**2


def smallest_side(studies: int, alpha: float) -> int | None:
    """About the fewest studies a change must have on its smaller side to be found at `alpha` in a
    series of `studies`, or None where no split can reach it: a perfect step's p-value is about the
    share of orderings that put the same studies at either end, 2 / C(studies, side)."""
    for side in range(MIN_SIDE, studies // 2 + 1):
        if 2 / math.comb(studies, side) < alpha:
            return side
    return None
