"""The gate (`snakemake gate`): this study against the history of studies, one verdict per key figure
(results/summary/gate.json), for a site's CI to run after every upgrade.

The reference is the history's current level of each cell key (framework, backend, variant, GPUs):
the studies of the history (history.path; analysis/history.py) that are not this one and ran on the
same devices (entry.json's provenance: a study of other GPUs is another site, never compared), from
the last change point of the cell key's series on (analysis/history_changes.py, at
history.change_alpha), or all of them where no change was found. Their cells are pooled and compared
with this study's as `compare.baseline` compares two studies (analysis/baseline.py: the same code),
on three figures: images/s, the parallel efficiency of the total training time (not at a series'
base GPU count, where it is 1 by definition) and the time to the target IOU, each a ratio this study
/ the reference with its 95% interval from both sides' seeds. A level after a change point is not
mixed with the one before it: an upgrade that made a backend slower months ago is the reference of
this study, not the time before it.

A figure's verdict, with `threshold` (history.gate_threshold, a fraction) the band of no change:
- ``regressed``: the interval lies wholly on the worse side of 1 (slower, less efficient, longer to
  target); ``improved`` the better side;
- ``unchanged``: the interval lies within the band (1 / (1 + threshold) to 1 + threshold);
- ``insufficient data``: neither, or nothing to compare (no reference, the cell in one study only,
  other settings (config hash), one seed on a side, no cell reached the target), with the reason.

The gate fails (``passed`` false; the `gate` target then exits non-zero) where a figure regressed
beyond the band with confidence: its whole interval lies beyond 1 / (1 + threshold) on the worse
side. A regression the interval cannot place beyond the band is reported, and passes.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from scalebench.analysis import baseline, history, history_changes

# figure (baseline.py's MEASURES) -> whether a ratio above 1 is better
HIGHER_IS_BETTER = {"images_per_s": True, "efficiency": True, "time_to_target": False}
REGRESSED, IMPROVED, UNCHANGED, INSUFFICIENT = "regressed", "improved", "unchanged", "insufficient data"


def same_site(entries: list[history.Entry], study_id: str, devices: list[str]) -> list[history.Entry]:
    """The entries that are not this study and ran on the same devices, oldest first."""
    return [e for e in entries if e.study_id != study_id and e.provenance.get("devices", []) == devices]


def verdict(ratio: float, low: float, high: float, higher_is_better: bool, threshold: float) -> tuple[str, bool]:
    """The figure's verdict and whether it fails the gate (module docstring), from this / reference."""
    if any(math.isnan(value) for value in (ratio, low, high)):
        return INSUFFICIENT, False
    # as 'better' ratios: above 1 is better whatever the figure
    better_low, better_high = (low, high) if higher_is_better else (1 / high, 1 / low)
    if better_high < 1:
        return REGRESSED, better_high < 1 / (1 + threshold)
    if better_low > 1:
        return IMPROVED, False
    if better_low >= 1 / (1 + threshold) and better_high <= 1 + threshold:
        return UNCHANGED, False
    return INSUFFICIENT, False


def why_insufficient(row: pd.Series, figure: str) -> str:
    """Why a figure of a compared cell key has no other verdict."""
    if row["present"] != "both":
        return f"the cell is in {row['present']}"
    if math.isnan(row[f"{figure}_ratio"]):
        return row["note"] or "no value in one of the studies"
    if math.isnan(row[f"{figure}_ratio_lo"]):
        return "one seed on a side: no interval"
    return "the interval reaches past the band of no change on either side: more seeds would tell"


def figures(compared: pd.DataFrame, settings_differ: set[tuple], threshold: float) -> list[dict]:
    """One verdict per cell key and figure of baseline.compare's table."""
    rows = []
    for _, row in compared.iterrows():
        key = {name: row[name] for name in baseline.CELL}
        key["gpus"] = int(key["gpus"])
        for figure, higher in HIGHER_IS_BETTER.items():
            if figure == "efficiency" and at_base(row):  # 1 by definition at the series' base count
                continue
            ratio, low, high = (
                float(row.get(f"{figure}_{part}", math.nan)) for part in ("ratio", "ratio_lo", "ratio_hi")
            )
            found, fails = verdict(ratio, low, high, higher, threshold)
            reason = ""
            if tuple(key.values()) in settings_differ:  # other settings: never compared
                found, fails, reason = INSUFFICIENT, False, "the cell ran with other settings (config hash)"
            elif found == INSUFFICIENT:
                reason = why_insufficient(row, figure)
            rows.append(
                key
                | {
                    "figure": figure,
                    "verdict": found,
                    "fails": fails,
                    "ratio": None if math.isnan(ratio) else ratio,
                    "low": None if math.isnan(low) else low,
                    "high": None if math.isnan(high) else high,
                    "reason": reason,
                }
            )
    return rows


