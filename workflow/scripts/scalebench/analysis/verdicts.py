"""Verdicts with their confidence (results/summary/verdicts.csv): is a backend, or a framework, faster
than another by more than the noise between seeds?

Comparisons, each within one source (this study, or one imported study) and GPU count:
- ``backends``: every pair of one framework's backends (per variant), on the steady throughput
  (runs.csv ``images_per_s``, images per second over all ranks);
- ``frameworks``: the frameworks on one backend (per variant), on the same throughput;
- the same pairs of backends on the time to the target validation IOU (``kind`` time_to_target),
  where every seed of both reached it: a backend that is faster per epoch but needs more epochs at its
  larger global batch is not faster to target, and this compares the time that includes those epochs.
  Where some seeds never reached the target the pair has no time verdict, and the verdict says how many
  did on each side.

Cells enter as scaling.csv's do (status ok, timings known). Each pair is tested with Welch's t on the
log of the values (scipy.stats.ttest_ind, unequal variances: a few seeds per side, a ratio rather than
a difference), so ``ratio`` is the ratio of the geometric means, always written as the faster over the
slower (a's speed over b's: throughput a / b, or time to target b / a), with its 95% interval (``low``,
``high``). The p-values of every comparison of the study are corrected together with Holm's method
(``p_holm``): the more pairs a study compares, the more of them differ by chance. A pair is called
different where ``p_holm`` < 0.05. The interval is the pair's own (uncorrected), so with many
comparisons a pair whose interval just excludes 1 can still be "no difference the seeds can show".
One seed on either side gives no verdict: Welch's t needs two values to know the spread.
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pandas as pd
from scipy import stats

from scalebench.analysis.scaling import LEVEL, usable

ALPHA = 0.05
COLUMNS = [
    "kind",  # throughput or time_to_target
    "compared",  # backends (of one framework) or frameworks (on one backend)
    "source",
    "framework",  # empty where frameworks are compared
    "backend",  # empty where backends are compared
    "variant",
    "gpus",
    "a",  # the faster by its mean
    "b",
    "mean_a",  # images/s, or seconds to the target
    "mean_b",
    "ratio",  # a's speed over b's: > 1
    "low",
    "high",
    "p",
    "p_holm",
    "seeds_a",
    "seeds_b",
    "seeds",  # the smaller side
    "verdict",
]
KINDS = {"throughput": "images_per_s", "time_to_target": "time_to_target_s"}


def welch_log(faster: np.ndarray, slower: np.ndarray) -> tuple[float, float, float, float]:
    """(ratio, low, high, p) of two sides' log speeds: exp of the difference of their means."""
    result = stats.ttest_ind(faster, slower, equal_var=False)
    ratio = math.exp(float(np.mean(faster) - np.mean(slower)))
    if math.isnan(result.pvalue):  # no spread on either side: exact values
        return ratio, ratio, ratio, 0.0 if ratio != 1 else 1.0
    interval = result.confidence_interval(LEVEL)
    return ratio, math.exp(interval.low), math.exp(interval.high), float(result.pvalue)


def percent(ratio: float) -> str:
    """A ratio as the percentage it is above 1 ('12%')."""
    return f"{100 * (ratio - 1):.0f}%"


def percent_range(low: float, high: float) -> str:
    """An interval of ratios as percentages ('8-16%')."""
    return f"{100 * (low - 1):.0f}-{percent(high)}"


def seeds_text(count_a: int, count_b: int) -> str:
    return f"n = {count_a}" if count_a == count_b else f"n = {count_a} and {count_b}"


def pair(kind: str, keys: dict, a: str, b: str, speeds: dict[str, np.ndarray], means: dict[str, float]) -> dict:
    """One comparison, before Holm's correction; `speeds` are log speeds per side."""
    row = {"kind": kind, **keys, "a": a, "b": b, "mean_a": means[a], "mean_b": means[b]}
    count_a, count_b = len(speeds[a]), len(speeds[b])
    row.update(seeds_a=count_a, seeds_b=count_b, seeds=min(count_a, count_b))
    if min(count_a, count_b) < 2:
        ratio = math.exp(float(np.mean(speeds[a]) - np.mean(speeds[b])))
        return row | {
            "ratio": ratio,
            "low": math.nan,
            "high": math.nan,
            "p": math.nan,
            "verdict": "one seed: no verdict",
        }
    ratio, low, high, p = welch_log(speeds[a], speeds[b])
    return row | {"ratio": ratio, "low": low, "high": high, "p": p}


def holm(p_values: pd.Series) -> pd.Series:
    """Holm's step-down adjustment of the known p-values (NaN stays NaN)."""
    known = p_values.dropna().sort_values(kind="stable")
    m, running, adjusted = len(known), 0.0, {}
    for order, (index, p) in enumerate(known.items()):
        running = max(running, min(1.0, (m - order) * p))
        adjusted[index] = running
    return pd.Series(adjusted, index=p_values.index, dtype=float)


