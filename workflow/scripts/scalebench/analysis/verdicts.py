"""Verdicts with their confidence (results/summary/verdicts.csv): is a backend, or a framework, faster
than another by more than the noise between seeds?

Comparisons, each within one source (this study, or one imported study) and GPU count:
- ``backends``: every pair of one framework's backends (per variant), on the steady throughput
  (runs.csv ``images_per_s``, images per second over all ranks);
- ``frameworks``: the frameworks on one backend (per variant), on the same throughput;
- an imported study's logs record no images per second: its pairs are compared on the steady epoch
  time (``kind`` epoch_time, runs.csv ``steady_epoch_s``), which the reference studies' fixed global
  batch makes the same work in every cell of a GPU count;
- the same pairs of backends on the time to the target validation IOU (``kind`` time_to_target),
  where every seed of both reached it: a backend that is faster per epoch but needs more epochs at its
  larger global batch is not faster to target, and this compares the time that includes those epochs.
  Where some seeds never reached the target the pair has no time verdict, and the verdict says how many
  did on each side.

Cells enter as scaling.csv's do (status ok, timings known). Each pair is tested with Welch's t on the
log of the values (scipy.stats.ttest_ind's, as scalebench/distributions.py computes it, unequal
variances: a few seeds per side, a ratio rather than a difference), so ``ratio`` is the ratio of the
geometric means, always written as the faster over the slower (a's speed over b's: throughput a / b,
or time to target b / a), with its 95% interval (``low``, ``high``). The p-values of every comparison
of the study are corrected together with Holm's method (``p_holm``; an imported study's over its
own): the more pairs a study compares, the more of them differ by chance. A pair is called
different where ``p_holm`` < 0.05. The interval is the pair's own (uncorrected), so with many
comparisons a pair whose interval just excludes 1 can still be "no difference the seeds can show".
One seed on either side gives no verdict: Welch's t needs two values to know the spread.

Each pair's ``state``: ``different`` (p_holm < 0.05), ``equivalent`` (not different, and its interval
lies within the band of equivalence, verdicts.equivalence: "no difference larger than 2%"), ``open``
(neither: more seeds could decide it; a side of one seed too) or ``none`` (more seeds cannot: not every
seed reached the target). ``bound`` is the largest difference the interval leaves (its farther end
from 1, as a fraction): what the seeds rule out, "none larger than 4%". The rounds of matrix.seeds
{initial, max} add seeds where a pair the answer rests on is open (rounds.py), and fill ``round``
(the round that decided it, with ``decided_seeds`` the seeds then) and ``open_reason``.
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pandas as pd

from scalebench.analysis.scaling import LEVEL, usable
from scalebench.analysis.tables import table_frame
from scalebench.distributions import welch
from scalebench.records.tables import VERDICTS

ALPHA = 0.05
EQUIVALENCE = 0.02  # verdicts.equivalence's default
# what each kind compares: the runs.csv column, and whether a larger value is faster
KINDS = {
    "throughput": ("images_per_s", True),
    "epoch_time": ("steady_epoch_s", False),  # imported studies: no images/s in their logs
    "time_to_target": ("time_to_target_s", False),
}
FASTER = {"throughput": "faster", "epoch_time": "faster per epoch", "time_to_target": "faster to the target"}


def welch_log(faster: np.ndarray, slower: np.ndarray) -> tuple[float, float, float, float]:
    """(ratio, low, high, p) of two sides' log speeds: exp of the difference of their means."""
    p, low, high = welch(faster, slower, LEVEL)
    ratio = math.exp(float(np.mean(faster) - np.mean(slower)))
    if math.isnan(p):  # no spread on either side: exact values
        return ratio, ratio, ratio, 0.0 if ratio != 1 else 1.0
    return ratio, math.exp(low), math.exp(high), p


def percent(ratio: float) -> str:
    """A ratio as the percentage it is above 1 ('12%')."""
    return f"{100 * (ratio - 1):.0f}%"


def at_most(fraction: float) -> str:
    """A bound as a whole percentage, rounded up: what the seeds rule out is never understated ('4%')."""
    return f"{math.ceil(round(100 * fraction, 6)):.0f}%"


def band_text(equivalence: float) -> str:
    """The band of equivalence as written in config ('2%', '2.5%')."""
    return f"{100 * equivalence:g}%"


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


def bound(low: float, high: float) -> float:
    """The largest difference an interval of ratios leaves, either way, as a fraction (NaN untested)."""
    return max(high, 1 / low) - 1 if low > 0 and high > 0 else math.nan


