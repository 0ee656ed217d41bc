"""The run order as it happened and the drift over it, on studies whose truth is known."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest
from scalebench.analysis import drift as analysis
from scalebench.analysis.host_findings import drift_sentences
from scalebench.analysis.ranks import ranks_frame
from scalebench.cell import OWN_SOURCE, Cell
from scalebench.config import run_order
from scalebench.records.tables import RANKS

ORDER = {"seed": 7, "blocks": False}
SEEDS = [1, 2, 3]
NO_RANKS = ranks_frame(pd.DataFrame(columns=RANKS.names))


def study(growth_per_hour: float = 0.0, noise: float = 0.01, hours: float = 10.0, seed: int = 0):
    """runs.csv of 4 configurations x 3 seeds started over `hours` in the drawn order; each cell's
    times grow by `growth_per_hour` of its configuration's own with the hours since the first start."""
    rng = np.random.default_rng(seed)
    cells = [Cell("torch", b, g, s) for b in ("native", "horovod") for g in (1, 2) for s in SEEDS]
    drawn = run_order.run_order(cells, ORDER, SEEDS)
    first = datetime(2030, 1, 1, 8, tzinfo=UTC)
    rows = []
    for place, cell in enumerate(drawn):
        at = hours * place / (len(drawn) - 1)
        base = {"native": 10.0, "horovod": 12.0}[cell.backend] / cell.gpus
        factor = (1 + growth_per_hour * at) * rng.lognormal(0, noise)
        rows.append(
            {
                "source": OWN_SOURCE,
                **cell.key(),
                "status": "ok",
                "start": (first + timedelta(hours=at)).isoformat(timespec="seconds"),
                "slurm_job_id": str(500 + place),
                "hosts": "n1,n2",
                "steady_epoch_s": base * factor,
                "compute_median_s": 0.8 * base * factor,
                "comm_exposed_median_s": 0.15 * base * factor,
                "data_wait_median_s": 0.05 * base * factor,
                "step_split_reason": None,
            }
        )
    entries = [{**cell.key(), "settings": {"cell": cell.to_json()}} for cell in cells]
    return pd.DataFrame(rows).sample(frac=1, random_state=1).reset_index(drop=True), entries


def test_the_order_table_lists_the_cells_as_they_started_with_their_drawn_places():
    runs, entries = study()
    order = analysis.order_table(runs, NO_RANKS, entries, ORDER, SEEDS)
    assert list(order["start_order"]) == list(range(1, 13)) and list(order["run_order"]) == list(range(1, 13))
    assert order["hours"].iloc[0] == 0 and order["hours"].iloc[-1] == pytest.approx(10.0)
    assert order["block"].isna().all()  # no blocks
    assert set(order["host_analysis"]) == {"no per-rank rows"}
    # a cell over the geometric mean of its configuration's seeds: the same times give 1, up to the noise
    assert order["residual_epoch"].to_numpy() == pytest.approx(1.0, abs=0.05)


def test_cells_that_started_at_the_same_second_are_ordered_by_job_and_those_that_never_did_last():
    runs, entries = study()
    runs["start"] = "2030-01-01T08:00:00+00:00"
    runs.loc[runs["seed"] == 3, ["start", "status"]] = [None, "missing"]
    order = analysis.order_table(runs, NO_RANKS, entries, {"seed": None, "blocks": True}, SEEDS)
    started = order[order["start"].notna()]
    assert list(started["slurm_job_id"].astype(int)) == sorted(started["slurm_job_id"].astype(int))
    assert list(order["start_order"]) == [*range(1, 9), *[pd.NA] * 4]
    assert order["run_order"].isna().all()  # order.seed null: Snakemake's own order, nothing drawn
    assert list(order["block"]) == list(order["seed"])  # seeds 1, 2, 3 are blocks 1, 2, 3


def test_later_cells_that_ran_slower_are_found_with_the_change_inside_the_interval():
    runs, entries = study(growth_per_hour=0.02)  # 20% over the study's 10 hours
    table = analysis.drift_table(analysis.order_table(runs, NO_RANKS, entries, ORDER, SEEDS), runs)
    epoch = table[table["measure"] == "epoch"].iloc[0]
    truth = 1 + 0.02 * 10  # the time a cell takes grows linearly; the fitted line of its logarithm nearly so
    assert epoch["cells"] == 12 and epoch["hours"] == pytest.approx(10.0)
    assert epoch["low"] > 1 and epoch["low"] < truth * 1.05 and epoch["high"] > truth * 0.95
    assert epoch["verdict"].startswith("later cells slower by") and epoch["verdict"].endswith(
        "over 10.0 hours, 12 cells"
    )
    assert drift_sentences(table)[0] == f"Drift: epoch: {epoch['verdict']}."


def test_noise_without_drift_shows_none_and_too_few_cells_say_so():
    runs, entries = study(noise=0.02)
    table = analysis.drift_table(analysis.order_table(runs, NO_RANKS, entries, ORDER, SEEDS), runs)
    assert table["verdict"].str.startswith("no drift the cells can show").all(), table["verdict"]
    assert drift_sentences(table)[0].startswith("No drift the cells can show: epoch time (")

    one_seed = runs[runs["seed"] == 1]
    table = analysis.drift_table(analysis.order_table(one_seed, NO_RANKS, entries, ORDER, SEEDS), one_seed)
    assert set(table["verdict"]) == {"too few cells to tell (0 in 0 configurations of several seeds; 3 needed)"}
    assert drift_sentences(table) == []
