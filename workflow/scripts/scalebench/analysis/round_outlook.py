"""The rounds' expected cost, for the bill: the chance that a round adds each cell it could, from the
scatter the study's finished first seeds measured (rounds.py `expected_adds` says how). The planner
(config/bill.py) gets it from the rules (rules/common.smk), as config/ may not import the analysis.

The bill prices the rounds twice: their worst case (every open comparison to matrix.seeds' max: every
cell a round could add) and their expected cost (each such cell's GPU-hours times its chance). Until
every first cell (seeds 1 to initial) has a record, nothing is measured to expect from: the chances are
unknown, and the bill says so beside the worst case.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scalebench.analysis.collect import collect
from scalebench.analysis.rounds import expected_adds
from scalebench.cell import RUNS_ROOT, Cell
from scalebench.config.cell_settings import train_settings
from scalebench.config.seeds import Rules
from scalebench.data.keys import prepared_key
from scalebench.records.tables import KEYS

UNMEASURED = "the first seeds have not all finished: no scatter measured to expect from"


def chances(
    config: dict, first: Iterable[Cell], rounds: Iterable[Cell], finished: set[Cell]
) -> Mapping[Cell, float] | str:
    """Each cell of `rounds` not yet finished with the chance a round adds it, or why none is known
    (`finished`: the cells whose records are complete, as the bill found them)."""
    first, rounds = list(first), list(rounds)
    rules = Rules.of(config)
    if rules is None or not rounds:
        return {}
    if any(cell not in finished for cell in first):
        return UNMEASURED
    read = [cell for cell in (*first, *rounds) if cell in finished]
    entries = [{**cell.key(), "settings": train_settings(config, cell)} for cell in read]
    runs, _ = collect(RUNS_ROOT, entries, config["training"]["target_iou"], prepared_key(config["dataset"]))
    keyed = {tuple(cell.key()[name] for name in KEYS): cell for cell in (*first, *rounds)}
    found = expected_adds(runs, rules, set(keyed))
    return {keyed[key]: chance for key, chance in found.items() if keyed[key] in rounds}
