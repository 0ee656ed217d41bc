"""Seeds until the answer is sure: the rounds of matrix.seeds {initial: K, max: M}.

A round reads the study's cells so far as a runs table (runs.csv's reading: analysis/collect.py),
makes their verdicts (verdicts.py) and takes the comparisons the answer rests on (comparisons.py).
Each one that is still open (verdicts.py's state: neither a difference nor inside the band of
equivalence) gives the configurations on its two sides one more seed each, their next one, unless:

- its kind is not among verdicts.rounds_decide (a study may leave time to target to its first seeds);
- a side's last seed did not end ok (failed, oom, diverged, refused, or no record): the comparison
  stays open with that cell named, and gets no seed (a round never retries what failed, so a broken
  configuration cannot start a round after round);
- its measured scatter says that M seeds a side could not decide it either (`seeds_needed`): it stops
  now, and says how many seeds a side it would take ("time to target: about 40 seeds a side to tell
  5% (matrix.seeds max 5); stopped at 3"), rather than spending rounds that cannot change the answer;
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

import numpy as np
import pandas as pd

from scalebench.analysis.comparisons import answer_rows, sides
from scalebench.analysis.scaling import LEVEL
from scalebench.analysis.tables import table_frame
from scalebench.analysis.verdicts import KINDS, compared_cells, verdicts
from scalebench.cell import OWN_SOURCE, cell_path
from scalebench.config.seeds import Rules
from scalebench.distributions import t_quantile, welch_dof
from scalebench.records.tables import KEYS, ROUNDS

# a comparison across rounds: the same pair whichever side is the faster
PAIR = ["kind", "compared", "framework", "backend", "variant", "gpus"]
KIND_WORDS = {"throughput": "throughput", "time_to_target": "time to target"}
MOST_SEEDS = 1000  # a comparison that needs more seeds a side than this is said to need "more than" it


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


def of_configuration(cells: pd.DataFrame, side: tuple) -> pd.DataFrame:
    """The rows of `cells` of configuration `side` (config/seeds.py configuration)."""
    framework, backend, variant, gpus = side
    return cells[
        (cells["framework"] == framework)
        & (cells["backend"] == backend)
        & (cells["variant"] == variant)
        & (cells["gpus"] == gpus)
    ]


def next_seed(own: pd.DataFrame, side: tuple, rules: Rules, possible: set[tuple] | None) -> NextSeed:
    """The next cell of configuration `side` (config/seeds.py configuration) after the cells of `own`."""
    tried = of_configuration(own, side)
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


def half_width(var_a: float, var_b: float, seeds: int) -> float:
    """The half-width, in log values, of the t-interval verdicts.py makes (Welch's, distributions.welch,
    at scaling.LEVEL) of two sides of `seeds` seeds each whose log values have the sample variances
    `var_a` and `var_b`: t(LEVEL, df) * sqrt(var_a / n + var_b / n), with Welch's degrees of freedom
    df = (n - 1) (var_a + var_b)^2 / (var_a^2 + var_b^2) (distributions.welch_dof: 1 where both are 0)."""
    dof = float(welch_dof(var_a / seeds, var_b / seeds, seeds, seeds))
    return t_quantile(1 - (1 - LEVEL) / 2, dof) * math.sqrt((var_a + var_b) / seeds)


def decidable(var_a: float, var_b: float, difference: float, equivalence: float, seeds: int) -> bool:
    """Whether an interval of `seeds` a side, centred on the measured `difference` of log means (>= 0),
    could state a verdict: "different" where it leaves out 0 (half-width < difference), "equivalent"
    where it lies inside the band (difference + half-width <= log(1 + equivalence)). Holm's correction
    is left out: it only widens the test, so a comparison this calls undecidable is so with it too."""
    width = half_width(var_a, var_b, seeds)
    return width < difference or difference + width <= math.log1p(equivalence)


def seeds_needed(var_a: float, var_b: float, difference: float, equivalence: float) -> int | None:
    """The fewest seeds a side (from 2) at which `decidable`, with the measured variances and
    difference held; None beyond MOST_SEEDS. The half-width only narrows as seeds grow (its variance
    term and its t quantile both fall), so a bisection finds it."""
    if not decidable(var_a, var_b, difference, equivalence, MOST_SEEDS):
        return None
    low, high = 1, MOST_SEEDS  # undecidable at `low` (or below 2), decidable at `high`
    while high - low > 1:
        middle = (low + high) // 2
        if middle >= 2 and decidable(var_a, var_b, difference, equivalence, middle):
            high = middle
        else:
            low = middle
    return high


def side_logs(good: pd.DataFrame, kind: str, side: tuple) -> np.ndarray:
    """The log values of one side's cells (`good`: verdicts.compared_cells) that its verdict of `kind` compares."""
    return np.log(of_configuration(good, side)[KINDS[kind][0]].dropna().to_numpy(float))


@dataclass(frozen=True)
class Scatter:
    """What a comparison's seeds measured: its two sides' seeds and variances of log values, and the
    difference of their log means (the log of the verdict's ratio, >= 0)."""

    seeds: tuple[int, int]
    variances: tuple[float, float]
    difference: float

    def needed(self, equivalence: float) -> int | None:
        return seeds_needed(*self.variances, self.difference, equivalence)


def scatter(good: pd.DataFrame, row: pd.Series) -> Scatter | None:
    """The Scatter of verdict row `row`; None where a side has fewer than two seeds (no spread known)."""
    logs = [side_logs(good, row["kind"], side) for side in sides(row)]
    if min(len(values) for values in logs) < 2:
        return None
    variances = tuple(float(np.var(values, ddof=1)) for values in logs)
    return Scatter((len(logs[0]), len(logs[1])), variances, abs(math.log(row["ratio"])))


