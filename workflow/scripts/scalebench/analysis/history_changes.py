"""The history's figures across studies and their change points (the report's History section).

Each study of the history (history.path; analysis/history.py), and this one where it is not in the
history yet, gives each of its cell keys (framework, backend, variant, GPUs) a value of each key
figure with its 95% interval from the study's own seeds (FIGURES), computed by the same code as the
comparison of two studies (analysis/baseline.py). A series is one figure of one cell key on one
site (the devices the cells ran on) with one setting (the cells' config hash): a study of other
GPUs or other settings starts another series and is never compared with this one. Each series of
at least 2 * change_points.MIN_SIDE studies is searched for change points (analysis/change_points.py),
and each change is given its size, its interval, its p-value and what changed between the two
studies on either side of it (baseline.provenance_differences: library versions, driver and NCCL
as the ranks loaded them, devices, nodes, config hash, training settings).

Written (rule analyse_history): results/summary/history.csv, one row per study and series, and
results/summary/changes.csv, one row per change point (records/tables.py: HISTORY, CHANGES).
An entry whose tables this version cannot read is skipped with the reason, and a figure an older
entry's tables lack is left out of that study's values, said in `History.notes`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from scalebench.analysis import baseline, change_points, history
from scalebench.analysis.baseline_tables import missing_columns
from scalebench.analysis.scaling import t_interval, usable
from scalebench.analysis.tables import table_frame
from scalebench.analysis.waterfall import LABELS, PARTS
from scalebench.analysis.waterfall import read as read_waterfall
from scalebench.records.tables import CHANGES, HISTORY, HISTORY_SERIES

CELL = list(baseline.CELL)
# figure -> (what the report calls it, its unit, whether higher is better); the waterfall's terms
# are additive (seconds over the ideal, near 0 where nothing is lost): their changes are differences
ADDITIVE = tuple(f"waterfall_{term}" for term in PARTS)
FIGURES = {
    "efficiency": ("parallel efficiency of the training time", "", True),
    "images_per_s_per_gpu": ("images/s per GPU", "images/s", True),
    "time_to_target_s": ("time to the target IOU", "s", False),
    "busbw_gbps": ("bus bandwidth at the gradient size", "GB/s", True),
    **{f"waterfall_{term}": (f"loss waterfall: {LABELS[term]}", "s", False) for term in PARTS},
}
SERIES = [column.name for column in HISTORY_SERIES]
# runs.csv columns of figures that older tables lack: the study gives the other figures
OLDER_TABLES_LACK = {"time_to_target_s": "time to target", "collective_busbw_gbps": "bus bandwidth"}


@dataclass(frozen=True)
class Study:
    """One study as the history's analysis reads it: its entry, its own cells, its loss waterfall."""

    entry: history.Entry
    runs: pd.DataFrame
    absent: list[str]
    waterfall: pd.DataFrame | None
    this: bool = False


@dataclass
class History:
    """history.csv's and changes.csv's frames and what the analysis could not read."""

    studies: list[Study]
    series: pd.DataFrame
    changes: pd.DataFrame
    alpha: float
    notes: list[str] = field(default_factory=list)


def analyse(history_folder: Path, summary: Path, alpha: float) -> History:
    """The history's series and change points, with this study (its results/summary) among them."""
    studies, notes = read_studies(Path(history_folder), Path(summary))
    series = series_table(studies)
    changes, levels = changes_table(series, studies, alpha)
    series["level"] = levels
    return History(studies, series, changes, alpha, notes)


def read_studies(history_folder: Path, summary: Path) -> tuple[list[Study], list[str]]:
    """The history's studies, oldest first, this study among them, and the notes on what was skipped."""
    entries, skipped = history.read(history_folder)
    notes = [f"{entry.folder.name}: skipped, {entry.reason}" for entry in skipped]
    runs_csv = (summary / "runs.csv").read_bytes()
    this_id = history.id_of(runs_csv)
    if this_id not in {entry.study_id for entry in entries}:
        entries.append(history.describe(this_id, summary, {"runs.csv": runs_csv}))
    studies = []
    for entry in sorted(entries, key=history.oldest_first):
        study, problem = read_study(entry, entry.study_id == this_id)
        if problem:
            notes.append(f"{entry.study_id}: {problem}")
        if study is not None:
            studies.append(study)
    return studies, notes


def read_study(entry: history.Entry, this: bool) -> tuple[Study | None, str]:
    """An entry's tables as this version reads them (baseline.read_baseline: an older version's where
    its columns allow), or None with the reason; and what of its figures its tables lack."""
    runs_csv = entry.folder / "runs.csv"
    missing = missing_columns(runs_csv)
    if missing:
        return None, f"skipped, its runs.csv lacks {', '.join(missing)} (tables of an older version)"
    runs, absent = baseline.read_baseline(runs_csv)  # a column its tables lack reads as empty
    header = pd.read_csv(runs_csv, nrows=0).columns
    lacking = [figure for column, figure in OLDER_TABLES_LACK.items() if column not in header]
    waterfall = read_waterfall(entry.folder / "waterfall.csv") if (entry.folder / "waterfall.csv").is_file() else None
    if waterfall is None:
        lacking.append("the loss waterfall")
    problem = f"its tables lack {', '.join(lacking)}: left out of its values" if lacking else ""
    return Study(entry, baseline.own(runs), absent, waterfall, this), problem


