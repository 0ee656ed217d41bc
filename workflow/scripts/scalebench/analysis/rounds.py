"""Seeds until the answer is sure: the rounds of matrix.seeds {initial: K, max: M}.

A round reads the study's cells so far as a runs table (runs.csv's reading: analysis/collect.py),
makes their verdicts (verdicts.py) and takes the comparisons the answer rests on (comparisons.py).
Each one that is still open (verdicts.py's state: neither a difference nor inside the band of
equivalence) gives the configurations on its two sides one more seed each, their next one, unless:

- a side's last seed did not end ok (failed, oom, diverged, refused, or no record): the comparison
  stays open with that cell named, and gets no seed (a round never retries what failed, so a broken
  configuration cannot start a round after round);
- a side has M seeds already: it gets none (the other side still may);
- the next seed is no cell the planner planned (`possible`: config/seeds.py round_cells, less what
  the machine or SLURM leaves out): named, none added.

A round that adds nothing is the last. Every round is a pure function of the cells it read, so the
whole sequence is too: `replay` runs it again from a runs table (the collection keeps exactly the
cells the rounds added; the answer says which round decided each comparison, at how many seeds, and
what the rounds cost), and the workflow's checkpoint jobs (rules/rounds.smk) run it one round at a
time, each reading the file the round before wrote.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pandas as pd

from scalebench.analysis.comparisons import answer_rows, sides
from scalebench.analysis.tables import KEYS, ROUNDS
from scalebench.analysis.verdicts import verdicts
from scalebench.cell import OWN_SOURCE, cell_path

# a comparison across rounds: the same pair whichever side is the faster
PAIR = ["kind", "compared", "framework", "backend", "variant", "gpus"]


@dataclass(frozen=True)
class Rules:
    """What the rounds decide by: matrix.seeds {initial, max} and verdicts.equivalence."""

    initial: int
    max: int
    equivalence: float

    @classmethod
    def of(cls, config: dict) -> Rules | None:
        """The rules of a validated config; None for a list of seeds (no rounds)."""
        seeds = config["matrix"]["seeds"]
        if not isinstance(seeds, dict):
            return None
        return cls(int(seeds["initial"]), int(seeds["max"]), float(config["verdicts"]["equivalence"]))


@dataclass(frozen=True)
class Round:
    """One round: the keys of the cells it read, every verdict of them, the comparisons the answer rests
    on (verdict rows with ``open_reason``), and the keys of the cells it adds."""

    number: int
    cells: tuple[dict, ...]
    table: pd.DataFrame
    comparisons: pd.DataFrame
    adds: tuple[dict, ...]

    @property
    def stopped(self) -> str:
        """Why this round adds nothing ('' where it adds)."""
        if self.adds:
            return ""
        open_rows = self.comparisons[self.comparisons["state"] == "open"]
        if self.comparisons.empty:
            return "no comparison the answer rests on could be made"
        if open_rows.empty:
            return "every comparison the answer rests on is decided"
        reasons = [part for reason in open_rows["open_reason"].dropna() for part in reason.split("; ")]
        return "open, and no seed can be added: " + "; ".join(dict.fromkeys(reasons))

    def to_json(self) -> dict:
        """The round's file (config/seeds.py read_round reads its cells and adds)."""
        shown = ["kind", "compared", "framework", "backend", "variant", "gpus", "a", "b", "seeds_a", "seeds_b"]
        shown += ["ratio", "low", "high", "p_holm", "state", "verdict", "open_reason"]
        return {
            "round": self.number,
            "cells": list(self.cells),
            "adds": list(self.adds),
            "stopped": self.stopped,
            "comparisons": json.loads(self.comparisons[shown].to_json(orient="records")),  # NaN: null
        }


def key_of(row) -> dict:
    return {"framework": row["framework"], "backend": row["backend"], "variant": row["variant"] or ""} | {
        "gpus": int(row["gpus"]),
        "seed": int(row["seed"]),
    }


def label(framework: str, backend: str, variant: str, gpus: int, seed: int | None = None) -> str:
    """'torch/native/g2/s3', or 'torch/native/g2' for a configuration."""
    path = cell_path(framework, backend, variant, gpus, seed if seed is not None else 0)
    return path if seed is not None else path.rsplit("/", 1)[0]


@dataclass(frozen=True)
class NextSeed:
    """A configuration's next cell (its keys), or None with why it gets none (`failed`: its last seed
    did not end ok, which stops its comparison)."""

    key: dict | None
    why: str = ""
    failed: bool = False


def next_seed(own: pd.DataFrame, side: tuple, rules: Rules, possible: set[tuple] | None) -> NextSeed:
    """The next cell of configuration `side` (config/seeds.py configuration) after the cells of `own`."""
    framework, backend, variant, gpus = side
    tried = own[
        (own["framework"] == framework)
        & (own["backend"] == backend)
        & (own["variant"] == variant)
        & (own["gpus"] == gpus)
    ]
    if tried.empty:
        return NextSeed(None, f"{label(*side)} has no cell", failed=True)
    last = tried.loc[tried["seed"].idxmax()]
    if last["status"] != "ok":
        why = f": {last['reason']}" if last["reason"] else ""
        return NextSeed(None, f"{label(*side, int(last['seed']))} ended {last['status']}{why}", failed=True)
    if len(tried) >= rules.max:
        return NextSeed(None, f"{label(*side)} ran {len(tried)} seeds (matrix.seeds max {rules.max})")
    key = key_of(last) | {"seed": int(last["seed"]) + 1}
    if possible is not None and tuple(key[name] for name in KEYS) not in possible:
        return NextSeed(None, f"{label(**key)} is not a cell this study can run")
    return NextSeed(key)


