"""The bill against what each cell cost (results/summary/cost.csv, the report's cost table): the bill
back-tested on every study.

Each cell's prediction is the one its run started with (results/plan/submitted.csv: planning keeps
it as a run that trains starts the cell, config/bill.py), never one made afterwards from its own
records. It is set against what the cell cost, the figure the bill predicts: its GPUs times its
job's wall (runs.csv's job_s and gpu_hours: SLURM's elapsed, or launch.py's own process from before
the framework's imports to the ranks' end). A cell without it (recorded before job_s, or resumed
after an attempt that left none) has no measured figure, empty with the reason, never 0. The error
is predicted / measured - 1; the formula's rows are an upper bound, not a prediction, and are kept
out of the error's median and worst.
"""

from __future__ import annotations

import math

import pandas as pd

from scalebench.cell import OWN_SOURCE
from scalebench.config.bill import ROUND
from scalebench.records.tables import COST, KEYS, SUBMITTED

FORMULA = "formula"  # config/prediction.py's source of the cluster.time formula
# what cost.csv takes from submitted.csv: the bill's source (as predicted_from) and the columns it copies
PREDICTION = [*KEYS, "source", *COST.copied()]


def read_submitted(path: str | None) -> pd.DataFrame:
    """results/plan/submitted.csv (empty where the study kept none: a version before the bill, or dry runs only)."""
    if path is None:
        return pd.DataFrame(columns=SUBMITTED.names)
    frame = pd.read_csv(path, dtype=SUBMITTED.text())
    frame["variant"] = frame["variant"].fillna("")
    return frame


def cost(runs: pd.DataFrame, submitted: pd.DataFrame) -> pd.DataFrame:
    """Per cell of this study that ended (any status), its prediction as it started and what it took."""
    own = runs[(runs["source"] == OWN_SOURCE) & (runs["status"] != "missing")].copy()
    own["variant"] = own["variant"].fillna("").astype(str)
    for key in ("gpus", "seed"):
        own[key] = own[key].astype(int)
        submitted[key] = submitted[key].astype(int)
    kept = submitted[PREDICTION]
    kept = kept.rename(columns={"source": "predicted_from"})
    table = own.merge(kept, on=KEYS, how="left")
    gpus = table["gpus"].astype(float)
    table["predicted_gpu_hours"] = gpus * table["predicted_s"] / 3600
    wall = pd.to_numeric(table["job_s"])
    table["gpu_hours"] = gpus * wall / 3600  # runs.csv's gpu_hours
    table["error"] = table["predicted_s"] / wall - 1  # NaN where either is unknown
    run, low, high = wall, table["low_s"], table["high_s"]
    known = low.notna() & high.notna() & run.notna()
    table["within_interval"] = pd.Series(pd.NA, index=table.index, dtype="boolean")
    table.loc[known, "within_interval"] = (low[known] <= run[known]) & (run[known] <= high[known])
    table["reason"] = [reason(row) for _, row in table.iterrows()]
    return table[COST.names].reset_index(drop=True)


def reason(row: pd.Series) -> str | None:
    parts = []
    if pd.isna(row["predicted_from"]):
        parts.append("no prediction kept (started by a version before the bill, or by a dry run only)")
    if pd.isna(row["job_s"]):
        why = row["job_s_reason"] if "job_s_reason" in row and pd.notna(row["job_s_reason"]) else ""
        parts.append(f"no measured job wall ({why})" if why else "no measured job wall")
    return "; ".join(parts) or None