def percent_text(fraction: float) -> str:
    """A difference as a percentage with two figures at most ('3.4%', '12%')."""
    value = 100 * fraction
    return f"{value:.0f}%" if value >= 10 else f"{value:.2g}%"


def stop_reason(found: Scatter, kind: str, rules: Rules) -> str | None:
    """Why a comparison stops now: its scatter says `rules.max` seeds a side could not decide it (and how
    many would); None where they could."""
    if decidable(*found.variances, found.difference, rules.equivalence, rules.max):
        return None
    band = math.log1p(rules.equivalence)
    if found.difference >= band - found.difference:  # telling a difference is the nearer verdict
        what = f"to tell {percent_text(math.expm1(found.difference))}"
    else:
        what = f"to show no difference larger than {percent_text(rules.equivalence)}"
    needed = found.needed(rules.equivalence)
    many = f"about {needed}" if needed is not None else f"more than {MOST_SEEDS}"
    seeds = min(found.seeds)
    return f"{KIND_WORDS[kind]}: {many} seeds a side {what} (matrix.seeds max {rules.max}); stopped at {seeds}"


def decide(runs: pd.DataFrame, rules: Rules, number: int, possible: set[tuple] | None = None) -> Round:
    """Round `number` over the cells of `runs` (the module docstring). `possible`: the keys (tables.KEYS)
    of the cells the planner planned; None takes every next seed as possible."""
    own = runs[runs["source"] == OWN_SOURCE]
    good = compared_cells(own)
    table = verdicts(runs, rules.equivalence)
    comparisons = answer_rows(table, runs).copy()
    adds: dict[tuple, dict] = {}
    reasons = []
    for _, row in comparisons.iterrows():
        if row["state"] != "open":
            reasons.append(None)
            continue
        if row["kind"] not in rules.decide:
            reasons.append(f"{KIND_WORDS[row['kind']]}: the rounds add no seeds for it (verdicts.rounds_decide)")
            continue
        found = [next_seed(own, side, rules, possible) for side in sides(row)]
        if any(side.failed for side in found):  # a failure stops it: no seed for either side
            reasons.append("; ".join(side.why for side in found if side.key is None))
            continue
        measured = scatter(good, row)
        stop = stop_reason(measured, row["kind"], rules) if measured is not None else None
        if stop:
            reasons.append(stop)
            continue
        added = [side.key for side in found if side.key is not None]
        if not added:
            reasons.append("; ".join(side.why for side in found))
            continue
        adds.update({tuple(key[name] for name in KEYS): key for key in added})
        reasons.append(None)
    comparisons["open_reason"] = pd.Series(reasons, index=comparisons.index, dtype=object)
    cells = tuple(key_of(row) for _, row in own.iterrows())
    return Round(number, cells, table, comparisons, tuple(adds[key] for key in sorted(adds)))


def expected_adds(runs: pd.DataFrame, rules: Rules, possible: set[tuple]) -> dict[tuple, float]:
    """The chance that a round adds each cell it still could, from the scatter the study's records
    measured so far: for the bill's and the report's expected cost of the rounds, beside their worst
    case (every cell a round could add).

    `runs`: the study's runs table so far (runs.csv's reading); `possible`: the keys (tables.KEYS) of
    every cell the planner planned (config/plan.py possible: the first cells and those a round could
    add). Returns, for each key of `possible` whose seed is above matrix.seeds initial and that `runs`
    holds no record of, a number from 0 to 1 (a cell is added once at most, so its expected number of
    additions is the chance it is added):

    - 1 for every one while a first cell (seed <= initial) has no record: round 1 decides only once they
      all ran, so nothing is measured yet, and the rounds may still go to max (the worst case);
    - else the next round (`decide` on `runs`) is made, and each open comparison it adds seeds to adds,
      on each side, the seeds up to the number its scatter needs (`seeds_needed`: the fewest seeds a side
      whose interval, with the measured variances and difference held, would state a verdict), at most
      `rules.max`, and at least the next one (the round adds it: an interval that would decide
      before Holm's correction may not after it): 1 for those cells. A side of one seed (no spread measured) goes to max. A comparison
      that cannot be decided by max (it stops now), is decided, failed or outside the answer adds
      nothing: 0. A cell on the sides of several comparisons takes the largest of their chances.

    A point estimate: the scatter of a few seeds is itself uncertain, so the rounds may stop earlier or
    later than it says; their worst case stays the bound."""
    own = runs[runs["source"] == OWN_SOURCE]
    recorded = {tuple(row[name] for name in KEYS) for _, row in own.iterrows() if row["status"] != "missing"}
    chances = {key: 0.0 for key in possible if key[-1] > rules.initial and key not in recorded}
    first = {key for key in possible if key[-1] <= rules.initial}
    if not first <= recorded:
        return dict.fromkeys(chances, 1.0)
    good = compared_cells(own)
    found = decide(runs, rules, 0, possible)
    adding = found.comparisons[(found.comparisons["state"] == "open") & found.comparisons["open_reason"].isna()]
    for _, row in adding.iterrows():
        measured = scatter(good, row)
        needed = measured.needed(rules.equivalence) if measured is not None else None
        most = min(needed, rules.max) if needed is not None else rules.max
        for side in sides(row):
            tried = of_configuration(own, side)
            last = int(tried["seed"].max())
            for seed in range(last + 1, last + 1 + max(most - len(tried), 1)):
                key = (*side, seed)
                if key in chances:
                    chances[key] = 1.0
    return chances


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
    """results/summary/rounds.csv: one row per round (records/tables.py: ROUNDS)."""
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
    return table_frame(ROUNDS, rows)