def series_table(studies: list[Study]) -> pd.DataFrame:
    """One row per study, cell key and figure with a value (history.csv's rows, `level` still empty)."""
    rows = []
    for position, study in enumerate(studies, start=1):
        head = {
            "study": study.entry.study_id,
            "position": position,
            "start": study.entry.start,
            "this_study": study.this,
        }
        for key, cells in study.runs.groupby(CELL, sort=True):
            keys = dict(zip(CELL, key, strict=True)) | {"gpus": int(key[3])}
            where = {"site": joined(cells, "devices"), "config_hash": joined(cells, "config_hash")}
            for figure, (value, low, high, n) in cell_figures(study, keys).items():
                if not math.isnan(value):
                    rows.append(
                        head | where | keys | {"figure": figure, "value": value, "low": low, "high": high, "n": n}
                    )
    return table_frame(HISTORY, rows)


def joined(cells: pd.DataFrame, column: str) -> str:
    """The distinct recorded values of `column` over the cells, as one label."""
    return "/".join(baseline.values(cells, column))


def cell_figures(study: Study, key: dict) -> dict[str, tuple[float, float, float, int]]:
    """Each figure of one cell key in one study: value, its 95% interval and the cells it rests on."""
    in_series = baseline.matching(study.runs, {name: key[name] for name in baseline.SERIES})
    cells = in_series[in_series["gpus"] == key["gpus"]]
    found = {}
    value, samples, base = baseline.efficiency(in_series, key["gpus"])
    if base is not None and key["gpus"] > base and samples:
        parts = [baseline.log_variance(sample) for sample in samples if len(sample) > 1]
        low, high = baseline.log_ratio_interval(value, parts) if len(parts) == 2 else (math.nan, math.nan)
        found["efficiency"] = (value, low, high, len(samples[1]))
    for figure, column in (
        ("images_per_s_per_gpu", "images_per_s_per_gpu"),
        ("time_to_target_s", "time_to_target_s"),
        ("busbw_gbps", "collective_busbw_gbps"),
    ):
        measured = usable(cells)[column].dropna().to_numpy(float) if column in cells else np.array([])
        if len(measured):
            found[figure] = (*t_interval(measured), len(measured))
    found |= waterfall_figures(study.waterfall, key)
    return found


def waterfall_figures(waterfall: pd.DataFrame | None, key: dict) -> dict[str, tuple[float, float, float, int]]:
    """The loss waterfall's terms of one cell key (its seconds over the ideal, with their interval)."""
    if waterfall is None:
        return {}
    rows = baseline.matching(waterfall, key)
    rows = rows[rows["term"].isin(list(PARTS))]
    return {
        f"waterfall_{row.term}": (row.seconds, row.low, row.high, int(row.seeds))
        for row in rows.itertuples()
        if not pd.isna(row.seconds)
    }


def changes_table(series: pd.DataFrame, studies: list[Study], alpha: float) -> tuple[pd.DataFrame, list[int]]:
    """changes.csv's rows, and each series row's level (1 for the first, +1 after each change)."""
    levels = pd.Series(1, index=series.index)
    rows = []
    for key, values in series.groupby(SERIES, sort=True):
        values = values.sort_values("position")
        additive = key[-1] in ADDITIVE
        for change in change_points.find(values["value"].to_numpy(float), alpha, additive):
            levels[values.index[change.index :]] += 1
            rows.append(change_row(dict(zip(SERIES, key, strict=True)), values, change, studies, alpha))
    return table_frame(CHANGES, rows), levels.tolist()


def change_row(
    key: dict, values: pd.DataFrame, change: change_points.Change, studies: list[Study], alpha: float
) -> dict:
    """One change point's row: its place, size, confidence and what changed with it."""
    after, before = values.iloc[change.index], values.iloc[change.index - 1]
    higher = FIGURES[key["figure"]][2]
    additive = key["figure"] in ADDITIVE
    grew = change.size > 0 if additive else change.size > 1
    worse = grew != higher
    return key | {
        "gpus": int(key["gpus"]),
        "study": after["study"],
        "study_start": after["start"],
        "position": int(after["position"]),
        "studies_before": change.before[1] - change.before[0],
        "studies_after": change.after[1] - change.after[0],
        "mean_before": values["value"].iloc[change.before[0] : change.before[1]].mean(),
        "mean_after": values["value"].iloc[change.after[0] : change.after[1]].mean(),
        "size": change.size,
        "size_lo": change.low,
        "size_hi": change.high,
        "size_as": "after - before" if additive else "after / before",
        "direction": "worse" if worse else "better",
        "p_value": change.p_value,
        "alpha": alpha,
        "provenance_changes": provenance_between(
            key, studies[int(before["position"]) - 1], studies[int(after["position"]) - 1]
        ),
    }


