"""The critical path of an epoch from its per-rank rows: a straggler is imbalance, never communication."""

from __future__ import annotations

import math

import pytest
from scalebench.timing import step_split

pytestmark = pytest.mark.unit


def rank(number: int, compute: float, comm: float, wait: float = 0.01, rest: float = 0.005) -> dict:
    return {
        "rank": number,
        "host": f"n{number}",
        "epoch_time_s": compute + comm + wait + rest,
        "compute_s": compute,
        "comm_exposed_s": comm,
        "data_wait_s": wait,
        "rest_s": rest,
    }


def path(*ranks: dict) -> dict:
    return step_split.critical_path({"epoch_time_s": max(r["epoch_time_s"] for r in ranks), "ranks": list(ranks)})


def test_the_issue_s_two_rank_straggler_is_imbalance_and_its_peer_s_wait_is_not_communication():
    # rank 0 computed 0.249 s of its epoch, rank 1 0.083 s and then waited 0.244 s inside its reduction
    # for rank 0: the median rank's split called 47% of the epoch communication
    found = path(rank(0, 0.249, 0.078), rank(1, 0.083, 0.244))
    assert found["critical_rank"] == 0
    assert found["compute_typical_s"] == pytest.approx(0.083)  # the other rank's
    assert found["imbalance_s"] == pytest.approx(0.249 - 0.083)
    assert found["comm_exposed_critical_s"] == pytest.approx(0.078)  # what rank 0 itself waited for
    parts = sum(found[name] for name in step_split.CRITICAL_PATH)
    assert parts == pytest.approx(max(0.249 + 0.078, 0.083 + 0.244) + 0.015)


def test_one_slow_rank_among_three_is_imbalance_at_the_typical_rank_s_compute():
    found = path(rank(0, 1.0, 0.45), rank(1, 1.4, 0.05), rank(2, 1.02, 0.43))
    assert found["critical_rank"] == 1
    assert found["compute_typical_s"] == pytest.approx(1.01)  # the median of ranks 0 and 2
    assert found["imbalance_s"] == pytest.approx(0.39)
    assert found["comm_exposed_critical_s"] == pytest.approx(0.05)


def test_the_critical_rank_is_the_last_to_arrive_also_when_its_loader_made_it_late():
    # rank 1 computes like rank 0 but waits 0.3 s for data: the others wait for it in the reduction
    found = path(rank(0, 1.0, 0.32, wait=0.01), rank(1, 1.0, 0.02, wait=0.31))
    assert found["critical_rank"] == 1
    assert (found["imbalance_s"], found["data_wait_critical_s"]) == pytest.approx((0.0, 0.31))
    assert found["comm_exposed_critical_s"] == pytest.approx(0.02)


def test_one_rank_is_its_own_typical_rank():
    found = path(rank(0, 0.8, 0.0))
    assert (found["compute_typical_s"], found["imbalance_s"], found["critical_rank"]) == pytest.approx((0.8, 0.0, 0))


def test_an_epoch_without_per_rank_rows_or_with_an_unmeasured_rank_has_no_critical_path():
    assert all(math.isnan(v) for v in step_split.critical_path({"epoch_time_s": 1.0, "ranks": None}).values())
    broken = {"epoch_time_s": 1.0, "ranks": [rank(0, 0.5, 0.1), {**rank(1, 0.5, 0.1), "compute_s": None}]}
    assert all(math.isnan(v) for v in step_split.critical_path(broken).values())
