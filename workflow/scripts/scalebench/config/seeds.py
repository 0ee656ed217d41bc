"""matrix.seeds in its two forms, and the files of the rounds that add seeds.

- A list (``[1, 2, 3]``): those seeds of every cell, and nothing more.
- ``{initial: K, max: M}``: seeds 1 to K of every cell, then rounds. Each round reads the study's
  cells so far and adds one seed (each cell's next) to exactly the cells of the comparisons the
  answer rests on that are still open, until each is decided or its cells have M seeds
  (analysis/rounds.py decides; rules/rounds.smk runs each round as a Snakemake checkpoint that
  writes ``results/plan/rounds/round-<r>.json``).

The planner plans every cell a round could add (`possible_cells`: each one's settings.json is
written at the start, as the first seeds' are, so a round's train jobs only read), and the bill
prices the worst case, every open comparison to M (`round_cells`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from scalebench.cell import Cell

ROUNDS_FOLDER = "results/plan/rounds"
# What the rounds decide by (the seeds' form, the band of equivalence) and which cells start them: a
# round file older than it is decided again (config/planning.py writes it, only when it changes).
ROUNDS_STAMP = f"{ROUNDS_FOLDER}/rules.json"
ROUND_KEYS = ("framework", "backend", "variant", "gpus", "seed")


@dataclass(frozen=True)
class SeedRule:
    """matrix.seeds read: the seeds every cell starts with and, for the mapping, the most a cell gets."""

    initial: tuple[int, ...]  # sorted
    max: int | None = None  # None: a list, no rounds
    listed: tuple[int, ...] = ()  # a list's seeds in its order (order.blocks runs them so)

    @property
    def adaptive(self) -> bool:
        return self.max is not None

    @property
    def blocks(self) -> list[int]:
        """The seeds in the order of order.blocks: the list as given, or 1 to M (a round's seeds last)."""
        return list(range(1, self.max + 1)) if self.max is not None else list(self.listed or self.initial)


def seed_rule(config: dict) -> SeedRule:
    """matrix.seeds of a validated config."""
    seeds = config["matrix"]["seeds"]
    if isinstance(seeds, dict):
        return SeedRule(tuple(range(1, int(seeds["initial"]) + 1)), int(seeds["max"]))
    return SeedRule(tuple(sorted(int(seed) for seed in seeds)), None, tuple(int(seed) for seed in seeds))


def seeds_problems(config: dict) -> list[str]:
    """matrix.seeds' values the schema admits but a study cannot use: a float (its integer check
    admits 2.0, which would name a folder s2.0), a mapping whose max is below its initial."""
    seeds = config["matrix"]["seeds"]
    values = list(seeds.values()) if isinstance(seeds, dict) else seeds
    floats = [value for value in values if not isinstance(value, int)]
    if floats:
        named = ", ".join(map(repr, floats))
        what = "is not a whole number" if len(floats) == 1 else "are not whole numbers"
        return [f"config key 'matrix.seeds': {named} {what} (a seed names its cell's folder, s<seed>)"]
    if isinstance(seeds, dict) and seeds["max"] < seeds["initial"]:
        return [
            f"config key 'matrix.seeds': max {seeds['max']} is below initial {seeds['initial']}; "
            "max is the most seeds a cell gets (initial, then one a round)"
        ]
    return []


def configuration(framework: str, backend: str, variant: str, gpus: int) -> tuple[str, str, str, int]:
    """What a cell's seeds are repeats of (its keys but the seed), in the planner and the analysis alike."""
    return (framework, backend, variant, int(gpus))


def round_configurations(configurations: Iterable[tuple[str, str, str, int]]) -> list[tuple[str, str, str, int]]:
    """The configurations (`configuration`) a round may add seeds to, of a study whose first cells
    have `configurations`: per framework, every one at its largest GPU count (any backend may turn
    out the best, and the best is compared with each other one); per backend, those of every
    framework at the largest count two frameworks share (the frameworks compared on one backend).
    The rounds add to those of them whose comparisons are open (analysis/rounds.py)."""
    found = list(dict.fromkeys(configurations))
    chosen: dict[tuple, None] = {}
    for framework in dict.fromkeys(key[0] for key in found):
        own = [key for key in found if key[0] == framework]
        largest = max(key[3] for key in own)
        chosen.update(dict.fromkeys(key for key in own if key[3] == largest))
    for backend in dict.fromkeys(key[1] for key in found):
        on = [key for key in found if key[1] == backend]
        shared = [gpus for gpus in {key[3] for key in on} if len({key[0] for key in on if key[3] == gpus}) > 1]
        if shared:
            chosen.update(dict.fromkeys(key for key in on if key[3] == max(shared)))
    return list(chosen)


def round_cells(cells: Iterable[Cell], rule: SeedRule) -> tuple[Cell, ...]:
    """Every cell the rounds could add to the study whose first cells are `cells` (the plan's): seeds
    K+1 to M of each of its `round_configurations`, i.e. the worst case, every open comparison to M
    seeds; none for a list of seeds. The planner writes their settings.json; the bill prices them as
    the rounds' most."""
    if not rule.adaptive:
        return ()
    cells = list(cells)
    axes = {cell.variant: cell.axes for cell in cells}
    keys = [configuration(cell.framework, cell.backend, cell.variant, cell.gpus) for cell in cells]
    first = len(rule.initial) + 1
    return tuple(
        Cell(framework, backend, gpus, seed, axes[variant])
        for framework, backend, variant, gpus in round_configurations(keys)
        for seed in range(first, rule.max + 1)
    )


def possible_cells(cells: Iterable[Cell], rule: SeedRule) -> tuple[Cell, ...]:
    """The study's first cells and every cell a round could add."""
    cells = tuple(cells)
    return cells + round_cells(cells, rule)


def round_file(number: int) -> str:
    """Round `number`'s file (from 1: the round that reads the first seeds)."""
    return f"{ROUNDS_FOLDER}/round-{number}.json"


@dataclass(frozen=True)
class RoundRecord:
    """What a round's file says: the cells it read and the cells it adds (their keys, ROUND_KEYS)."""

    number: int
    cells: tuple[dict, ...]
    adds: tuple[dict, ...]
    stopped: str  # why it adds nothing ('' when it adds)

    @property
    def next_cells(self) -> tuple[dict, ...]:
        """The cells the next round reads."""
        return self.cells + self.adds


def read_round(path: str | Path) -> RoundRecord:
    """A round's file, as the rules read it to know the next round's cells."""
    data = json.loads(Path(path).read_text())
    keys = lambda entries: tuple({name: entry[name] for name in ROUND_KEYS} for entry in entries)  # noqa: E731
    return RoundRecord(int(data["round"]), keys(data["cells"]), keys(data["adds"]), data["stopped"])
