"""The bill: what a study will cost before it runs, and the time limit each of its cells asks SLURM for.

Made once per start, before anything acts (config/planning.py: `bill_study`), from what the study's
folders hold: each cell's freshness verdict (config/freshness.py) says whether it is finished, held by
a live job (its SLURM job pending or running, or a process holding its lock) or still to run, and each
cell to run or held gets its predicted run from the best source there is (config/prediction.py). The
train rule's resources read it (rules/common.smk), the SLURM pre-flight among them, so it exists
before the plan; nothing changes it afterwards.

Planning then writes it whole to results/plan/bill.csv (a row per cell of the matrix, the left-out
ones with their reason), says it in one line (`line`), refuses a study over budget.max_gpu_hours
(`budget_problem`), and, in a run that trains (not a dry run), keeps each cell's prediction as it is
started in results/plan/submitted.csv, which the report's cost section sets against what the cell
took (analysis/cost.py): the bill is back-tested on every study.

GPU-hours (gpu_hours) are a cell's GPUs (ranks on CPUs) times its job's wall: what its allocation
held, from before the framework's imports to the ranks' end (SLURM's elapsed in a SLURM job), the
figure runs.csv's and cost.csv's gpu_hours measure (launch/accounting.py: job_s).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from scalebench.cell import Cell
from scalebench.config import earlier_study
from scalebench.config.freshness import Verdict
from scalebench.config.plan import Study, outputs_exist
from scalebench.config.prediction import EARLIER_STUDY, FORMULA, THIS_STUDY, Estimate, Series, from_formula
from scalebench.config.resources import ranks_per_node_limit, runtime_minutes, task_layout
from scalebench.data.keys import prepared_key
from scalebench.files import write_text_atomic
from scalebench.records.tables import BILL, KEYS
from scalebench.timing import cell_times

BILL_FILE = "results/plan/bill.csv"
SUBMITTED_FILE = "results/plan/submitted.csv"
FINISHED, TO_RUN, HELD, LEFT_OUT = "finished", "to run", "held by a live job", "left out"
ROUND = "a round's, if open"  # matrix.seeds {initial, max}: a cell only a round adds, where a comparison stays open
# (config, first cells, a round's cells, finished cells) -> each round cell's chance, or why none is known
Outlook = Callable[[dict, list[Cell], list[Cell], set[Cell]], Mapping[Cell, float] | str]
MAX_KEY = "budget.max_gpu_hours"


@dataclass(frozen=True, eq=False)
class Bill:
    """Each cell's verdict and, for a cell to run or held, its estimate; the time limits they set."""

    study: Study
    verdicts: Mapping[Cell, Verdict] = field(default_factory=dict)
    states: Mapping[Cell, str] = field(default_factory=dict)  # cell_state's, as the bill was made
    estimates: Mapping[Cell, Estimate] = field(default_factory=dict)
    nodes: Mapping[Cell, int] = field(default_factory=dict)
    # a round's cells with the chance a round adds each (config/round_outlook.py), or why none is known
    round_chances: Mapping[Cell, float] | str = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.round_chances, str):
            object.__setattr__(self, "round_chances", MappingProxyType(dict(self.round_chances)))
        for name in ("verdicts", "states", "estimates", "nodes"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
        # read once: the train rule's every resource asks time_limit (Study.config parses a fresh copy)
        object.__setattr__(self, "_config", self.study.config)

    def state(self, cell: Cell) -> str:
        """finished, to run or held by a live job, as the bill found the cell (to run where it has not)."""
        return self.states.get(cell, TO_RUN)

    def waits(self, cell: Cell, attempt: int) -> bool:
        """Whether the cell's job, at this attempt, only waits for the live job that holds the cell
        (config/resources.py: waiting_resources); its retry asks for the cell's own allocation."""
        return attempt <= 1 and self.state(cell) == HELD

    def time_limit(self, cell: Cell, attempt: int = 1) -> int:
        """Minutes the cell's job asks SLURM for: from its measured prediction with
        cluster.time.safety_factor where the bill has one (never below the formula where the prediction
        is only a lower bound), else the formula; each retry longer by cluster.time.retry_factor."""
        config = self._config
        formula = runtime_minutes(config, cell, attempt)
        estimate = self.estimates.get(cell)
        if estimate is None or not estimate.measured:
            return formula
        measured = runtime_minutes(
            config, cell, attempt, estimate.limit_minutes(config["cluster"]["time"]["safety_factor"])
        )
        return max(measured, formula) if estimate.lower_bound else measured

    def rows(self, reasons: Iterable[tuple[Cell, str | None]]) -> list[dict]:
        """bill.csv: a row per cell of `reasons` (each cell with why it does not run, None where it runs),
        in records/tables.py BILL's columns (and round_chance_reason, not a column: the line says it)."""
        found = []
        for cell, reason in reasons:
            row = {**cell.key(), "nodes": self.nodes.get(cell), "state": LEFT_OUT if reason else self.state(cell)}
            estimate = self.estimates.get(cell)
            if reason:
                row["note"] = reason
            elif estimate is not None and row["state"] != FINISHED:
                row |= estimate_columns(estimate, cell)
                row["time_limit_min"] = self.time_limit(cell)
                if row["state"] == ROUND and isinstance(self.round_chances, str):
                    row["round_chance_reason"] = self.round_chances  # not a column: the line says it
                elif row["state"] == ROUND:
                    row["round_chance"] = self.round_chances.get(cell, 0.0)  # a failed one: rounds never retry
            found.append(row)
        return found


def estimate_columns(estimate: Estimate, cell: Cell) -> dict:
    return {
        "predicted_s": estimate.predicted_s,
        "low_s": estimate.low_s,
        "high_s": estimate.high_s,
        "gpu_hours": cell.gpus * estimate.predicted_s / 3600,
        "source": estimate.source,
        "method": estimate.method,
        "note": estimate.note,
    }


def cell_state(cell: Cell, verdict: Verdict, forced: frozenset[Cell], rounds: frozenset[Cell] = frozenset()) -> str:
    """finished, to run or held by a live job, as the cell's folder says (a forced cell is to run); a
    cell of `rounds` (one only a round adds) not yet finished is the rounds' (ROUND)."""
    if verdict.held_by:
        return HELD
    finished = outputs_exist(cell) and not verdict.retrain
    if finished and cell not in forced:
        return FINISHED
    return ROUND if cell in rounds else TO_RUN


def cell_nodes(config: dict, cell: Cell, executor: str | None) -> int:
    """The nodes a cell runs on: one locally, else its job's (config/resources.py)."""
    return 1 if executor == "local" else task_layout(config["cluster"], cell)[0]


def make_bill(
    study: Study,
    verdicts: Mapping[Cell, Verdict],
    executor: str | None,
    forced: frozenset[Cell] = frozenset(),
    rounds: frozenset[Cell] = frozenset(),
    outlook: Outlook | None = None,
) -> Bill:
    """The bill of the cells of `verdicts` (what planning found in their folders): each one to run or
    held predicted from this study's finished cells of its series, else an earlier study's comparable
    cells, else the cluster.time formula (config/prediction.py); `rounds`, the cells only a round of
    matrix.seeds {initial, max} adds, priced apart as the rounds' worst case and, where `outlook`
    (analysis/round_outlook.py chances, given by the rules) can say from the first seeds' scatter, at
    their expected cost."""
    config = study.config
    states = {cell: cell_state(cell, verdict, forced, rounds) for cell, verdict in verdicts.items()}
    nodes = {cell: cell_nodes(config, cell, executor) for cell in verdicts}
    to_predict = [cell for cell in verdicts if states[cell] != FINISHED]
    # a finished study reads no record here; the frameworks to predict read all their cells, whose
    # first on each node is a cold start (cell_times.with_cold_starts) and whose other backends'
    # start-up stands in where a series has no warm cell
    wanted = {cell.framework for cell in to_predict}
    read: list[tuple[tuple, cell_times.Measured]] = []
    for cell in verdicts:
        if cell.framework in wanted and states[cell] == FINISHED and verdicts[cell].state == "current":
            found = cell_times.read(cell.folder)
            if found is not None:
                read.append((series_of(cell), found))
    marked = cell_times.with_cold_starts([found for _, found in read])
    measured: dict[tuple, list[cell_times.Measured]] = {}
    for (key, _), found in zip(read, marked, strict=True):
        measured.setdefault(key, []).append(found)
    predictor = Predictor(study, measured)
    estimates = {cell: predictor.estimate(cell, nodes[cell]) for cell in to_predict}
    finished = {cell for cell, state in states.items() if state == FINISHED}
    first = [cell for cell in verdicts if cell not in rounds and cell.seed <= study.seed_rule.initial[-1]]
    later = [cell for cell in verdicts if cell in rounds]
    chances = (outlook or no_outlook)(config, first, later, finished) if rounds else {}
    return Bill(study, verdicts, states, estimates, nodes, chances)


def no_outlook(config: dict, first: list[Cell], rounds: list[Cell], finished: set[Cell]) -> str:
    """Where the rules gave planning no outlook (the API, a test): the rounds' worst case only."""
    return "no outlook of the rounds was given to the planner"


def series_of(cell: Cell) -> tuple[str, str, str]:
    return cell.framework, cell.backend, cell.variant


@dataclass
class Predictor:
    """Each series' source of predictions, found once: its own finished cells, else the earlier
    study's comparable ones (read once, where a series needs them), else none (the formula)."""

    study: Study
    measured: dict[tuple, list[cell_times.Measured]]
    series: dict[tuple, Series | str] = field(default_factory=dict)  # a Series, or why there is none
    earlier: earlier_study.EarlierStudy | None = None

    def estimate(self, cell: Cell, nodes: int) -> Estimate:
        config = self.study.config
        key = series_of(cell)
        if key not in self.series:
            self.series[key] = self.source(cell)
        found = self.series[key]
        if isinstance(found, str):
            return from_formula(config, cell, found)
        return found.estimate(cell, nodes, self.study.settings(cell)["training"])

    def source(self, cell: Cell) -> Series | str:
        per_node = ranks_per_node_limit(self.study.config["cluster"])
        name = "/".join(part for part in series_of(cell) if part)
        own = self.measured.get(series_of(cell))
        if own:
            kin = [m for key, cells in self.measured.items() if key[0] == cell.framework for m in cells]
            return Series(own, per_node, THIS_STUDY, f"{len(own)} finished cell(s) of {name}", kin)
        folder, key = earlier_study.study_folder(self.study.config)
        if folder is None:
            return f"nothing of {name} finished yet"
        if self.earlier is None:
            self.earlier = earlier_study.read_study(folder, key)
        settings, data_key = self.study.settings(cell), prepared_key(self.study.config["dataset"])
        alike, why = self.earlier.comparable(cell.framework, cell.backend, settings, data_key)
        if not alike:
            return why
        note = f"{key}: {folder}, {len(alike)} cell(s) on {self.earlier.devices(alike)}"
        kin = self.earlier.kin(cell.framework, settings, data_key, alike)
        return Series(alike, per_node, EARLIER_STUDY, note, kin)


# --- what planning says and writes


def to_run(rows: list[dict]) -> list[dict]:
    return [row for row in rows if row["state"] == TO_RUN]


def of_rounds(rows: list[dict]) -> list[dict]:
    """The cells only a round adds, where its comparison stays open: the rounds' worst case."""
    return [row for row in rows if row["state"] == ROUND]


def gpu_hours(rows: list[dict]) -> float:
    return sum(row["gpu_hours"] for row in rows)


def line(rows: list[dict], path: str = BILL_FILE) -> str:
    """The bill in one line: the cells to run, their GPU-hours with an interval, the largest cell's
    run, the sources, the other states, and where the bill is."""
    counts = {state: sum(row["state"] == state for row in rows) for state in (FINISHED, HELD, LEFT_OUT)}
    others = ", ".join(f"{count} {state}" for state, count in counts.items() if count)
    tail = f"{'; ' + others if others else ''} ({path})"
    running = to_run(rows)
    rounds = of_rounds(rows)
    worst = f"; the rounds: {rounds_cost(rounds)}" if rounds else ""
    tail = worst + tail
    if not running:
        return f"bill: nothing to run{tail}"
    total = gpu_hours(running)
    sources = {
        source: sum(row["source"] == source for row in running) for source in (THIS_STUDY, EARLIER_STUDY, FORMULA)
    }
    largest = max(running, key=lambda row: row["predicted_s"])
    formula_only = sources[FORMULA] == len(running)
    amount = (
        f"at most {total:.3g} GPU-hours by the cluster.time formula (an upper bound: nothing measured yet)"
        if formula_only
        else f"{total:.3g} GPU-hours predicted ({interval(running)})"
    )
    size = "at most " if largest["source"] == FORMULA else ""
    biggest = f"the largest {cell_name(largest)}: {size}{duration(largest['predicted_s'])}"
    named = {
        THIS_STUDY: "this study's finished cells",
        EARLIER_STUDY: "an earlier study's cells",
        FORMULA: "the cluster.time formula, an upper bound",
    }
    source = "; from " + ", ".join(f"{named[s]} ({n})" for s, n in sources.items() if n) if not formula_only else ""
    return f"bill: {len(running)} cell{'s' if len(running) > 1 else ''} to run, {amount}; {biggest}{source}{tail}"


def interval(rows: list[dict]) -> str:
    """'95%: 1.2-1.6', or why the total has none."""
    unknown = [row for row in rows if not (math.isfinite(row["low_s"]) and math.isfinite(row["high_s"]))]
    if unknown:
        return f"no interval: {len(unknown)} of the cells rest on one measurement each or the formula"
    low = sum(row["gpus"] * row["low_s"] for row in rows) / 3600
    high = sum(row["gpus"] * row["high_s"] for row in rows) / 3600
    return f"95%: {low:.3g}-{high:.3g}"


def cell_name(row: dict) -> str:
    pair = "/".join(str(row[key]) for key in ("framework", "backend", "variant") if row[key])
    return f"{pair} g{row['gpus']} s{row['seed']}"


def duration(seconds: float) -> str:
    """'45 s', '3 min 20 s', '1 h 12 min'."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min" + (f" {seconds % 60} s" if seconds % 60 else "")
    return f"{seconds // 3600} h" + (f" {seconds % 3600 // 60} min" if seconds % 3600 >= 60 else "")


def budget_problem(rows: list[dict], limit: float | None) -> str | None:
    """Why the cells to run exceed budget.max_gpu_hours (naming the total, the largest cells, the key):
    the rounds' worst case counts, since the study may spend it."""
    running = to_run(rows) + of_rounds(rows)
    total = gpu_hours(running)
    if limit is None or total <= limit:
        return None
    largest = sorted(running, key=lambda row: row["gpu_hours"], reverse=True)[:3]
    named = ", ".join(f"{cell_name(row)} {row['gpu_hours']:.3g}" for row in largest)
    guessed = sum(row["source"] == FORMULA for row in running)
    bound = f", {guessed} of them by the cluster.time formula, an upper bound" if guessed else ""
    return (
        f"config key '{MAX_KEY}': the bill predicts {total:.3g} GPU-hours for the {len(running)} cells to run{bound}{rounds_part(rows)}, "
        f"more than the {limit:g} allowed (the largest: {named}; results/plan/bill.csv has every cell); "
        f"raise {MAX_KEY}, or run fewer cells (matrix.gpus, matrix.seeds, or name the cells to build)"
    )


def rounds_cost(rounds: list[dict]) -> str:
    """The rounds' expected GPU-hours, from the first seeds' scatter where it is measured, beside their
    worst case (every open comparison to matrix.seeds' max)."""
    worst = (
        f"worst case (every open comparison to matrix.seeds' max) {len(rounds)} cell"
        f"{'s' if len(rounds) > 1 else ''} more, {gpu_hours(rounds):.3g} GPU-hours"
    )
    chances = [row.get("round_chance") for row in rounds]
    if any(chance is None for chance in chances):
        why = next((row["round_chance_reason"] for row in rounds if row.get("round_chance_reason")), "not estimated")
        return f"{worst}; expected not known yet ({why})"
    expected = sum(row["gpu_hours"] * row["round_chance"] for row in rounds)
    likely = sum(chance > 0 for chance in chances)
    return f"{worst}; expected {expected:.3g} GPU-hours ({likely} of them, from the first seeds' scatter)"


def rounds_part(rows: list[dict]) -> str:
    rounds = of_rounds(rows)
    return f" ({len(rounds)} of them the rounds' worst case, {gpu_hours(rounds):.3g} GPU-hours)" if rounds else ""


def csv_text(rows: list[dict]) -> str:
    handle = io.StringIO()
    writer = csv.DictWriter(handle, BILL.names, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: _cell_text(value) for key, value in row.items()})
    return handle.getvalue()


def _cell_text(value: object) -> object:
    """A value as bill.csv holds it: empty where unknown, seconds and GPU-hours to 4 significant digits."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    return float(f"{value:.4g}") if isinstance(value, float) else value


def write_bill(rows: list[dict], path: str | Path = BILL_FILE) -> Path:
    """results/plan/bill.csv, written whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, csv_text(rows))
    return path


def write_submitted(rows: list[dict], path: str | Path = SUBMITTED_FILE) -> Path:
    """results/plan/submitted.csv: each cell's prediction as the last run that trains it started it;
    the rows of this start's cells to run replace theirs, every other row stays (a finished cell keeps
    the prediction it was started with, which the report sets against what it took)."""
    path = Path(path)
    kept: dict[tuple, dict] = {}
    if path.is_file():
        with open(path, newline="") as handle:
            kept = {tuple(row[key] for key in KEYS): row for row in csv.DictReader(handle)}
    for row in to_run(rows) + of_rounds(rows):  # a round's cell, if it runs, starts with this prediction
        kept[tuple(str(row[key]) for key in KEYS)] = row
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, csv_text(list(kept.values())))
    return path
