"""A model of the steady-state epoch time against GPUs, fitted per (source, framework, backend, variant).

Each series is fitted with the form of its scaling (runs.csv's ``scaling`` column: ``weak``, the
default and what imported studies did, or ``strong``). Both are linear in their parameters, which
are seconds of an epoch (``model_form`` in scaling.csv says which form a series got).

Weak scaling. Every rank trains on the same batch per GPU, so a step's compute is the same at
every GPU count. The training set, however, is fixed and sharded over the ranks, so an epoch
has about 1/N of the one-rank steps on N ranks. Per step, a ring allreduce costs a latency and a
bandwidth term that grows as (N-1)/N, plus a step when the ranks span more than one node (the
inter-node link is slower):

    step(N)  = c + [N > 1] (alpha + beta (N-1)/N) + [nodes > 1] gamma
    epoch(N) = steps(1) / N * step(N)

Written with the one-rank epoch's step count folded into the parameters (all in seconds of a
one-rank epoch's worth of steps):

    weak:   epoch(N) = compute / N  +  (latency [N > 1] + bandwidth (N-1)/N + node_step [nodes > 1]) / N
                       `- compute -'   `------------------------ communication ------------------------'

(Padding shards to whole batches makes steps(N) slightly more than steps(1)/N for uneven
shards: that small excess shows in the residuals.)

Strong scaling. The global batch is fixed, so an epoch has the same number of steps S at every
N. The per-GPU batch, and with it the compute of a step, shrinks as 1/N down to a per-step floor
f (optimizer update, kernel launches, the parts of a step that do not depend on the batch), and
every step still allreduces the whole gradient:

    step(N)  = c / N + f + [N > 1] (alpha + beta (N-1)/N) + [nodes > 1] gamma
    epoch(N) = S * step(N)

The ring's bandwidth term cannot be told apart here: beta (N-1)/N = beta - beta / N at every N
(at N = 1 both are 0), so it is a constant plus a 1/N term, exactly the shape of f and c. The
fitted form therefore folds it into them (all in seconds per epoch):

    strong: epoch(N) = compute / N  +  floor  +  latency [N > 1] + node_step [nodes > 1]
                       `- divides -'  `floor'    `------------ communication ------------'

with compute = S (c - beta) (the compute that divides, less the allreduce's bandwidth share) and
floor = S (f + beta) (what does not divide: the step's fixed work and the bandwidth of a whole
gradient's allreduce, which a ring makes nearly constant in N). The split therefore has three
parts: compute, the per-step floor, and the communication that only more ranks bring (latency
and node step; a lower bound of the time spent communicating, since the bandwidth sits in the
floor). A fitted compute below zero is possible (the allreduce's bandwidth costs more than the
compute it divides) and is said in the note, not flagged as a poor fit.

Fit: weighted least squares on every usable cell (status ok, epoch time > 0), one row per
seed, each weighted by 1 / (mean epoch time at its GPU count)^2, i.e. relative errors, since
the times span an order of magnitude or more. The parameter covariance is the residual
variance over the cells (the seeds' scatter plus any lack of fit) times (X'WX)^-1; 95%
t-intervals with n - p degrees of freedom. Terms are used only where the cells can tell
them apart: latency needs a one-GPU cell beside multi-GPU ones (without one it cannot be told
from compute, weak, or the floor, strong, and is folded into it: fsdp starts at two ranks), the
node step needs a cell that spans nodes. A series with fewer distinct (GPUs, nodes) points than
terms is refused (empty fields with a reason), never extrapolated.

Measured communication: where every usable cell of a series has the step split's exposed
communication (runs.csv ``comm_exposed_critical_s``, per steady epoch: the reduction's time that no
compute hid, measured on the critical rank, so a straggler's lateness that its peers wait out in
the reduction is not counted as communication: timing/step_split.py), the model does not infer communication from the fit alone. The
compute terms (compute, floor) are fitted to the epoch time less the measured communication and
the communication terms (latency, bandwidth, node_step) to the measured communication, in one
weighted least squares over both (the same weights, so both are relative errors of the epoch).
The prediction and the split then rest on the measured communication; scaling.csv's
``model_communication`` says which a series got ("measured" or "inferred"), and the note says
why a series without the split for every cell is inferred.

Poor fit: a term comes out negative beyond its interval (no time is negative), or a point's mean
is off the fit by more than POOR_RESIDUAL (relative) and, where seeds repeat at some point and
there are more points than terms, the lack-of-fit F-test (lack of fit against the seeds' own
scatter) rejects at POOR_P. With as many points as terms the fit passes through the means and
its quality cannot be judged (said so).

Prediction: the epoch time and the parallel efficiency at twice the largest measured GPU count,
relative to the series' smallest measured count as in scaling.csv, both from the model
(delta-method interval). It is a prediction, not a measurement: where it would cross a node
boundary the cells never crossed, the node step is unknown and left out, which the note says
(the time is then a lower bound).

Back-test: with four or five GPU counts and up to four parameters a fit has few degrees of
freedom left, so the interval alone does not say whether the form extrapolates. Each fitted
series is refitted without its largest GPU count, that fit predicts the held-out count's
efficiency, and scaling.csv's ``backtest_`` columns put it beside the measured one (ratio of the
mean epoch times of the cells the fit used, base: the series' smallest count) with the error
(predicted - measured). A series whose shorter self cannot be fitted is not back-tested: empty
fields and the reason in ``backtest_note``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from scalebench.distributions import f_tail, t_quantile
from scalebench.records.tables import BACKTEST_COLUMNS, MODEL_ROW_COLUMNS, MODEL_SERIES_COLUMNS

# one series per backend and variant of the optional axes ('' without them)
GROUP = ["source", "framework", "backend", "variant"]
METRIC = "steady_epoch_s"
LEVEL = 0.95
POOR_RESIDUAL = 0.05  # a point mean more than 5% off the fit
POOR_P = 0.01  # and a lack-of-fit F-test this unlikely under seed scatter alone
# every term of either form (scaling.csv has a column for each, records/tables.py MODEL_TERMS; a form
# leaves the others empty)
TERMS = ("compute", "floor", "latency", "bandwidth", "node_step")
FORMS = ("weak", "strong")
# the terms whose time only more ranks bring: the communication of the split
COMMUNICATION = ("latency", "bandwidth", "node_step")
MEASURED = "comm_exposed_critical_s"  # runs.csv: the critical rank's exposed communication per steady epoch
# how each form reads, for notes and captions
FORMULAS = {
    "weak": "epoch(N) = (compute + latency [N>1] + bandwidth (N-1)/N + node_step [nodes>1]) / N",
    "strong": "epoch(N) = compute / N + floor + latency [N>1] + node_step [nodes>1]",
}


def regressors(gpus: np.ndarray, nodes: np.ndarray, terms: tuple[str, ...], form: str = "weak") -> np.ndarray:
    """The design matrix of epoch(N) in `form` (see the module docstring): one column per term,
    one row per (gpus, nodes)."""
    gpus = np.asarray(gpus, dtype=float)
    nodes = np.asarray(nodes, dtype=float)
    if form == "strong":  # the steps per epoch do not change with N
        columns = {
            "compute": 1 / gpus,
            "floor": np.ones_like(gpus),
            "latency": (gpus > 1).astype(float),
            "node_step": (nodes > 1).astype(float),
        }
    else:  # an epoch has 1/N of the one-rank steps
        columns = {
            "compute": 1 / gpus,
            "latency": (gpus > 1) / gpus,
            "bandwidth": (gpus - 1) / gpus**2,
            "node_step": (nodes > 1) / gpus,
        }
    return np.column_stack([columns[t] for t in terms])


def series_form(cells: pd.DataFrame) -> str | None:
    """The form a series is fitted with: its cells' scaling (runs.csv's column; weak where it is
    not recorded: imported studies and tables from before strong scaling), None if it is mixed."""
    recorded = set(cells["scaling"].dropna().astype(str)) - {""} if "scaling" in cells else set()
    if len(recorded) > 1:
        return None
    return "strong" if recorded == {"strong"} else "weak"


@dataclass(frozen=True)
class Fit:
    """A fitted series: parameters (seconds, see the module docstring) and what they imply."""

    terms: tuple[str, ...]
    params: np.ndarray
    cov: np.ndarray  # NaN where there are no residual degrees of freedom
    dof: int  # cells - terms
    points: pd.DataFrame  # gpus, nodes, seeds, mean_s, fit_s, residual (relative: mean / fit - 1)
    poor: bool
    note: str
    per_node: int | None  # GPUs a node holds, as known or inferred from the cells
    notes: list[str] = field(default_factory=list)
    form: str = "weak"  # weak or strong: which epoch(N) (module docstring)
    communication: str = "inferred"  # or measured: its terms fitted to the cells' exposed communication

    def parameter(self, term: str) -> tuple[float, float, float]:
        """Value and 95% interval of a term (NaN if the model has no such term)."""
        if term not in self.terms:
            return math.nan, math.nan, math.nan
        i = self.terms.index(term)
        half = self._quantile() * math.sqrt(self.cov[i, i])
        return float(self.params[i]), float(self.params[i] - half), float(self.params[i] + half)

    def _quantile(self) -> float:
        return t_quantile(0.5 + LEVEL / 2, self.dof)  # NaN without a degree of freedom

    def _x(self, gpus: int, nodes: int, only: tuple[str, ...] | None = None) -> np.ndarray:
        x = regressors(np.array([gpus]), np.array([nodes]), self.terms, self.form)[0]
        if only is not None:
            x = x * np.array([t in only for t in self.terms])
        return x

    def epoch_time(self, gpus: int, nodes: int) -> tuple[float, float, float]:
        """Fitted epoch time at `gpus` on `nodes`, with its 95% band."""
        x = self._x(gpus, nodes)
        value = float(x @ self.params)
        half = self._quantile() * math.sqrt(float(x @ self.cov @ x))
        return value, value - half, value + half

    def split(self, gpus: int, nodes: int) -> dict[str, float]:
        """Seconds of the fitted epoch time at `gpus` on `nodes` by part: compute (what divides),
        floor (strong form: what does not divide; NaN in the weak form, which has none) and
        communication (what only more ranks bring)."""
        parts = {"compute": ("compute",), "floor": ("floor",), "communication": COMMUNICATION}
        split = {part: float(self._x(gpus, nodes, terms) @ self.params) for part, terms in parts.items()}
        if "floor" not in self.terms:
            split["floor"] = math.nan
        return split

    def efficiency(self, gpus: int, nodes: int, base_gpus: int, base_nodes: int) -> tuple[float, float, float]:
        """Fitted parallel efficiency base_gpus * t(base) / (gpus * t(gpus)), delta-method 95% interval."""
        xb, xn = self._x(base_gpus, base_nodes), self._x(gpus, nodes)
        tb, tn = float(xb @ self.params), float(xn @ self.params)
        scale = base_gpus / gpus
        value = scale * tb / tn
        gradient = scale * (xb / tn - tb * xn / tn**2)
        half = self._quantile() * math.sqrt(float(gradient @ self.cov @ gradient))
        return value, value - half, value + half

    def nodes_for(self, gpus: int) -> int:
        """Nodes a cell of `gpus` spans: measured, else from the GPUs per node, else one."""
        measured = self.points.loc[self.points["gpus"] == gpus, "nodes"]
        if len(measured):
            return int(measured.max())
        return math.ceil(gpus / self.per_node) if self.per_node else 1


@dataclass(frozen=True)
class Refused:
    """A series the model does not fit, and why (goes into scaling.csv's model_note)."""

    reason: str


def cell_nodes(cells: pd.DataFrame, per_node: int | None) -> pd.Series:
    """Nodes of each cell: its recorded `nodes`, else ceil(gpus / per_node), else one."""
    recorded = cells["nodes"] if "nodes" in cells else pd.Series(pd.NA, index=cells.index)
    recorded = pd.to_numeric(recorded, errors="coerce")
    guess = np.ceil(cells["gpus"].astype(float) / per_node) if per_node else pd.Series(1.0, index=cells.index)
    return recorded.fillna(guess).astype(int)


def infer_per_node(cells: pd.DataFrame, per_node: int | None) -> int | None:
    """GPUs per node: as given, or from a cell that spans nodes (the ranks spread evenly)."""
    if per_node:
        return int(per_node)
    spanning = cells[cells["nodes"] > 1]
    if len(spanning):
        row = spanning.iloc[0]
        return int(row["gpus"]) // int(row["nodes"])
    return None


def fit_series(cells: pd.DataFrame, per_node: int | None = None) -> Fit | Refused:
    """Fit the model of its scaling to one series' cells (columns gpus, steady_epoch_s, status;
    nodes and scaling optional: one node, weak)."""
    form = series_form(cells)
    if form is None:
        return Refused("cells of both weak and strong scaling in one series: no single form fits them")
    good = usable_cells(cells)
    if good.empty:
        return Refused("no cell with status ok and an epoch time")
    good["nodes"] = cell_nodes(good, per_node)
    per_node = infer_per_node(good, per_node)
    points = (
        good.groupby(["gpus", "nodes"], as_index=False)
        .agg(seeds=(METRIC, "size"), mean_s=(METRIC, "mean"))
        .sort_values(["gpus", "nodes"], ignore_index=True)
    )
    terms, notes = model_terms(points, form)
    refused = unfittable(points, terms, form)
    if refused is not None:
        return refused

    # One row per cell (seed), weighted by its point's mean: relative errors.
    merged = good.merge(points, on=["gpus", "nodes"])
    x = regressors(merged["gpus"], merged["nodes"], terms, form)
    y = merged[METRIC].to_numpy(float)
    w = 1 / merged["mean_s"].to_numpy(float) ** 2
    communication, why = measured_communication(good)
    if communication == "measured":
        x, y, w = split_rows(x, y, w, merged[MEASURED].to_numpy(float), terms)
    notes.append(why)
    params, cov, dof = weighted_least_squares(x, y, w)

    points["fit_s"] = regressors(points["gpus"], points["nodes"], terms, form) @ params
    points["residual"] = points["mean_s"] / points["fit_s"] - 1
    total = merged[METRIC].to_numpy(float)
    poor, note = judge(points, merged, total, 1 / merged["mean_s"].to_numpy(float) ** 2, len(terms))
    if dof == 0:
        notes.append("one seed per point and as many points as parameters: no uncertainty")
    return with_signs_judged(Fit(terms, params, cov, dof, points, poor, note, per_node, notes, form, communication))


def unfittable(points: pd.DataFrame, terms: tuple[str, ...], form: str) -> Refused | None:
    """Why the measured points cannot fit `terms` in `form` (nothing is extrapolated then), or None."""
    if not (points["gpus"] > 1).any():
        return Refused("only single-GPU cells: no communication to model")
    if len(points) < len(terms):
        return Refused(
            f"{len(points)} distinct (GPUs, nodes) point(s) for {len(terms)} parameters ({', '.join(terms)}): "
            "too few to fit, nothing is extrapolated"
        )
    design = regressors(points["gpus"], points["nodes"], terms, form)
    if np.linalg.matrix_rank(design) < len(terms):
        return Refused(f"the measured points do not separate the terms {', '.join(terms)}")
    return None


def weighted_least_squares(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """The parameters of y ~ x with weights w, their covariance (NaN without a residual degree of
    freedom) and the residual degrees of freedom."""
    xtwx = x.T @ (w[:, None] * x)
    params = np.linalg.solve(xtwx, x.T @ (w * y))
    ss_res = float(np.sum(w * (y - x @ params) ** 2))
    dof = len(y) - x.shape[1]
    sigma2 = ss_res / dof if dof > 0 else math.nan
    return params, sigma2 * np.linalg.inv(xtwx), dof


def with_signs_judged(fit: Fit) -> Fit:
    """`fit`, judged poor where a term is below zero beyond its interval: a time cannot be negative,
    so the form is wrong (but for the strong form's compute, a finding noted in fit.notes)."""
    below = [t for t in fit.terms if fit.parameter(t)[2] < 0 or (fit.dof == 0 and fit.parameter(t)[0] < 0)]
    if fit.form == "strong" and "compute" in below:
        # compute is net of the allreduce's bandwidth here (docstring): below zero is a finding, not an error
        below.remove("compute")
        fit.notes.append(
            "compute net of the allreduce's bandwidth is below zero: more GPUs add more allreduce than compute they divide"
        )
    if below:
        return replace(fit, poor=True, note=f"{fit.note}; negative beyond its interval: {', '.join(below)}")
    return fit


def measured_communication(cells: pd.DataFrame) -> tuple[str, str]:
    """'measured' where every cell of the series has the step split's exposed communication, else
    'inferred' (from the fit across GPU counts); and a sentence for the note."""
    values = pd.to_numeric(cells[MEASURED], errors="coerce") if MEASURED in cells else pd.Series(dtype=float)
    if len(values) and values.notna().all():
        return "measured", "communication measured: the cells' exposed communication (step split), fitted apart"
    missing = int(values.isna().sum()) if len(values) else len(cells)
    return "inferred", f"communication inferred from the fit ({missing} of {len(cells)} cells have no step split)"


def split_rows(x: np.ndarray, y: np.ndarray, w: np.ndarray, comm: np.ndarray, terms: tuple[str, ...]) -> tuple:
    """The rows of the measured fit: per cell, its epoch less its communication against the compute
    terms, and its communication against the communication terms (the same weight for both)."""
    is_comm = np.array([term in COMMUNICATION for term in terms])
    compute_rows, comm_rows = x * ~is_comm, x * is_comm
    return np.vstack([compute_rows, comm_rows]), np.concatenate([y - comm, comm]), np.concatenate([w, w])


def usable_cells(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells the model uses: status ok with an epoch time, GPU counts as integers."""
    good = cells[cells["status"].eq("ok") & cells[METRIC].notna() & (cells[METRIC] > 0)].copy()
    good["gpus"] = good["gpus"].astype(int)
    return good


def model_terms(points: pd.DataFrame, form: str) -> tuple[tuple[str, ...], list[str]]:
    """The terms the measured points can tell apart in `form`, and notes on those folded away."""
    multi = points["gpus"] > 1
    terms, notes = ["compute", "floor"] if form == "strong" else ["compute"], []
    if multi.any():
        if form == "weak":
            terms.append("bandwidth")
        if (~multi).any():
            terms.insert(1 if form == "weak" else 2, "latency")
        else:
            into = "compute" if form == "weak" else "the per-step floor"
            notes.append(f"no 1-GPU cell: the allreduce latency cannot be told from {into} and is folded into it")
    if (points["nodes"] > 1).any():
        terms.append("node_step")
    return tuple(terms), notes


def judge(points: pd.DataFrame, merged: pd.DataFrame, y: np.ndarray, w: np.ndarray, p: int) -> tuple[bool, str]:
    """(poor, a sentence): how far the point means are off, and the lack-of-fit test where it can be made."""
    m, n = len(points), len(y)
    worst = float(points["residual"].abs().max())
    text = f"largest residual {worst:.1%}"
    if m == p:
        return False, f"{text}; as many points as parameters: the fit passes through the means, quality not judged"
    far = worst > POOR_RESIDUAL
    if n == m:  # one seed everywhere: no scatter to compare the lack of fit with
        return far, f"{text}; one seed per point, no lack-of-fit test"
    ss_pure = float(np.sum(w * (y - merged["mean_s"].to_numpy(float)) ** 2))
    ss_lack = float(np.sum(points["seeds"] / points["mean_s"] ** 2 * (points["mean_s"] - points["fit_s"]) ** 2))
    if ss_pure == 0:
        p_value = 0.0 if ss_lack > 0 else 1.0
    else:
        f_stat = (ss_lack / (m - p)) / (ss_pure / (n - m))
        p_value = float(f_tail(f_stat, m - p, n - m))
    return far and p_value < POOR_P, f"{text}; lack-of-fit test p = {p_value:.3g}"


@dataclass(frozen=True)
class Backtest:
    """The refit without the largest GPU count, its prediction there and the measurement."""

    gpus: int
    predicted_epoch_s: float
    predicted_efficiency: tuple[float, float, float]
    measured_epoch_s: float
    measured_efficiency: float
    note: str

    @property
    def error(self) -> float:
        return self.predicted_efficiency[0] - self.measured_efficiency

    def sentence(self) -> str:
        """'back-test at 8 GPUs: predicted 0.80, measured 0.78 (error +0.02)' for notes and labels."""
        return (
            f"back-test at {self.gpus} GPUs: predicted {self.predicted_efficiency[0]:.2f}, "
            f"measured {self.measured_efficiency:.2f} (error {self.error:+.2f})"
        )


def backtest(cells: pd.DataFrame, fit: Fit | Refused, per_node: int | None = None) -> Backtest | Refused:
    """Refit `cells` (one series) without its largest GPU count and predict that count's efficiency
    against the measured one; Refused with the reason where the series or its shorter self is not fitted."""
    if isinstance(fit, Refused):
        return Refused(f"not back-tested: the series is not fitted ({fit.reason})")
    largest = int(fit.points["gpus"].max())
    shorter = fit_series(cells[pd.to_numeric(cells["gpus"]) < largest], per_node)
    if isinstance(shorter, Refused):
        return Refused(f"too short to back-test: without its largest GPU count ({largest}), {shorter.reason}")
    held = fit.points[fit.points["gpus"] == largest]
    nodes = int(held["nodes"].max())
    base = fit.points.iloc[0]  # the smallest GPU count, as for the prediction and in scaling.csv
    measured_s = float((held["mean_s"] * held["seeds"]).sum() / held["seeds"].sum())
    measured = float(base["gpus"] * base["mean_s"] / (largest * measured_s))
    notes = list(shorter.notes)
    if nodes > 1 and "node_step" not in shorter.terms:
        notes.append(f"{largest} GPUs span {nodes} nodes and no smaller cell did: node step unknown, left out")
    if shorter.dof == 0:
        notes.append("the shorter fit has no degrees of freedom left: no interval")
    return Backtest(
        gpus=largest,
        predicted_epoch_s=shorter.epoch_time(largest, nodes)[0],
        predicted_efficiency=shorter.efficiency(largest, nodes, int(base["gpus"]), int(base["nodes"])),
        measured_epoch_s=measured_s,
        measured_efficiency=measured,
        note="; ".join(notes),
    )


def backtest_columns(test: Backtest | Refused) -> dict:
    """scaling.csv's backtest_ columns (empty, with the reason, where the series is not back-tested)."""
    row: dict = dict.fromkeys(BACKTEST_COLUMNS, math.nan)
    if isinstance(test, Refused):
        return row | {"backtest_note": test.reason}
    row |= {
        "backtest_gpus": test.gpus,
        "backtest_predicted_epoch_s": test.predicted_epoch_s,
        "backtest_measured_epoch_s": test.measured_epoch_s,
        "backtest_measured_efficiency": test.measured_efficiency,
        "backtest_error": test.error,
        "backtest_note": test.sentence() + (f"; {test.note}" if test.note else ""),
    }
    for suffix, value in zip(("", "_lo", "_hi"), test.predicted_efficiency):
        row[f"backtest_predicted_efficiency{suffix}"] = value
    return row


def series_columns(fit: Fit | Refused, test: Backtest | Refused | None = None) -> dict:
    """The per-series model columns of scaling.csv (empty, with the reason, for a refused series);
    `test`: the series' back-test, whose error the note puts beside the prediction."""
    row: dict = dict.fromkeys(MODEL_SERIES_COLUMNS, math.nan)
    if test is not None:
        row |= backtest_columns(test)
    if isinstance(fit, Refused):
        return row | {"model_status": "refused", "model_note": fit.reason, "model_poor_fit": pd.NA}
    row |= {
        "model_status": "fitted",
        "model_form": fit.form,
        "model_communication": fit.communication,
        "model_terms": " + ".join(fit.terms),
        "model_points": len(fit.points),
    }
    for term in TERMS:
        for suffix, value in zip(("", "_lo", "_hi"), fit.parameter(term)):
            row[f"model_{term}_s{suffix}"] = value
    largest = int(fit.points["gpus"].max())
    gpus = 2 * largest
    nodes = fit.nodes_for(gpus)
    notes = [*fit.notes, fit.note]
    if fit.poor:
        notes.insert(0, "POOR FIT: the model does not describe the measured points; treat the prediction with care")
    if nodes > 1 and "node_step" not in fit.terms:
        notes.append(f"prediction at {gpus} GPUs spans {nodes} nodes, which no cell did: node step unknown, left out")
    elif fit.per_node is None:
        notes.append(f"GPUs per node unknown: the prediction at {gpus} GPUs assumes one node")
    if isinstance(test, Backtest):
        notes.append(test.sentence())
    base = fit.points.iloc[0]
    row |= {
        "model_poor_fit": fit.poor,
        "model_note": "; ".join(notes),
        "model_predicted_gpus": gpus,
        "model_predicted_nodes": nodes,
    }
    for suffix, value in zip(("", "_lo", "_hi"), fit.epoch_time(gpus, nodes)):
        row[f"model_predicted_epoch_s{suffix}"] = value
    efficiency = fit.efficiency(gpus, nodes, int(base["gpus"]), int(base["nodes"]))
    for suffix, value in zip(("", "_lo", "_hi"), efficiency):
        row[f"model_predicted_efficiency{suffix}"] = value
    return row


def row_columns(fit: Fit | Refused, gpus: int) -> dict:
    """The per-row model columns: the fit, its band and split at this GPU count, and the residual."""
    row = dict.fromkeys(MODEL_ROW_COLUMNS, math.nan)
    if isinstance(fit, Refused):
        return row
    nodes = fit.nodes_for(gpus)
    value, lo, hi = fit.epoch_time(gpus, nodes)
    split = fit.split(gpus, nodes)
    measured = fit.points[fit.points["gpus"] == gpus]
    residual = float(measured["mean_s"].sum() / measured["fit_s"].sum() - 1) if len(measured) else math.nan
    return row | {
        "model_epoch_s": value,
        "model_epoch_s_lo": lo,
        "model_epoch_s_hi": hi,
        "model_compute_epoch_s": split["compute"],
        "model_floor_epoch_s": split["floor"],
        "model_communication_epoch_s": split["communication"],
        "model_residual": residual,
    }


def backtests(runs: pd.DataFrame, per_node: int | None = None) -> dict[tuple, tuple[Fit | Refused, Backtest | Refused]]:
    """Every series of `runs`: its fit and its back-test."""
    found = {}
    for key, group in runs.groupby(GROUP, sort=True, dropna=False):
        fit = fit_series(group, per_node)
        found[key] = (fit, backtest(group, fit, per_node))
    return found


def curve(fit: Fit, gpus_max: int | None = None) -> pd.DataFrame:
    """The fit on every GPU count from the smallest measured to `gpus_max` (default: the prediction's):
    epoch time, band, compute, floor (strong form) and communication, for the report's figure."""
    low = int(fit.points["gpus"].min())
    high = gpus_max or 2 * int(fit.points["gpus"].max())
    rows = []
    for gpus in range(low, high + 1):
        nodes = fit.nodes_for(gpus)
        value, lo, hi = fit.epoch_time(gpus, nodes)
        split = fit.split(gpus, nodes)
        rows.append(
            {"gpus": gpus, "nodes": nodes, "epoch_s": value, "lo": lo, "hi": hi}
            | {"compute_s": split["compute"], "floor_s": split["floor"], "communication_s": split["communication"]}
        )
    return pd.DataFrame(rows)
