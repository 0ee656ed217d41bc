"""The loss waterfall: what each GPU count beyond the base cost, and to which cause
(results/summary/waterfall.csv).

For every series (source, framework, backend, variant) and GPU count N above its base (the
smallest count with usable cells, as scaling.csv), the measured steady epoch is split into the ideal
and additive terms, in seconds:

    measured = ideal + compute_growth + imbalance + exposed_comm + data_wait + rest

- ``ideal``: the base's steady epoch scaled as the study's efficiency scales it (scaling.ideal_factor:
  base / N, times the growth of an epoch's work where training.steps_per_epoch fixes its steps);
- each other term: the cell's part of its critical path (timing/step_split.py) less the base's same
  part scaled alike: ``compute_growth`` the typical rank's compute, ``imbalance`` the critical rank's
  compute above it (stragglers), ``exposed_comm`` the communication the critical rank itself waited for
  (the network and the collective, never a peer's lateness), ``data_wait`` its wait for batches,
  ``rest`` the remainder. They add up to the measured time exactly, since the parts of each cell's
  critical path add up to its steady epoch (the steady median epoch's parts, step_split.py).

Per row the mean over the seeds at N (means add up; medians would not), with the study's 95%
t-interval over those seeds (``low``, ``high``; empty with one seed); the base enters as its mean over
its seeds, and the ideal's interval is the base's, scaled. ``share`` is the term over the mean measured
time. A count whose cells, or whose base, have no critical path (recorded before the step split,
imported logs, training.step_split off) has empty rows with the reason.
"""

from __future__ import annotations

import math

import pandas as pd

from scalebench.analysis.scaling import GROUP, base_gpus_of, ideal_factor, t_interval, usable
from scalebench.analysis.tables import table_frame
from scalebench.records.tables import WATERFALL
from scalebench.timing.step_split import CRITICAL_PATH

# term: the critical path's part (runs.csv) it is the growth of
PARTS = dict(zip(["compute_growth", "imbalance", "exposed_comm", "data_wait", "rest"], CRITICAL_PATH, strict=True))
TERMS = ["ideal", *PARTS, "measured"]
LABELS = {
    "ideal": "ideal (the base, scaled)",
    "compute_growth": "compute growth",
    "imbalance": "imbalance (stragglers)",
    "exposed_comm": "exposed communication",
    "data_wait": "data wait",
    "rest": "rest",
    "measured": "measured",
}
NO_SPLIT = "no per-rank step split (recorded before the step split, an imported log, or training.step_split off)"


def waterfall(runs: pd.DataFrame) -> pd.DataFrame:
    """results/summary/waterfall.csv from runs.csv (module docstring)."""
    rows: list[dict] = []
    for series, group in runs.groupby(GROUP, sort=True, dropna=False):
        good = usable(group)
        base_gpus = base_gpus_of(good)
        if isinstance(base_gpus, float):  # NaN: no usable cell
            continue
        base = good[good["gpus"] == base_gpus]
        base_split = base.dropna(subset=CRITICAL_PATH)
        for gpus, cells in good[good["gpus"] > base_gpus].groupby("gpus", sort=True):
            keys = {**dict(zip(GROUP, series, strict=True)), "gpus": int(gpus), "base_gpus": int(base_gpus)}
            split = cells.dropna(subset=CRITICAL_PATH)
            if base_split.empty:
                rows += empty_rows(keys, f"its base ({base_gpus} GPUs) has {NO_SPLIT}")
            elif split.empty:
                rows += empty_rows(keys, f"its cells have {NO_SPLIT}")
            else:
                left_out = len(cells) - len(split)
                note = f"{left_out} of {len(cells)} cells left out: {NO_SPLIT}" if left_out else ""
                rows += count_rows(keys, split, base_split, ideal_factor(split, base_split, int(gpus), base_gpus), note)
    return table_frame(WATERFALL, rows)


def empty_rows(keys: dict, reason: str) -> list[dict]:
    return [{**keys, "term": term, "seconds": math.nan, "seeds": 0, "reason": reason} for term in TERMS]


def count_rows(keys: dict, cells: pd.DataFrame, base: pd.DataFrame, factor: float, note: str) -> list[dict]:
    """The rows of one GPU count: each term per seed, then their mean and interval."""
    base_parts = {part: float(base[part].mean()) for part in CRITICAL_PATH}
    base_epochs = base[CRITICAL_PATH].sum(axis=1).to_numpy(float)
    per_seed = {term: (cells[part] - base_parts[part] * factor).to_numpy(float) for term, part in PARTS.items()}
    per_seed["measured"] = cells[CRITICAL_PATH].sum(axis=1).to_numpy(float)
    measured = float(per_seed["measured"].mean())
    rows = []
    for term in TERMS:
        if term == "ideal":
            mean, low, high = t_interval(base_epochs * factor)
        else:
            mean, low, high = t_interval(per_seed[term])
        rows.append(
            {
                **keys,
                "term": term,
                "seconds": mean,
                "share": mean / measured if measured else math.nan,
                "low": low,
                "high": high,
                "seeds": len(cells),
                "reason": note,
            }
        )
    return rows


def read(path) -> pd.DataFrame:
    """waterfall.csv back, typed (an empty study writes only its header)."""
    frame = pd.read_csv(path, dtype=WATERFALL.text())
    frame["variant"] = frame["variant"].fillna("")
    frame["reason"] = frame["reason"].fillna("")
    return frame.reindex(columns=WATERFALL.names)


def terms_of(table: pd.DataFrame) -> pd.DataFrame:
    """The additive terms only (not ideal, not measured), with a measured value."""
    return table[table["term"].isin(list(PARTS)) & table["seconds"].notna()]


def largest_term(table: pd.DataFrame) -> pd.Series | None:
    """The largest of one GPU count's additive terms, or None where none was measured."""
    terms = terms_of(table)
    if terms.empty:
        return None
    return terms.loc[terms["seconds"].idxmax()]