def decide(runs: pd.DataFrame, rules: Rules, number: int, possible: set[tuple] | None = None) -> Round:
    """Round `number` over the cells of `runs` (the module docstring). `possible`: the keys (tables.KEYS)
    of the cells the planner planned; None takes every next seed as possible."""
    own = runs[runs["source"] == OWN_SOURCE]
    table = verdicts(runs, rules.equivalence)
    comparisons = answer_rows(table, runs).copy()
    adds: dict[tuple, dict] = {}
    reasons = []
    for _, row in comparisons.iterrows():
        if row["state"] != "open":
            reasons.append(None)
            continue
        found = [next_seed(own, side, rules, possible) for side in sides(row)]
        added = [side.key for side in found if side.key is not None]
        if any(side.failed for side in found) or not added:  # a failure stops it: no seed for either side
            reasons.append("; ".join(side.why for side in found if side.key is None))
            continue
        adds.update({tuple(key[name] for name in KEYS): key for key in added})
        reasons.append(None)
    comparisons["open_reason"] = pd.Series(reasons, index=comparisons.index, dtype=object)
    cells = tuple(key_of(row) for _, row in own.iterrows())
    return Round(number, cells, table, comparisons, tuple(adds[key] for key in sorted(adds)))


def missing_row(key: dict) -> dict:
    return {"source": OWN_SOURCE, **key, "status": "missing", "reason": "no record (the cell did not run)"}


def replay(runs: pd.DataFrame, rules: Rules, possible: set[tuple] | None = None) -> list[Round]:
    """Every round again, from a runs table holding at least the cells they read: round 1 reads the
    study's cells of seeds 1 to K (and the other sources' rows), each next one those and the cells the
    round before added (a cell `runs` lacks reads as missing)."""
    own = runs["source"] == OWN_SOURCE
    table = runs[~own | runs["seed"].between(1, rules.initial)]
    rounds: list[Round] = []
    while True:
        found = decide(table, rules, len(rounds) + 1, possible)
        rounds.append(found)
        if not found.adds:
            return rounds
        added = pd.DataFrame([found_row(runs, key) for key in found.adds])
        table = pd.concat([table, added], ignore_index=True)


def found_row(runs: pd.DataFrame, key: dict) -> dict:
    """The runs row of the cell `key`, or a missing one."""
    mask = runs["source"] == OWN_SOURCE
    for name in KEYS:
        mask &= runs[name] == key[name]
    return runs[mask].iloc[0].to_dict() if mask.any() else missing_row(key)


def study_keys(rounds: list[Round]) -> set[tuple]:
    """The keys (tables.KEYS) of every cell the rounds read: the study's cells."""
    last = rounds[-1]
    return {tuple(key[name] for name in KEYS) for key in last.cells}


DECIDED = ("different", "equivalent")


def pair_key(row: pd.Series) -> tuple:
    return (*(row[name] for name in PAIR), frozenset((row["a"], row["b"])))


def decided_since(history: list[tuple[int, str, int]]) -> tuple[int, int] | None:
    """(round, seeds) from which a comparison stayed decided, of its (round, state, seeds) history."""
    since = None
    for number, state, seeds in history:
        since = (since or (number, seeds)) if state in DECIDED else None
    return since


def annotate(table: pd.DataFrame, rounds: list[Round]) -> pd.DataFrame:
    """verdicts.csv's rounds columns: for each comparison the answer rests on, the round from which it
    stayed decided and its seeds then (the smaller side's), or why it is still open after the last."""
    table = table.copy()
    history: dict[tuple, list[tuple[int, str, int]]] = {}
    for found in rounds:
        for _, row in found.comparisons.iterrows():
            history.setdefault(pair_key(row), []).append((found.number, row["state"], int(row["seeds"])))
    last = {pair_key(row): row["open_reason"] for _, row in rounds[-1].comparisons.iterrows()}
    for index, row in table.iterrows():
        key = pair_key(row)
        if key not in last:
            continue
        since = decided_since(history[key])
        if row["state"] in DECIDED and since is not None:
            table.at[index, "round"], table.at[index, "decided_seeds"] = since
        elif row["state"] == "open":
            table.at[index, "open_reason"] = last[key]
    return table


def round_table(rounds: list[Round], runs: pd.DataFrame) -> pd.DataFrame:
    """results/summary/rounds.csv: one row per round (analysis/tables.py: ROUNDS)."""
    rows = []
    for found in rounds:
        states = found.comparisons["state"]
        hours = [found_row(runs, key).get("gpu_hours") for key in found.adds]
        known = [float(value) for value in hours if value is not None and pd.notna(value)]
        cost = sum(known) if len(known) == len(hours) else math.nan  # a cell without a record: unknown
        rows.append(
            {
                "round": found.number,
                "cells": len(found.cells),
                "open": int((states == "open").sum()),
                "decided": int(states.isin(["different", "equivalent"]).sum()),
                "added": len(found.adds),
                "added_cells": " ".join(label(**key) for key in found.adds),
                "added_gpu_hours": cost,
                "stopped": found.stopped,
            }
        )
    return pd.DataFrame(rows, columns=ROUNDS.names)
