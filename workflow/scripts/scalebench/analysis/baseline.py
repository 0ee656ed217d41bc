"""This study against a baseline study (`compare.baseline`): results/summary/baseline.csv.

People rerun a study after upgrading a driver, NCCL or a framework, or on a second cluster, and
ask what changed. For every cell key both studies share (framework, backend, variant, GPUs) the
table gives three ratios, this study / baseline, each with a 95% interval from both studies'
seeds (the project's own cells with status ok; seeds are not paired across studies):

- ``images_per_s_ratio``: mean images/s here over the baseline's; Welch t-interval on the log
  of the ratio of means (delta method), as scaling.py's unpaired speedup;
- ``efficiency_ratio``: parallel efficiency of the total training time (scaling.csv's
  ``efficiency_train_time``: base * mean time at the base / (GPUs * mean time at GPUs), base the
  smallest GPU count with usable cells); log ratio = the sum of four log means, its variance the
  sum of theirs (s^2 / (n mean^2)), Welch-Satterthwaite degrees of freedom. At the base count
  it is 1 by definition; where the studies' bases differ it is left empty with the reason;
- ``time_to_target_ratio``: mean time to the target validation IOU, as images/s, over the cells
  that reached it (empty with the reason where none did in a study).

A ratio is flagged (``*_change``) where its interval excludes 1: images/s ``faster`` above 1,
``slower`` below; time to target ``faster`` below 1, ``slower`` above; efficiency ``higher``
or ``lower``. Without an interval (one seed on a side) it is not flagged, and the note says so.
Cells only one study has are listed (``present``). ``provenance_differences`` names what differs
between the two studies' cells of the key and could explain a change: library versions,
devices, nodes, config hash, the resolved training settings and the site (run.json's `site`,
key by key: the driver, each GPU's clocks, power limit and MIG mode, the topology, the CUDA
runtime and NCCL as loaded, the network adapters, the NCCL_/HOROVOD_/TF_/OMP_ variables).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from scalebench.analysis.baseline_tables import KEY, missing_columns
from scalebench.analysis.collect import flat_settings
from scalebench.analysis.scaling import LEVEL, unpaired_speedup, usable
from scalebench.analysis.summary_csv import TEXT
from scalebench.analysis.tables import runs_frame, table_frame
from scalebench.cell import OWN_SOURCE
from scalebench.distributions import t_quantile
from scalebench.records.tables import BASELINE, RUNS

CELL = ["framework", "backend", "variant", "gpus"]
SERIES = ["framework", "backend", "variant"]
# provenance columns that may explain a change, as the table names them
PROVENANCE = {"versions": "versions", "devices": "devices", "nodes": "nodes", "config_hash": "config hash"}
# what a column that older tables lack empties
# records flattened to JSON in runs.csv, compared key by key under their prefix
RECORDS = {"training": "training settings", "site": "site"}
OPTIONAL = {"time_to_target_s": "time to target", **RECORDS, **PROVENANCE}
MEASURES = {
    "images_per_s": ("images_per_s", ("faster", "slower")),
    "efficiency": ("train_time_s", ("higher", "lower")),
    "time_to_target": ("time_to_target_s", ("slower", "faster")),  # above 1: it took longer
}


class BaselineError(ValueError):
    """A baseline whose tables cannot be compared (names the config key and the columns)."""


def read_baseline(path: str | Path) -> tuple[pd.DataFrame, list[str]]:
    """The baseline's runs.csv as this version's runs frame, and the optional columns it lacked
    (an older version of the tables: read where the columns allow)."""
    missing = missing_columns(path)
    if missing:
        raise BaselineError(
            f"config key '{KEY}': {path} lacks the column(s) {', '.join(missing)} the comparison needs "
            "(a version of the tables too old to compare)"
        )
    frame = pd.read_csv(path, dtype={k: v for k, v in TEXT.items()})
    absent = [column for column in OPTIONAL if column not in frame.columns]
    if "source" not in frame:  # tables from before imported studies: every row is the study's own
        frame["source"] = OWN_SOURCE
    frame["reason"] = frame["reason"].fillna("") if "reason" in frame else ""
    return runs_frame(frame.reindex(columns=RUNS.names).to_dict("records")), absent


def log_variance(values: np.ndarray) -> tuple[float, int]:
    """Variance of the log of the mean of `values` (delta method) and its sample size."""
    return float(values.var(ddof=1) / (len(values) * values.mean() ** 2)), len(values)


def log_ratio_interval(ratio: float, parts: list[tuple[float, int]]) -> tuple[float, float]:
    """95% interval of a ratio whose log is a sum of independent log means with these variances."""
    total = sum(v for v, _ in parts)
    if total == 0:
        return ratio, ratio
    dof = total**2 / sum(v**2 / (n - 1) for v, n in parts if v > 0)
    half = t_quantile(0.5 + LEVEL / 2, dof) * math.sqrt(total)
    return ratio * math.exp(-half), ratio * math.exp(half)


def efficiency(series: pd.DataFrame, gpus: int) -> tuple[float, list[np.ndarray], int | None]:
    """Efficiency of the total training time at `gpus` in one study's series, the two samples
    it comes from (base, this count) and the base GPU count (None: no usable cell)."""
    good = usable(series)
    if good.empty:
        return math.nan, [], None
    base = int(good["gpus"].min())
    at_base = good.loc[good["gpus"] == base, "train_time_s"].to_numpy(float)
    here = good.loc[good["gpus"] == gpus, "train_time_s"].to_numpy(float)
    if not len(here):
        return math.nan, [], base
    return base * at_base.mean() / (gpus * here.mean()), [at_base, here], base


def flag(ratio: tuple[float, float, float], words: tuple[str, str]) -> str:
    """words[0] where the interval lies above 1, words[1] below, '' where it holds 1 or is unknown."""
    _, lo, hi = ratio
    if lo > 1:
        return words[0]
    if hi < 1:
        return words[1]
    return ""


def compare_cell(here: pd.DataFrame, there: pd.DataFrame, series_here, series_there, gpus: int, absent) -> dict:
    """The ratios of one shared cell key; `here`/`there`: its cells in each study, `series_*`: the
    cells of its series (for the efficiency's base)."""
    row: dict = {"cells_here": len(usable(here)), "cells_baseline": len(usable(there))}
    notes = []
    # images/s and time to target: ratio of the means over each study's seeds
    for name in ("images_per_s", "time_to_target"):
        metric, words = MEASURES[name]
        if metric in absent:
            notes.append(f"{name.replace('_', ' ')}: the baseline's tables have no {metric} (an older version)")
            continue
        mine, theirs = usable(here, metric)[metric], usable(there, metric)[metric]
        row[f"{name}_here"] = mine.mean() if len(mine) else math.nan
        row[f"{name}_baseline"] = theirs.mean() if len(theirs) else math.nan
        if not len(mine) or not len(theirs):
            side = "this study" if not len(mine) else "the baseline"
            cells = here if not len(mine) else there
            reasons = cells["time_to_target_reason"].dropna() if name == "time_to_target" else []
            why = next((r for r in reasons if r), "")
            notes.append(f"{name.replace('_', ' ')}: no usable cell in {side}" + (f" ({why})" if why else ""))
            continue
        ratio = unpaired_speedup(mine.to_numpy(float), theirs.to_numpy(float))
        row |= dict(zip((f"{name}_ratio", f"{name}_ratio_lo", f"{name}_ratio_hi"), ratio))
        row[f"{name}_change"] = flag(ratio, words)
        if math.isnan(ratio[1]):
            notes.append(f"{name.replace('_', ' ')}: one seed on a side, no interval")
    # efficiency: relative to each study's own base, which must be the same count
    mine, mine_samples, mine_base = efficiency(series_here, gpus)
    theirs, theirs_samples, theirs_base = efficiency(series_there, gpus)
    row |= {"efficiency_here": mine, "efficiency_baseline": theirs}
    if mine_base is None or theirs_base is None or math.isnan(mine) or math.isnan(theirs):
        notes.append("efficiency: no usable cell at this count or its base in one study")
    elif mine_base != theirs_base:
        notes.append(f"efficiency: bases differ ({mine_base} GPUs here, {theirs_base} in the baseline), not compared")
    elif gpus == mine_base:
        row |= {"efficiency_ratio": 1.0}
        notes.append(f"efficiency: {gpus} GPUs is the base, 1 by definition in both")
    else:
        ratio = mine / theirs
        samples = mine_samples + theirs_samples
        if min(len(s) for s in samples) < 2:
            interval = (math.nan, math.nan)
            notes.append("efficiency: one seed on a side, no interval")
        else:
            interval = log_ratio_interval(ratio, [log_variance(s) for s in samples])
        row |= {"efficiency_ratio": ratio, "efficiency_ratio_lo": interval[0], "efficiency_ratio_hi": interval[1]}
        row["efficiency_change"] = flag((ratio, *interval), MEASURES["efficiency"][1])
    row["note"] = "; ".join(notes)
    return row


def values(cells: pd.DataFrame, column: str) -> list[str]:
    """The distinct recorded values of a provenance column over `cells`."""
    if column not in cells:
        return []
    return sorted({str(v) for v in cells[column].dropna() if str(v) != ""})


def version_map(text: str) -> dict[str, str]:
    """'python 3.11.7, torch 2.13.0' -> {'python': '3.11.7', 'torch': '2.13.0'}."""
    pairs = (part.strip().rsplit(" ", 1) for part in text.split(",") if part.strip())
    return {pair[0]: pair[-1] for pair in pairs}


def settings_of(cells: pd.DataFrame, column: str = "training") -> dict[str, set[str]]:
    """Each key's values over `cells` of a record runs.csv holds as flattened JSON ('training', 'site')."""
    found: dict[str, set[str]] = {}
    for text in cells[column].dropna() if column in cells else []:
        for key, value in flat_settings(json.loads(text)).items():
            found.setdefault(key, set()).add(json.dumps(value))
    return found


def provenance_differences(here: pd.DataFrame, there: pd.DataFrame, absent: list[str]) -> str:
    """What differs between the two studies' cells: versions (per library), devices, nodes, config
    hash and training settings, 'name: baseline -> here'; what the baseline did not record, said."""
    changes = []
    mine, theirs = values(here, "versions"), values(there, "versions")
    if "versions" not in absent and mine and theirs and mine != theirs:
        old = {k: v for text in theirs for k, v in version_map(text).items()}
        new = {k: v for text in mine for k, v in version_map(text).items()}
        for name in sorted(set(old) | set(new)):
            if old.get(name) != new.get(name):
                changes.append(f"{name}: {old.get(name, 'absent')} -> {new.get(name, 'absent')}")
    for column, label in PROVENANCE.items():
        if column == "versions":
            continue
        mine, theirs = values(here, column), values(there, column)
        if column not in absent and mine != theirs and (mine or theirs):
            changes.append(f"{label}: {'/'.join(theirs) or 'unknown'} -> {'/'.join(mine) or 'unknown'}")
    unrecorded = [OPTIONAL[c] for c in absent if c in PROVENANCE or c in RECORDS]
    for column in RECORDS:
        old, new = settings_of(there, column), settings_of(here, column)
        if column in absent or not (old and new):
            if column not in absent and (old or new):  # cells from before the record existed
                changes.append(f"{column}: not recorded by {'the baseline' if not old else 'this study'}'s cells")
            continue
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                before = "/".join(sorted(old.get(key, {"absent"})))
                after = "/".join(sorted(new.get(key, {"absent"})))
                changes.append(f"{column}.{key}: {before} -> {after}")
    if unrecorded:
        changes.append(f"not in the baseline's tables: {', '.join(unrecorded)}")
    return "; ".join(changes)


def own(runs: pd.DataFrame) -> pd.DataFrame:
    """The study's own cells (imported legacy studies are not part of a comparison)."""
    frame = runs[runs["source"].fillna(OWN_SOURCE) == OWN_SOURCE].copy()
    frame["variant"] = frame["variant"].fillna("").astype(str)
    frame["gpus"] = frame["gpus"].astype(int)
    return frame


def matching(frame: pd.DataFrame, key: dict) -> pd.DataFrame:
    """The rows of `frame` whose columns hold `key`'s values (a cell key, or a series' part of one)."""
    return frame[(frame[list(key)] == pd.Series(key)).all(axis=1)]


def compare(current: pd.DataFrame, baseline: pd.DataFrame, absent: list[str] | None = None) -> pd.DataFrame:
    """baseline.csv: one row per cell key of either study (see the module docstring)."""
    absent = absent or []
    here, there = own(current), own(baseline)
    keys = sorted(
        set(map(tuple, here[CELL].itertuples(index=False))) | set(map(tuple, there[CELL].itertuples(index=False)))
    )
    rows = []
    for key in keys:
        row = dict(zip(CELL, key, strict=True))
        cells_here, cells_there = matching(here, row), matching(there, row)
        if cells_here.empty or cells_there.empty:
            row["present"] = "baseline only" if cells_here.empty else "this study only"
            row |= {"cells_here": len(usable(cells_here)), "cells_baseline": len(usable(cells_there))}
            rows.append(row)
            continue
        series = dict(zip(SERIES, key[:3], strict=True))
        in_series = [matching(frame, series) for frame in (here, there)]
        row["present"] = "both"
        row |= compare_cell(cells_here, cells_there, *in_series, int(key[3]), absent)
        row["provenance_differences"] = provenance_differences(cells_here, cells_there, absent)
        rows.append(row)
    return table_frame(BASELINE, rows)


def study_differences(current: pd.DataFrame, baseline: pd.DataFrame, absent: list[str] | None = None) -> str:
    """The provenance differences over all the cells of both studies, for the table's note."""
    return provenance_differences(own(current), own(baseline), absent or [])