def provenance_between(key: dict, older: Study, newer: Study) -> str:
    """What differs between the cell key's cells of two studies (the comparison's own words), or
    'none recorded'."""
    cells = [baseline.matching(study.runs, {name: key[name] for name in CELL}) for study in (newer, older)]
    return baseline.provenance_differences(*cells, older.absent) or "none recorded"


# the series the gate's reference follows: a change in any of them starts the cell key's new level
GATE_FIGURES = ("efficiency", "images_per_s_per_gpu", "time_to_target_s")


def level_starts(studies: list[Study], alpha: float) -> dict[tuple, int]:
    """For each cell key (cell_key) with a change point in a GATE_FIGURES series of `studies`, the
    index into `studies` of the first study after its last change: its current level (the gate's
    reference); a cell key without one is absent (its level is every study)."""
    series = series_table(studies)
    starts: dict[tuple, int] = {}
    for key, values in series[series["figure"].isin(GATE_FIGURES)].groupby(SERIES, sort=True):
        values = values.sort_values("position")
        found = change_points.find(values["value"].to_numpy(float), alpha)
        if found:
            at = int(values["position"].iloc[found[-1].index]) - 1
            cell = cell_key(dict(zip(SERIES, key, strict=True)))
            starts[cell] = max(starts.get(cell, 0), at)
    return starts


def cell_key(key: dict | tuple) -> tuple:
    """(framework, backend, variant, GPUs) of a series' key or a row's, with GPUs an int."""
    values = [key[name] for name in CELL] if isinstance(key, dict) else list(key)
    return (*values[:3], int(values[3]))


def sentences(found: History) -> str:
    """What the History section says, generated from the numbers: the studies, the series searched,
    the false changes chance alone would give, each change found and what was skipped."""
    studies, series, changes = found.studies, found.series, found.changes
    dated = [study.entry.start for study in studies if study.entry.start]
    place = next((number for number, study in enumerate(studies, start=1) if study.this), None)
    said = [
        f"The history holds {plural(len(studies), 'study', 'studies')}"
        + (f", from {dated[0][:10]} to {dated[-1][:10]}" if dated else "")
        + (f"; this study is number {place}." if place else ".")
    ]
    counts = series.groupby(SERIES).size() if len(series) else pd.Series(dtype=int)
    searchable = counts[counts >= 2 * change_points.MIN_SIDE]
    longest = int(counts.max()) if len(counts) else 0
    side = change_points.smallest_side(longest, found.alpha) if longest else None
    if len(searchable):
        said.append(
            f"{plural(len(searchable), 'series', 'series')} (a figure of a cell key on one site with one setting) of "
            f"{2 * change_points.MIN_SIDE} studies or more were searched for change points, each at a false-alarm "
            f"rate of at most {found.alpha:g}: by chance alone, at most about {len(searchable) * found.alpha:.1f} "
            "false changes are expected among them."
        )
    else:
        said.append(
            f"No series has {2 * change_points.MIN_SIDE} studies yet ({longest or 'none'} in the longest): "
            "none was searched for change points, and the gate compares this study with the others."
        )
    if side:
        said.append(
            f"In the longest series ({longest} studies) a change needs about {side} studies on each side to be found."
        )
    elif len(searchable):
        said.append(
            f"No series is long enough yet for a change to be found at {found.alpha:g} ({longest} studies in the longest)."
        )
    if len(searchable) and changes.empty:
        said.append("No change point was found.")
    for row in changes.itertuples():
        said.append(change_sentence(row))
    said += [f"Not read: {note}." for note in found.notes]
    return " ".join(said)


def change_sentence(row) -> str:
    """One change point in words: where, which figure, its size with its interval, its p-value and
    the provenance that changed with it."""
    label, unit, _ = FIGURES[row.figure]
    variant = f" {row.variant}" if row.variant else ""
    interval = (
        f" (95% interval {row.size_lo:.3g} to {row.size_hi:.3g})" if not math.isnan(row.size_lo) else " (no interval)"
    )
    size = (
        f"a ratio of {row.size:.3f}" if row.size_as == "after / before" else f"a difference of {row.size:+.3g} {unit}"
    )
    return (
        f"{row.framework} {row.backend}{variant} at {plural(int(row.gpus), 'GPU')} on {row.site or 'unrecorded devices'}: "
        f"{label} changed from study {row.position} ({row.study}, {str(row.study_start)[:10]}) on, "
        f"{row.mean_before:.4g} to {row.mean_after:.4g}{' ' + unit if unit else ''}, {size}{interval}, "
        f"{row.direction}, p = {row.p_value:.3f} over {row.studies_before} studies before and {row.studies_after} after; "
        f"what changed with it: {row.provenance_changes}."
    )


def plural(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else many or one + 's'}"
