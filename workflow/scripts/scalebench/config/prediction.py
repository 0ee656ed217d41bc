"""A cell's predicted run time, from the best source there is (config/bill.py uses it):

1. cells of its series that finished (this study's, or an earlier study's comparable cells: config/
   earlier_study.py), through the scaling model the analysis fits (timing/scaling_model.py), and the
   cell's own epochs;
2. else the cluster.time formula, which is the user's guess of a limit: an upper bound, not a prediction.

From measured cells, the run (what the cell's job holds: launch.py's job_s, timing/cell_times.py) is
predicted as its epochs plus what does not scale with them:

    run(N) = epochs x epoch(N) + first epoch's extra + start-up

with epoch(N) the steady epoch at N GPUs (the one model, below), the first epoch's extra (the first
epoch less a steady one: compilation, the first batches' caches) and the start-up (the job's wall
outside the epochs: imports, setup, the collective benchmark, evaluation, the test, the end) measured
figures of the cells: their median, their range in the interval. Those two come from warm cells: the
first cell of a framework on a node is a cold start (timing/cell_times.py: with_cold_starts; the
kernel and compilation caches, the page cache and the device's first use are paid once there), which
would be multiplied into every later cell. The start-up grows with the ranks started (their imports
on the node's cores, the rendezvous, the collective benchmark), so the cells at the same GPU count
come first. In this order: the warm cells of the series at N; else the warm cells of the same
framework's other backends at N (said in the note); else those of the nearest measured count (said);
else the cold ones, in the same order (said: a cold start, which the cell may not pay). A cell
recorded before job_s (an older study, imported logs) gives run.json's start to its end instead,
which leaves its imports out (said in the note). epoch(N), in this order:

No second model of epoch time: every number comes from the records and the one model.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from scalebench.cell import Cell
from scalebench.config.resources import runtime_minutes
from scalebench.timing.cell_times import Measured

THIS_STUDY, EARLIER_STUDY, FORMULA = "this study", "earlier study", "formula"
SOURCES = (THIS_STUDY, EARLIER_STUDY, FORMULA)
LEVEL = 0.95


@dataclass(frozen=True)
class Estimate:
    """A cell's predicted run in seconds, with its 95% interval (NaN where it is not known), where
    the prediction comes from (SOURCES), how it was made, and what to know about it."""

    predicted_s: float
    low_s: float
    high_s: float
    source: str
    method: str
    note: str = ""
    lower_bound: bool = False  # the run can only be longer (more GPUs than measured, a node step unknown)

    @property
    def measured(self) -> bool:
        """Made from finished cells (sources 1 and 2), not the formula."""
        return self.source != FORMULA

    def limit_minutes(self, safety_factor: float) -> float:
        """The minutes of a time limit this prediction asks for (before cluster.time.base_min): the
        prediction times the safety factor, or its upper bound where that is longer."""
        high = self.high_s if math.isfinite(self.high_s) else 0.0
        return max(self.predicted_s * safety_factor, high) / 60


def from_formula(config: dict, cell: Cell, note: str = "") -> Estimate:
    """The cluster.time formula's limit as the cell's bill: an upper bound, not a prediction."""
    seconds = runtime_minutes(config, cell) * 60.0
    return Estimate(seconds, math.nan, seconds, FORMULA, "cluster.time formula (an upper bound)", note)


def work_ratio(training: dict, gpus: int, measured_gpus: int) -> float:
    """An epoch's work per replica at `gpus` over that at `measured_gpus`: the same with
    training.steps_per_epoch under weak scaling (every replica takes those steps of its batch), else
    measured_gpus / gpus (the data, or strong scaling's global batch, shared by more replicas)."""
    if training.get("steps_per_epoch") is not None and training.get("scaling", "weak") == "weak":
        return 1.0
    return measured_gpus / gpus


@dataclass
class Series:
    """Finished cells of one series (this study's, or an earlier study's comparable ones), fitted once;
    `note` says where they come from."""

    cells: list[Measured]
    per_node: int | None
    source: str
    note: str = ""
    kin: list[Measured] = field(default_factory=list)  # the same framework's other backends, same source
    fit: object = field(init=False)  # the scaling model's Fit, or its Refused with the reason

    def __post_init__(self) -> None:
        import pandas as pd

        from scalebench.timing.scaling_model import fit_series

        self.fit = fit_series(pd.DataFrame([m.row() for m in self.cells]), self.per_node)

    def estimate(self, cell: Cell, nodes: int, training: dict) -> Estimate:
        """The run of `cell` (on `nodes` nodes, with `training`'s epochs) predicted from the series (the
        module's docstring)."""
        epoch, low, high, method, notes, lower = self.epoch_time(cell.gpus, nodes, training)
        fixed, least, most, said = self.fixed_time(cell.gpus)
        if said:
            notes.append(said)
        if fixed is None:
            fixed = least = most = 0.0
            notes.append("no measured cell recorded its run's end: start-up and test left out")
            lower = True
        epochs = int(training["epochs"])
        return Estimate(
            predicted_s=epochs * epoch + fixed,
            low_s=epochs * low + least,
            high_s=epochs * high + most,
            source=self.source,
            method=method,
            note="; ".join(part for part in [self.note, *notes] if part),
            lower_bound=lower,
        )

    def fixed_time(self, gpus: int) -> tuple[float | None, float, float, str]:
        """(the start-up and first epoch's extra of a cell of `gpus`: median, least, most; a note on
        where they come from), None where no cell measured its run (the module's docstring)."""
        framework = self.cells[0].framework if self.cells else ""
        kin = [m for m in self.kin if m not in self.cells]
        groups = ((self.cells, ""), (kin, f"{framework}'s other backends"))
        for cold in (False, True):
            for same in (True, False):
                for group, whose in groups:
                    known = [m for m in group if m.cold == cold and math.isfinite(m.fixed_s)]
                    if not same and known:
                        nearest = min({m.gpus for m in known}, key=lambda count: (abs(math.log(count / gpus)), count))
                        known = [m for m in known if m.gpus == nearest]
                    elif same:
                        known = [m for m in known if m.gpus == gpus]
                    if known:
                        return self.fixed_of(known, whose, cold, None if same else known[0].gpus)
        return None, 0.0, 0.0, ""

    @staticmethod
    def fixed_of(known: list[Measured], whose: str, cold: bool, count: int | None) -> tuple[float, float, float, str]:
        """The median, least and most of `known`'s start-up and first epoch's extra, and what to say of them."""
        timed = [m for m in known if m.from_job]
        said = []
        if whose or cold or count is not None:
            kind = "a cold start (the first cell of its framework on its node) of " if cold else "warm cells of "
            at = f" at {count} GPUs" if count is not None else ""
            said.append(f"start-up from {kind}{whose or 'the series'}{at}")
        if timed:
            known = timed  # the job's wall, not run.json's span, where some cells recorded it
        else:
            said.append(
                "start-up from run.json's start to its end (no job wall recorded: an older study's records), "
                "its imports left out"
            )
        values = [m.fixed_s for m in known]
        return statistics.median(values), min(values), max(values), "; ".join(said)

    def epoch_time(self, gpus: int, nodes: int, training: dict) -> tuple[float, float, float, str, list[str], bool]:
        """(steady epoch at `gpus`, its 95% low and high, the method, notes, whether it is a lower bound)."""
        from scalebench.timing.scaling_model import Fit

        fit, cells = self.fit, self.cells
        at_count = [m.steady_epoch_s for m in cells if m.gpus == gpus]
        if isinstance(fit, Fit) and not (fit.poor and at_count):
            value, low, high = fit.epoch_time(gpus, nodes)
            counts = len(set(fit.points["gpus"]))
            notes = ["POOR FIT: the model does not describe the measured points"] if fit.poor else []
            lower = nodes > 1 and "node_step" not in fit.terms
            if lower:
                notes.append(
                    f"{gpus} GPUs span {nodes} nodes, which no measured cell did: node step unknown, a lower bound"
                )
            return value, low, high, f"scaling model ({fit.form} form, {counts} GPU counts)", notes, lower
        why = f"the scaling model: {fit.reason}" if not isinstance(fit, Fit) else "the scaling model fits poorly"
        if at_count:
            value, low, high = mean_interval(at_count)
            return value, low, high, f"measured at {gpus} GPUs ({len(at_count)} cell(s))", [why], False
        counts = sorted({m.gpus for m in cells})
        nearest = min(counts, key=lambda count: (abs(math.log(count / gpus)), count))
        value, low, high = mean_interval([m.steady_epoch_s for m in cells if m.gpus == nearest])
        ratio = work_ratio(training, gpus, nearest)
        notes = [why, f"the epoch at {nearest} GPUs scaled by the work, no extrapolation of the scaling"]
        if gpus > nearest:
            notes.append("more GPUs than measured only add communication: a lower bound")
        method = f"scaled by the work from {nearest} GPUs"
        return value * ratio, low * ratio, high * ratio, method, notes, gpus > nearest


def mean_interval(values: list[float]) -> tuple[float, float, float]:
    """The mean and its 95% t-interval (NaN bounds with a single value)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan, math.nan
    from scipy import stats

    half = stats.t.ppf(0.5 + LEVEL / 2, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half