def at_base(row: pd.Series) -> bool:
    """Whether both studies' efficiency of this cell key is 1 without an interval: its series' base GPU count."""
    values = [row.get(f"efficiency_{side}", math.nan) for side in ("here", "baseline")]
    return all(value == 1 for value in values) and math.isnan(float(row.get("efficiency_ratio_lo", math.nan)))


def other_settings(here: pd.DataFrame, there: pd.DataFrame) -> set[tuple]:
    """The cell keys whose cells ran with other settings (config hash) in the two studies."""
    hashes = [
        frame.groupby(baseline.CELL)["config_hash"].agg(lambda values: frozenset(values.dropna()))
        for frame in (baseline.own(here), baseline.own(there))
        if "config_hash" in frame
    ]
    if len(hashes) < 2:
        return set()
    shared = hashes[0].index.intersection(hashes[1].index)
    return {tuple(key) for key in shared if hashes[0][key] and hashes[1][key] and hashes[0][key] != hashes[1][key]}


def judge(runs_csv: Path, history_folder: Path, threshold: float, alpha: float = 0.01) -> dict:
    """gate.json's content: this study (its runs.csv) against the history (module docstring)."""
    table = Path(runs_csv).read_bytes()
    study_id, devices = history.id_of(table), history.provenance_of(table)["devices"]
    here, _ = baseline.read_baseline(runs_csv)
    entries, skipped = history.read(history_folder)
    said = {
        "study": study_id,
        "history": str(history_folder),
        "threshold": threshold,
        "skipped": [f"{entry.folder}: {entry.reason}" for entry in skipped],
    }
    candidates = same_site(entries, study_id, devices)
    studies = [study for entry in candidates if (study := history_changes.read_study(entry, False)[0]) is not None]
    if not studies:
        reason = f"no earlier study of the history ran on the same devices ({', '.join(devices) or 'none recorded'})"
        return said | {"reference": None, "figures": [], "passed": True, "regressed_beyond_band": [], "note": reason}
    levels = history_changes.level_starts(studies, alpha)
    rows = []
    for start in sorted(set(levels.values()) | {0}):
        level = studies[start:]
        pooled = pd.concat([study.runs for study in level], ignore_index=True)
        absent = sorted({column for study in level for column in study.absent})
        compared = baseline.compare(here, pooled, absent)
        keys = [tuple(key) for key in compared[baseline.CELL].itertuples(index=False)]
        mine = compared[[levels.get(history_changes.cell_key(key), 0) == start for key in keys]]
        for row in figures(mine, other_settings(here, pooled), threshold):
            rows.append(row | {"studies": [study.entry.study_id for study in level] + [study_id]})
    failing = [f"{row['figure']} of {cell_name(row)}" for row in rows if row["fails"]]
    newest = studies[-1]
    return said | {
        "reference": {
            "study": newest.entry.study_id,
            "start": newest.entry.start,
            "added": newest.entry.added,
            "studies": [study.entry.study_id for study in studies],
            "after_change": sorted(
                {cell_name(dict(zip(baseline.CELL, key))) for key, start in levels.items() if start}
            ),
        },
        "provenance_differences": baseline.study_differences(here, newest.runs, newest.absent),
        "figures": rows,
        "passed": not failing,
        "regressed_beyond_band": failing,
        "note": "",
    }


def cell_name(row: dict) -> str:
    """'torch/native (variant) at 2 GPUs'."""
    variant = f" ({row['variant']})" if row["variant"] else ""
    return f"{row['framework']}/{row['backend']}{variant} at {row['gpus']} GPU{'s' if row['gpus'] != 1 else ''}"


def summary(judged: dict) -> str:
    """gate.json in one line: passed or failed, against which study, and what regressed."""
    if judged["reference"] is None:
        return f"gate: passed, with nothing to compare: {judged['note']}"
    counts = {}
    for row in judged["figures"]:
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    tally = ", ".join(f"{count} {name}" for name, count in sorted(counts.items()))
    studies = len(judged["reference"]["studies"])
    newest = judged["reference"]["study"]
    against = f"against {studies} stud{'y' if studies == 1 else 'ies'} of the history, the newest {newest}"
    against += f" ({tally}; band {100 * judged['threshold']:g}%)"
    if judged["passed"]:
        return f"gate: passed {against}"
    return f"gate: FAILED {against}: regressed beyond the band: {'; '.join(judged['regressed_beyond_band'])}"
