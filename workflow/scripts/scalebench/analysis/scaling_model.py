"""A model of the steady-state epoch time against GPUs, fitted per (source, framework, backend).

Why it has this form. The study scales weakly: every rank trains on the same batch per GPU,
so a step's compute is the same at every world size. The training set, however, is fixed
and sharded over the ranks, so an epoch has about 1/N of the one-rank steps on N ranks.
Per step, a ring allreduce costs a latency and a bandwidth term that grows as (N-1)/N,
plus a step when the ranks span more than one node (the inter-node link is slower):

    step(N)  = c + [N > 1] (alpha + beta (N-1)/N) + [nodes > 1] gamma
    epoch(N) = steps(1) / N * step(N)

Written with the one-rank epoch's step count folded into the parameters (all in seconds
of a one-rank epoch's worth of steps), the model is linear in them:

    epoch(N) = compute / N  +  (latency [N > 1] + bandwidth (N-1)/N + node_step [nodes > 1]) / N
               `- compute -'   `------------------------ communication ------------------------'

so the compute term divides across ranks and the split of a fitted epoch time into compute
and communication is read off the terms. (Padding shards to whole batches makes steps(N)
slightly more than steps(1)/N for uneven shards: that small excess shows in the residuals.)

Fit: weighted least squares on every usable cell (status ok, epoch time > 0), one row per
seed, each weighted by 1 / (mean epoch time at its GPU count)^2, i.e. relative errors, since
the times span an order of magnitude or more. The parameter covariance is the residual
variance over the cells (the seeds' scatter plus any lack of fit) times (X'WX)^-1; 95%
t-intervals with n - p degrees of freedom. Terms are used only where the cells can tell
them apart: latency needs a one-GPU cell beside multi-GPU ones (without one it cannot be told
from compute and is folded into it: fsdp starts at two ranks), the node step needs a cell
that spans nodes. A series with fewer distinct (GPUs, nodes) points than terms is refused
(empty fields with a reason), never extrapolated.

Poor fit: a term comes out negative beyond its interval (no time is negative), or a point's mean is off the fit by more than POOR_RESIDUAL (relative) and, where
seeds repeat at some point and there are more points than terms, the lack-of-fit F-test
(lack of fit against the seeds' own scatter) rejects at POOR_P. With as many points as
terms the fit passes through the means and its quality cannot be judged (said so).

Prediction: the epoch time and the parallel efficiency at twice the largest measured GPU
count, relative to the series' smallest measured count as in scaling.csv, both from the
model (delta-method interval). It is a prediction, not a measurement: where it would cross
a node boundary the cells never crossed, the node step is unknown and left out, which the
note says (the time is then a lower bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

# one series per backend and variant of the optional axes ('' without them)
GROUP = ["source", "framework", "backend", "variant"]
METRIC = "steady_epoch_s"
LEVEL = 0.95
POOR_RESIDUAL = 0.05  # a point mean more than 5% off the fit
POOR_P = 0.01  # and a lack-of-fit F-test this unlikely under seed scatter alone
TERMS = ("compute", "latency", "bandwidth", "node_step")


def regressors(gpus: np.ndarray, nodes: np.ndarray, terms: tuple[str, ...]) -> np.ndarray:
    """The design matrix of epoch(N): one column per term, one row per (gpus, nodes)."""
    gpus = np.asarray(gpus, dtype=float)
    nodes = np.asarray(nodes, dtype=float)
    columns = {
        "compute": 1 / gpus,
        "latency": (gpus > 1) / gpus,
        "bandwidth": (gpus - 1) / gpus**2,
        "node_step": (nodes > 1) / gpus,
    }
    return np.column_stack([columns[t] for t in terms])


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

    def parameter(self, term: str) -> tuple[float, float, float]:
        """Value and 95% interval of a term (NaN if the model has no such term)."""
        if term not in self.terms:
            return math.nan, math.nan, math.nan
        i = self.terms.index(term)
        half = self._quantile() * math.sqrt(self.cov[i, i])
        return float(self.params[i]), float(self.params[i] - half), float(self.params[i] + half)

    def _quantile(self) -> float:
        return stats.t.ppf(0.5 + LEVEL / 2, self.dof) if self.dof > 0 else math.nan

    def _x(self, gpus: int, nodes: int, only: tuple[str, ...] | None = None) -> np.ndarray:
        x = regressors(np.array([gpus]), np.array([nodes]), self.terms)[0]
        if only is not None:
            x = x * np.array([t in only for t in self.terms])
        return x

    def epoch_time(self, gpus: int, nodes: int) -> tuple[float, float, float]:
        """Fitted epoch time at `gpus` on `nodes`, with its 95% band."""
        x = self._x(gpus, nodes)
        value = float(x @ self.params)
        half = self._quantile() * math.sqrt(float(x @ self.cov @ x))
        return value, value - half, value + half

    def split(self, gpus: int, nodes: int) -> tuple[float, float]:
        """(compute, communication) seconds of the fitted epoch time at `gpus` on `nodes`."""
        compute = float(self._x(gpus, nodes, ("compute",)) @ self.params)
        return compute, float(self._x(gpus, nodes) @ self.params) - compute

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
    """Fit the model to one series' cells (columns gpus, steady_epoch_s, status; nodes optional)."""
    good = cells[cells["status"].eq("ok") & cells[METRIC].notna() & (cells[METRIC] > 0)].copy()
    if good.empty:
        return Refused("no cell with status ok and an epoch time")
    good["gpus"] = good["gpus"].astype(int)
    good["nodes"] = cell_nodes(good, per_node)
    per_node = infer_per_node(good, per_node)
    points = (
        good.groupby(["gpus", "nodes"], as_index=False)
        .agg(seeds=(METRIC, "size"), mean_s=(METRIC, "mean"))
        .sort_values(["gpus", "nodes"], ignore_index=True)
    )

    terms, notes = ["compute"], []
    multi = points["gpus"] > 1
    if multi.any():
        terms.append("bandwidth")
        if (~multi).any():
            terms.insert(1, "latency")
        else:
            notes.append("no 1-GPU cell: the allreduce latency cannot be told from compute and is folded into it")
    if (points["nodes"] > 1).any():
        terms.append("node_step")
    terms = tuple(terms)
    if not multi.any():
        return Refused("only single-GPU cells: no communication to model")
    if len(points) < len(terms):
        return Refused(
            f"{len(points)} distinct (GPUs, nodes) point(s) for {len(terms)} parameters ({', '.join(terms)}): "
            "too few to fit, nothing is extrapolated"
        )
    design = regressors(points["gpus"], points["nodes"], terms)
    if np.linalg.matrix_rank(design) < len(terms):
        return Refused(f"the measured points do not separate the terms {', '.join(terms)}")

    # One row per cell (seed), weighted by its point's mean: relative errors.
    merged = good.merge(points, on=["gpus", "nodes"])
    x = regressors(merged["gpus"], merged["nodes"], terms)
    y = merged[METRIC].to_numpy(float)
    w = 1 / merged["mean_s"].to_numpy(float) ** 2
    xtwx = x.T @ (w[:, None] * x)
    params = np.linalg.solve(xtwx, x.T @ (w * y))
    n, p = len(y), len(terms)
    ss_res = float(np.sum(w * (y - x @ params) ** 2))
    dof = n - p
    sigma2 = ss_res / dof if dof > 0 else math.nan
    cov = sigma2 * np.linalg.inv(xtwx)

    points["fit_s"] = design @ params
    points["residual"] = points["mean_s"] / points["fit_s"] - 1
    poor, note = judge(points, merged, y, w, p)
    if dof == 0:
        notes.append("one seed per point and as many points as parameters: no uncertainty")
    fit = Fit(terms, params, cov, dof, points, poor, note, per_node, notes)
    # A time cannot be negative: a term below zero beyond its interval means the form is wrong.
    negative = [t for t in terms if fit.parameter(t)[2] < 0 or (dof == 0 and fit.parameter(t)[0] < 0)]
    if negative:
        note = f"{note}; negative beyond its interval: {', '.join(negative)}"
        return Fit(terms, params, cov, dof, points, True, note, per_node, notes)
    return fit


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
        p_value = float(stats.f.sf(f_stat, m - p, n - m))
    return far and p_value < POOR_P, f"{text}; lack-of-fit test p = {p_value:.3g}"