def words(row: pd.Series) -> str:
    """The verdict of a tested pair, from its corrected p-value."""
    if row["p_holm"] < ALPHA:
        what = "faster" if row["kind"] == "throughput" else "faster to the target"
        return f"{what} by {percent(row['ratio'])} ({percent_range(row['low'], row['high'])})"
    return f"no difference the seeds can show ({seeds_text(row['seeds_a'], row['seeds_b'])})"


def throughput_pairs(cells: pd.DataFrame, compared: str, keys: dict) -> list[dict]:
    """Every pair of one group's backends (or frameworks), the faster by its geometric mean first."""
    name = "backend" if compared == "backends" else "framework"
    speeds = {side: np.log(group["images_per_s"].to_numpy(float)) for side, group in cells.groupby(name, sort=True)}
    order = sorted(speeds, key=lambda side: -float(np.mean(speeds[side])))
    means = {side: float(cells.loc[cells[name] == side, "images_per_s"].mean()) for side in order}
    return [pair("throughput", keys, a, b, speeds, means) for a, b in combinations(order, 2)]


def target_pairs(cells: pd.DataFrame, keys: dict) -> list[dict]:
    """Every pair of one framework's backends on the time to target, where every seed reached it."""
    reached = {
        backend: (group["time_to_target_s"].dropna().to_numpy(float), len(group))
        for backend, group in cells.groupby("backend", sort=True)
    }
    # the backends whose seeds all reached it first, then the quicker by mean
    order = sorted(
        reached,
        key=lambda b: (-len(reached[b][0]) / reached[b][1], float(np.mean(reached[b][0])) if len(reached[b][0]) else 0),
    )
    rows = []
    for a, b in combinations(order, 2):
        (times_a, seeds_a), (times_b, seeds_b) = reached[a], reached[b]
        if len(times_a) == seeds_a and len(times_b) == seeds_b:
            speeds = {a: -np.log(times_a), b: -np.log(times_b)}
            rows.append(pair("time_to_target", keys, a, b, speeds, {a: times_a.mean(), b: times_b.mean()}))
            continue
        counts = f"{a} in {len(times_a)} of {seeds_a} seeds, {b} in {len(times_b)} of {seeds_b}"
        if len(times_a) == seeds_a and not len(times_b):
            verdict = f"only {a} reached the target ({counts})"
        else:
            verdict = f"not every seed reached the target ({counts}): no verdict"
        rows.append(
            {
                "kind": "time_to_target",
                **keys,
                "a": a,
                "b": b,
                "mean_a": times_a.mean() if len(times_a) else math.nan,
                "mean_b": times_b.mean() if len(times_b) else math.nan,
                "seeds_a": seeds_a,
                "seeds_b": seeds_b,
                "seeds": min(seeds_a, seeds_b),
                "verdict": verdict,
            }
        )
    return rows


def verdicts(runs: pd.DataFrame) -> pd.DataFrame:
    """results/summary/verdicts.csv from runs.csv (module docstring)."""
    good = usable(runs)
    good = good[good["images_per_s"].notna() & (good["images_per_s"] > 0)]
    rows: list[dict] = []
    for (source, framework, variant, gpus), cells in good.groupby(["source", "framework", "variant", "gpus"]):
        keys = {"compared": "backends", "source": source, "framework": framework, "backend": "", "variant": variant}
        keys["gpus"] = int(gpus)
        if cells["backend"].nunique() > 1:
            rows += throughput_pairs(cells, "backends", keys)
            rows += target_pairs(cells, keys)
    for (source, backend, variant, gpus), cells in good.groupby(["source", "backend", "variant", "gpus"]):
        keys = {"compared": "frameworks", "source": source, "framework": "", "backend": backend, "variant": variant}
        keys["gpus"] = int(gpus)
        if cells["framework"].nunique() > 1:
            rows += throughput_pairs(cells, "frameworks", keys)
    table = pd.DataFrame(rows, columns=COLUMNS)
    table["p_holm"] = holm(table["p"])
    table["verdict"] = table["verdict"].astype(object)
    tested = table["p_holm"].notna()
    table.loc[tested, "verdict"] = table[tested].apply(words, axis=1)
    return table


def read(path) -> pd.DataFrame:
    """verdicts.csv back, typed."""
    text = {
        name: str for name in ("kind", "compared", "source", "framework", "backend", "variant", "a", "b", "verdict")
    }
    frame = pd.read_csv(path, dtype=text)
    for name in ("framework", "backend", "variant"):
        frame[name] = frame[name].fillna("")
    return frame.reindex(columns=COLUMNS)
