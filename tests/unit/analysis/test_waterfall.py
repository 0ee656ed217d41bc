"""The loss waterfall on hand-made runs whose answer is known: ideal + terms = measured, each cause
in its own term, and what cannot be split left out with the reason."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from scalebench.analysis import waterfall
from scalebench.analysis.scaling import t_interval
from scalebench.records.tables import WATERFALL
from scalebench.timing.step_split import CRITICAL_PATH

pytestmark = pytest.mark.unit


def cell(backend: str, gpus: int, seed: int, parts: tuple, status: str = "ok", **extra) -> dict:
    """parts: the critical path (typical compute, imbalance, exposed comm, data wait, rest) of its steady epoch."""
    epoch = sum(parts) if not any(isinstance(p, float) and math.isnan(p) for p in parts) else 1.0
    return {
        "source": "scalebench",
        "framework": "torch",
        "backend": backend,
        "variant": "",
        "gpus": gpus,
        "seed": seed,
        "status": status,
        "train_time_s": 10 * epoch,
        "steady_epoch_s": epoch,
        **dict(zip(CRITICAL_PATH, parts, strict=True)),
        **extra,
    }


def terms(table: pd.DataFrame, gpus: int, backend: str = "native") -> dict:
    rows = table[(table["gpus"] == gpus) & (table["backend"] == backend)]
    return rows.set_index("term")["seconds"].to_dict()


def test_each_cause_lands_in_its_own_term_and_they_add_up_to_the_measured_time():
    runs = pd.DataFrame(
        [
            cell("native", 1, 1, (8.0, 0.0, 0.0, 0.4, 0.2)),
            cell("native", 1, 2, (8.2, 0.0, 0.0, 0.4, 0.2)),
            # 2 GPUs: half the compute plus 0.3 s of growth, a 0.5 s straggler, 1.0 s of network
            cell("native", 2, 1, (4.35, 0.5, 1.0, 0.25, 0.1)),
            cell("native", 2, 2, (4.45, 0.5, 1.2, 0.15, 0.1)),
        ]
    )
    table = waterfall.waterfall(runs)
    found = terms(table, 2)
    assert found["ideal"] == pytest.approx((8.6 + 8.8) / 2 / 2)
    assert found["compute_growth"] == pytest.approx(4.4 - 8.1 / 2)
    assert found["imbalance"] == pytest.approx(0.5)
    assert found["exposed_comm"] == pytest.approx(1.1)
    assert found["data_wait"] == pytest.approx(0.2 - 0.2)
    assert found["rest"] == pytest.approx(0.1 - 0.1)
    assert found["measured"] == pytest.approx((6.2 + 6.4) / 2)
    assert found["ideal"] + sum(found[t] for t in waterfall.PARTS) == pytest.approx(found["measured"])
    rows = table[table["gpus"] == 2].set_index("term")
    assert rows.loc["exposed_comm", "share"] == pytest.approx(1.1 / found["measured"])
    assert (rows.loc["exposed_comm", "low"], rows.loc["exposed_comm", "high"]) == pytest.approx(
        t_interval([1.0, 1.2])[1:]
    )
    assert set(rows["seeds"]) == {2} and set(rows["base_gpus"]) == {1} and (rows["reason"] == "").all()
    assert waterfall.largest_term(table[table["gpus"] == 2])["term"] == "exposed_comm"
    assert 1 not in set(table["gpus"])  # the base count explains nothing


def test_fixed_step_epochs_have_the_base_s_epoch_as_their_ideal():
    runs = pd.DataFrame(
        [
            cell("native", 1, 1, (8.0, 0.0, 0.0, 0.0, 0.0), steps_per_epoch=20, global_batch=8),
            cell("native", 4, 1, (8.0, 0.2, 1.0, 0.0, 0.0), steps_per_epoch=20, global_batch=32),
        ]
    )
    found = terms(waterfall.waterfall(runs), 4)
    assert found["ideal"] == pytest.approx(8.0) and found["compute_growth"] == pytest.approx(0.0)


def test_cells_without_a_critical_path_are_left_out_with_the_reason():
    nan = math.nan
    runs = pd.DataFrame(
        [
            cell("native", 1, 1, (8.0, 0.0, 0.0, 0.4, 0.2)),
            cell("native", 2, 1, (nan,) * 5),  # recorded before the step split
            cell("horovod", 1, 1, (nan,) * 5),
            cell("horovod", 2, 1, (4.0, 0.0, 1.0, 0.2, 0.1)),
            cell("fsdp", 2, 1, (4.0, 0.0, 1.0, 0.2, 0.1), status="failed"),
        ]
    )
    table = waterfall.waterfall(runs)
    native, horovod = table[table["backend"] == "native"], table[table["backend"] == "horovod"]
    assert native["seconds"].isna().all() and native["reason"].str.contains("its cells have no per-rank").all()
    assert horovod["seconds"].isna().all() and horovod["reason"].str.contains(r"its base \(1 GPUs\)").all()
    assert "fsdp" not in set(table["backend"])  # no usable cell: nothing to explain
    assert waterfall.largest_term(native) is None


def test_a_study_of_one_gpu_count_has_no_waterfall():
    runs = pd.DataFrame([cell("native", 2, 1, (4.0, 0.0, 1.0, 0.2, 0.1)), cell("native", 2, 2, (4.1, 0, 1, 0.2, 0.1))])
    table = waterfall.waterfall(runs)
    assert table.empty and list(table.columns) == WATERFALL.names
