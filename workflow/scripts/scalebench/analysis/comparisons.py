"""The comparisons the study's answer rests on: the ones answer.json states and the rounds of
matrix.seeds {initial, max} decide (rounds.py), chosen in one place.

Among the study's own cells (imported studies answer nothing here):
- per framework at its largest GPU count, the best backend (the highest steady throughput by its
  geometric mean over seeds) against each other backend of its variant, on throughput and, where
  every seed of both reached the target, on time to target;
- the frameworks on each backend, at the largest GPU count two frameworks share, in the best
  variant of a framework.

Where they are (the GPU counts) is config/seeds.py's answer_scope, which round_configurations reads
from the plan: the rounds only ever add cells the planner planned. The counts are the study's (its
cells of any status), as the plan's are.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from scalebench.analysis.verdicts import compared_cells
from scalebench.cell import OWN_SOURCE
from scalebench.config.seeds import ANSWER_KINDS, answer_scope, configuration

SIDE_KEYS = ("framework", "backend", "variant", "gpus")


def best_series(cells: pd.DataFrame) -> pd.Series:
    """The (backend, variant) with the highest steady throughput among `cells` (one GPU count), ranked by
    the geometric mean over seeds as the verdicts rank them; its arithmetic mean is what it reports."""
    means = cells.assign(log=np.log(cells["images_per_s"])).groupby(["backend", "variant"], as_index=False)
    means = means.agg(images_per_s=("images_per_s", "mean"), log=("log", "mean"), seeds=("images_per_s", "size"))
    return means.sort_values(["log", "backend"], ascending=[False, True], kind="stable").iloc[0]


def sides(row: pd.Series) -> list[tuple[str, str, str, int]]:
    """The two configurations (config/seeds.py configuration) a verdict row compares."""
    if row["compared"] == "backends":
        return [configuration(row["framework"], side, row["variant"], row["gpus"]) for side in (row["a"], row["b"])]
    return [configuration(side, row["backend"], row["variant"], row["gpus"]) for side in (row["a"], row["b"])]


def answer_rows(table: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The rows of verdicts.csv (`table`) the answer rests on (the module docstring), from `runs`."""
    own = runs[runs["source"] == OWN_SOURCE]
    scope = answer_scope(configuration(*key) for key in own[list(SIDE_KEYS)].itertuples(index=False))
    good = compared_cells(own)
    good = good[good["speed"] == "throughput"]
    mine = table[(table["source"] == OWN_SOURCE) & table["kind"].isin(ANSWER_KINDS)]
    chosen = pd.Series(False, index=mine.index)
    best_variants = set()
    for framework, gpus in scope.framework_gpus.items():
        at = good[(good["framework"] == framework) & (good["gpus"] == gpus)]
        if at.empty:
            continue
        best = best_series(at)
        best_variants.add(best["variant"])
        chosen |= (
            (mine["compared"] == "backends")
            & (mine["framework"] == framework)
            & (mine["variant"] == best["variant"])
            & (mine["gpus"] == gpus)
            & ((mine["a"] == best["backend"]) | (mine["b"] == best["backend"]))
        )
    for backend, gpus in scope.backend_gpus.items():
        chosen |= (
            (mine["compared"] == "frameworks")
            & (mine["backend"] == backend)
            & (mine["gpus"] == gpus)
            & mine["variant"].isin(best_variants)
        )
    return mine[chosen]
