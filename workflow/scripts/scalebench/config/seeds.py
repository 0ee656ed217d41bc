"""matrix.seeds in its two forms, and the files of the rounds that add seeds.

- A list (``[1, 2, 3]``): those seeds of every cell, and nothing more.
- ``{initial: K, max: M}``: seeds 1 to K of every cell, then rounds. Each round reads the study's
  cells so far and adds one seed (each cell's next) to exactly the cells of the comparisons the
  answer rests on that are still open, until each is decided or its cells have M seeds
  (analysis/rounds.py decides; rules/rounds.smk runs each round as a Snakemake checkpoint that
  writes ``results/plan/rounds/round-<r>.json``).

Which comparisons the answer rests on is said once, here (`answer_scope`): the planner reads it for
the cells a round could add (`round_configurations`), the analysis for the verdicts it states
(analysis/comparisons.py answer_rows). matrix.seeds and verdicts are read once too (`seed_rule`, and
`Rules.of` for what the rounds decide by, which the round jobs and the analysis receive as JSON).

The planner plans every cell a round could add (`possible_cells`: each one's settings.json is
written at the start, as the first seeds' are, so a round's train jobs only read), and the bill
prices the worst case, every open comparison to M (`round_cells`).
"""

from __future__ import annotations

import dataclasses
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
# The kinds of verdict the answer rests on (analysis/verdicts.py KINDS less an imported study's
# epoch_time), and those verdicts.rounds_decide may name (config/schema.yaml lists the same).
ANSWER_KINDS = ("throughput", "time_to_target")


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


@dataclass(frozen=True)
class Rules:
    """What the rounds decide by: matrix.seeds {initial, max}, verdicts.equivalence and the kinds of
    verdict whose open comparisons may add seeds (verdicts.rounds_decide)."""

    initial: int
    max: int
    equivalence: float
    decide: tuple[str, ...] = ANSWER_KINDS

    def __post_init__(self) -> None:
        object.__setattr__(self, "decide", tuple(self.decide))  # a list, as JSON gives it back

    @classmethod
    def of(cls, config: dict) -> Rules | None:
        """The rules of a validated config (matrix.seeds read by `seed_rule`); None for a list of seeds."""
        rule = seed_rule(config)
        if not rule.adaptive:
            return None
        verdicts = config["verdicts"]
        return cls(len(rule.initial), rule.max, float(verdicts["equivalence"]), tuple(verdicts["rounds_decide"]))

    @staticmethod
    def json_of(config: dict) -> str:
        """`of` as the rules give it to a script ('null' for a list of seeds); Rules(**json.loads(...))
        reads it back."""
        rules = Rules.of(config)
        return json.dumps(dataclasses.asdict(rules) if rules else None)


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


@dataclass(frozen=True)
class AnswerScope:
    """Where the comparisons the answer rests on are, among a study's configurations (`configuration`):
    each framework's backends at its largest GPU count, and the frameworks on each backend at the
    largest count two frameworks share. analysis/comparisons.py answer_rows picks its verdicts there
    (the best backend against each other one, in the best variants), and `round_configurations` the
    configurations a round may add seeds to (all of them there: any backend may turn out the best)."""

    framework_gpus: dict[str, int]  # per framework, its largest GPU count
    backend_gpus: dict[str, int]  # per backend that two frameworks share a count of, the largest such count

    def holds(self, key: tuple[str, str, str, int]) -> bool:
        """Whether configuration `key` is where a comparison the answer rests on can be."""
        framework, backend, _, gpus = key
        return self.framework_gpus.get(framework) == gpus or self.backend_gpus.get(backend) == gpus


def answer_scope(configurations: Iterable[tuple[str, str, str, int]]) -> AnswerScope:
    """The AnswerScope of a study whose cells have `configurations` (the plan's, or a runs table's
    cells of any status: the same counts)."""
    found = list(dict.fromkeys(configurations))
    largest: dict[str, int] = {}
    for framework, _, _, gpus in found:
        largest[framework] = max(largest.get(framework, gpus), gpus)
    shared: dict[str, int] = {}
    for backend in dict.fromkeys(key[1] for key in found):
        on = [key for key in found if key[1] == backend]
        counts = [gpus for gpus in {key[3] for key in on} if len({key[0] for key in on if key[3] == gpus}) > 1]
        if counts:
            shared[backend] = max(counts)
    return AnswerScope(largest, shared)


def round_configurations(configurations: Iterable[tuple[str, str, str, int]]) -> list[tuple[str, str, str, int]]:
    """The configurations (`configuration`) a round may add seeds to, of a study whose first cells
    have `configurations`: every one in its `answer_scope`. The rounds add to those of them whose
    comparisons are open (analysis/rounds.py)."""
    found = list(dict.fromkeys(configurations))
    scope = answer_scope(found)
    return [key for key in found if scope.holds(key)]


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


class RoundFileError(ValueError):
    """A round's file that cannot be read (damaged, truncated, edited by hand), naming it."""


def read_round(path: str | Path) -> RoundRecord:
    """A round's file, as the rules read it to know the next round's cells; RoundFileError naming the
    file where it cannot be read or does not say what a round says."""
    try:
        data = json.loads(Path(path).read_text())
        record = RoundRecord(_whole(data["round"]), _keys(data["cells"]), _keys(data["adds"]), _text(data["stopped"]))
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
        what = f"{type(error).__name__}: {error}" if not isinstance(error, KeyError) else f"no {error}"
        raise RoundFileError(f"the round file {path} cannot be read ({what})") from None
    return record


def _whole(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{value!r} is not a whole number")
    return value


def _text(value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _keys(entries) -> tuple[dict, ...]:
    """A round file's list of cells, each with ROUND_KEYS of their types."""
    if not isinstance(entries, list):
        raise TypeError(f"{entries!r} is not a list of cells")
    kinds = {"framework": str, "backend": str, "variant": str, "gpus": int, "seed": int}
    found = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise TypeError(f"{entry!r} is not a cell's keys")
        key = {name: entry[name] for name in ROUND_KEYS}
        for name, kind in kinds.items():
            if not isinstance(key[name], kind) or isinstance(key[name], bool):
                raise TypeError(f"{name} {key[name]!r} is not of type {kind.__name__}")
        found.append(key)
    return tuple(found)


def remove_unreadable_rounds(folder: str | Path = ROUNDS_FOLDER) -> list[str]:
    """Remove each round file in `folder` that cannot be read (read_round), so that its checkpoint
    decides that round again from the cells' records; what was removed, in words (planning says it)."""
    said = []
    for path in sorted(Path(folder).glob("round-*.json")):
        try:
            read_round(path)
        except RoundFileError as error:
            path.unlink(missing_ok=True)
            said.append(f"warning: {error}: removed; the round is decided again from the cells' records")
    return said