def summary(table: pd.DataFrame) -> dict:
    """The study's total and the per-cell error of the predictions made from measured cells."""
    both = table[table["predicted_gpu_hours"].notna() & table["gpu_hours"].notna()]
    measured = both[both["predicted_from"] != FORMULA]
    formula = both["predicted_from"] == FORMULA
    errors = measured["error"].abs()
    worst = measured.loc[errors.idxmax(), "error"] if len(measured) else math.nan
    return {
        "cells": len(both),
        "predicted_gpu_hours": float(both["predicted_gpu_hours"].sum()),
        "gpu_hours": float(both["gpu_hours"].sum()),
        "measured_cells": len(measured),
        "median_error": float(measured["error"].median()) if len(measured) else math.nan,
        "worst_error": float(worst),
        "within_interval": int(measured["within_interval"].fillna(False).sum()),
        "with_interval": int(measured["within_interval"].notna().sum()),
        "formula_cells": int(formula.sum()),
        "formula_ratio": float(both.loc[formula, "predicted_gpu_hours"].sum() / both.loc[formula, "gpu_hours"].sum())
        if formula.any()
        else math.nan,
    }


def sentence(found: dict) -> str:
    """The cost table's note, generated from its numbers."""
    if not found["cells"]:
        return "No cell that ended has a prediction kept from when it started: nothing to set the bill against."
    text = (
        f"The {cells(found['cells'])} with a prediction kept from when they started were billed "
        f"{found['predicted_gpu_hours']:.3g} GPU-hours and took {found['gpu_hours']:.3g}."
    )
    if found["measured_cells"]:
        text += (
            f" The {cells(found['measured_cells'])} predicted from measured cells: median error "
            f"{found['median_error']:+.0%}, worst {found['worst_error']:+.0%}"
        )
        if found["with_interval"]:
            text += f"; {found['within_interval']} of the {found['with_interval']} with an interval ran inside it"
        text += "."
    if found["formula_cells"]:
        text += (
            f" The cluster.time formula, an upper bound rather than a prediction, billed {cells(found['formula_cells'])} "
            f"{found['formula_ratio']:.3g} times what they took."
        )
    return text


def rounds_summary(submitted: pd.DataFrame, table: pd.DataFrame) -> dict | None:
    """What the bill said the rounds of matrix.seeds {initial, max} could cost (their worst case, every
    cell a round could add) and were expected to (each cell's chance from the first seeds' scatter,
    where the start that billed them had it), beside what the cells the rounds added took. None
    where the bill priced no round (a list of seeds, or a submitted.csv from before the rounds)."""
    if "state" not in submitted.columns or not (submitted["state"] == ROUND).any():
        return None
    rounds = submitted[submitted["state"] == ROUND]
    hours = pd.to_numeric(rounds["gpu_hours"])
    chance = pd.to_numeric(rounds["round_chance"]) if "round_chance" in rounds.columns else pd.Series(math.nan)
    billed = {tuple(str(row[key]) for key in KEYS) for _, row in rounds.iterrows()}
    added = table[[tuple(str(row[key]) for key in KEYS) in billed for _, row in table.iterrows()]]
    took = pd.to_numeric(added["gpu_hours"])
    return {
        "cells": len(rounds),
        "worst_gpu_hours": float(hours.sum()),
        "expected_gpu_hours": float((hours * chance).sum()) if chance.notna().all() else math.nan,
        "expected_cells": int((chance > 0).sum()) if chance.notna().all() else None,
        "added_cells": len(added),
        "took_gpu_hours": float(took.sum()) if took.notna().all() else math.nan,
    }


def rounds_sentence(found: dict | None) -> str:
    """The rounds' bill against what they took, generated from `rounds_summary`'s numbers ('' without rounds)."""
    if found is None:
        return ""
    expected = (
        f"expected at {found['expected_gpu_hours']:.3g} ({cells(found['expected_cells'])}, from the first seeds' scatter)"
        if math.isfinite(found["expected_gpu_hours"])
        else "with no expected cost (the start that billed them had not measured the first seeds' scatter)"
    )
    took = (
        f"{found['took_gpu_hours']:.3g} GPU-hours" if math.isfinite(found["took_gpu_hours"]) else "GPU-hours not known"
    )
    return (
        f" The rounds were billed at {found['worst_gpu_hours']:.3g} GPU-hours at worst ({cells(found['cells'])}), "
        f"{expected}; they added {cells(found['added_cells'])}, which took {took}."
    )


def cells(count: int) -> str:
    return f"{count} cell" + ("" if count == 1 else "s")