# scaling.csv's model columns: per series (repeated on each of its rows), then per row.
PARAMETER_COLUMNS = [f"model_{t}_s{s}" for t in TERMS for s in ("", "_lo", "_hi")]
SERIES_COLUMNS = [
    "model_status",
    "model_terms",
    "model_points",
    *PARAMETER_COLUMNS,
    "model_poor_fit",
    "model_note",
    "model_predicted_gpus",
    "model_predicted_nodes",
    "model_predicted_epoch_s",
    "model_predicted_epoch_s_lo",
    "model_predicted_epoch_s_hi",
    "model_predicted_efficiency",
    "model_predicted_efficiency_lo",
    "model_predicted_efficiency_hi",
]
ROW_COLUMNS = [
    "model_epoch_s",
    "model_epoch_s_lo",
    "model_epoch_s_hi",
    "model_compute_epoch_s",
    "model_communication_epoch_s",
    "model_residual",
]
MODEL_COLUMNS = SERIES_COLUMNS + ROW_COLUMNS


def series_columns(fit: Fit | Refused) -> dict:
    """The per-series model columns of scaling.csv (empty, with the reason, for a refused series)."""
    row: dict = dict.fromkeys(SERIES_COLUMNS, math.nan)
    if isinstance(fit, Refused):
        return row | {"model_status": "refused", "model_note": fit.reason, "model_poor_fit": pd.NA}
    row |= {"model_status": "fitted", "model_terms": " + ".join(fit.terms), "model_points": len(fit.points)}
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
    row = dict.fromkeys(ROW_COLUMNS, math.nan)
    if isinstance(fit, Refused):
        return row
    nodes = fit.nodes_for(gpus)
    value, lo, hi = fit.epoch_time(gpus, nodes)
    compute, communication = fit.split(gpus, nodes)
    measured = fit.points[fit.points["gpus"] == gpus]
    residual = float(measured["mean_s"].sum() / measured["fit_s"].sum() - 1) if len(measured) else math.nan
    return row | {
        "model_epoch_s": value,
        "model_epoch_s_lo": lo,
        "model_epoch_s_hi": hi,
        "model_compute_epoch_s": compute,
        "model_communication_epoch_s": communication,
        "model_residual": residual,
    }


def fits(runs: pd.DataFrame, per_node: int | None = None) -> dict[tuple, Fit | Refused]:
    """The model of every (source, framework, backend, variant) series of `runs`."""
    return {key: fit_series(group, per_node) for key, group in runs.groupby(GROUP, sort=True, dropna=False)}


def curve(fit: Fit, gpus_max: int | None = None) -> pd.DataFrame:
    """The fit on every GPU count from the smallest measured to `gpus_max` (default: the prediction's):
    epoch time, band, compute and communication, for the report's figure."""
    low = int(fit.points["gpus"].min())
    high = gpus_max or 2 * int(fit.points["gpus"].max())
    rows = []
    for gpus in range(low, high + 1):
        nodes = fit.nodes_for(gpus)
        value, lo, hi = fit.epoch_time(gpus, nodes)
        compute, communication = fit.split(gpus, nodes)
        rows.append(
            {"gpus": gpus, "nodes": nodes, "epoch_s": value, "lo": lo, "hi": hi}
            | {"compute_s": compute, "communication_s": communication}
        )
    return pd.DataFrame(rows)