def state(row: pd.Series, equivalence: float) -> str:
    """different, equivalent, open or none (the module docstring)."""
    if pd.isna(row["p_holm"]):
        return "open" if row["verdict"] == "one seed: no verdict" else "none"
    if row["p_holm"] < ALPHA:
        return "different"
    if row["high"] <= 1 + equivalence and row["low"] >= 1 / (1 + equivalence):
        return "equivalent"
    return "open"


def words(row: pd.Series, equivalence: float) -> str:
    """The verdict of a tested pair, from its state."""
    seeds = seeds_text(row["seeds_a"], row["seeds_b"])
    if row["state"] == "different":
        return f"{FASTER[row['kind']]} by {percent(row['ratio'])} ({percent_range(row['low'], row['high'])}; {seeds})"
    if row["state"] == "equivalent":
        return f"no difference larger than {band_text(equivalence)} ({seeds})"
    return f"no difference the seeds can show ({seeds}): none larger than {at_most(row['bound'])}"


def speed_pairs(kind: str, cells: pd.DataFrame, compared: str, keys: dict) -> list[dict]:
    """Every pair of one group's backends (or frameworks) on a speed (throughput, or an imported
    study's epoch time), the faster by its geometric mean first."""
    name = "backend" if compared == "backends" else "framework"
    column, larger_is_faster = KINDS[kind]
    sign = 1 if larger_is_faster else -1
    speeds = {side: sign * np.log(group[column].to_numpy(float)) for side, group in cells.groupby(name, sort=True)}
    order = sorted(speeds, key=lambda side: -float(np.mean(speeds[side])))
    means = {side: float(cells.loc[cells[name] == side, column].mean()) for side in order}
    return [pair(kind, keys, a, b, speeds, means) for a, b in combinations(order, 2)]


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


def compared_cells(runs: pd.DataFrame) -> pd.DataFrame:
    """The cells that enter the verdicts, each with the kind of speed it is compared on: throughput
    where it knows its images/s, else (an imported log) its steady epoch time."""
    good = usable(runs)
    throughput = good["images_per_s"].notna() & (good["images_per_s"] > 0)
    epoch = ~throughput & good["steady_epoch_s"].notna() & (good["steady_epoch_s"] > 0)
    kinds = pd.Series("throughput", index=good.index).where(throughput, "epoch_time")
    return good[throughput | epoch].assign(speed=kinds[throughput | epoch])


def verdicts(runs: pd.DataFrame, equivalence: float = EQUIVALENCE) -> pd.DataFrame:
    """results/summary/verdicts.csv from runs.csv (module docstring); `equivalence`: verdicts.equivalence."""
    good = compared_cells(runs)
    rows: list[dict] = []
    by_backends = ["source", "speed", "framework", "variant", "gpus"]
    for (source, kind, framework, variant, gpus), cells in good.groupby(by_backends):
        keys = {"compared": "backends", "source": source, "framework": framework, "backend": "", "variant": variant}
        keys["gpus"] = int(gpus)
        if cells["backend"].nunique() > 1:
            rows += speed_pairs(kind, cells, "backends", keys)
            rows += target_pairs(cells, keys)
    for (source, kind, backend, variant, gpus), cells in good.groupby(
        ["source", "speed", "backend", "variant", "gpus"]
    ):
        keys = {"compared": "frameworks", "source": source, "framework": "", "backend": backend, "variant": variant}
        keys["gpus"] = int(gpus)
        if cells["framework"].nunique() > 1:
            rows += speed_pairs(kind, cells, "frameworks", keys)
    table = table_frame(VERDICTS, rows)
    # each study's claims corrected over its own comparisons (an imported study is another study)
    table["p_holm"] = table.groupby("source")["p"].transform(holm) if len(table) else table["p"]
    table["verdict"] = table["verdict"].astype(object)
    table["state"] = table.apply(state, axis=1, equivalence=equivalence).astype(object) if len(table) else None
    table["bound"] = [bound(low, high) for low, high in zip(table["low"], table["high"], strict=True)]
    tested = table["p_holm"].notna()
    table.loc[tested, "verdict"] = table[tested].apply(words, axis=1, equivalence=equivalence)
    for name in ("round", "decided_seeds"):
        table[name] = table[name].astype("Int64")
    table["open_reason"] = table["open_reason"].astype(object)
    return table


def read(path) -> pd.DataFrame:
    """verdicts.csv back, typed."""
    frame = pd.read_csv(path, dtype=VERDICTS.text())
    frame = frame.reindex(columns=VERDICTS.names)
    for name in ("framework", "backend", "variant"):
        frame[name] = frame[name].fillna("")
    for name in ("round", "decided_seeds"):
        frame[name] = frame[name].astype("Int64")
    return frame
