"""The collective benchmark's own logic (train/collectives.py): the sizes and their order, nccl-tests'
formulas, and the budget's decisions, with an operation whose duration is set by the test on a clock
the test keeps (tests/integration/test_collectives.py times the backends' real collectives)."""

from __future__ import annotations

import numpy as np
import pytest
from scalebench.settings import CollectiveSettings
from scalebench.train import collectives


class Clock:
    """Time that passes only when an operation of the test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def bench(
    clock: Clock, seconds_per_byte: float, latency: float = 1e-4, fail_at: int | None = None
) -> collectives.Bench:
    """One all-reduce whose run takes latency + bytes x seconds_per_byte on the clock."""
    prepared = []

    def all_reduce(elements: int):
        nbytes = elements * collectives.ITEMSIZE
        if fail_at is not None and nbytes >= fail_at:
            raise MemoryError(f"cannot allocate {nbytes} bytes")
        prepared.append(nbytes)

        def run() -> None:
            clock.now += latency + nbytes * seconds_per_byte

        return run

    result = collectives.all_reduce_bench(all_reduce, 2, "test")
    result.fusion_bytes = 3 * 2**20
    result.prepared = prepared  # what the benchmark asked to allocate, for the test
    return result


def measure(source, settings: CollectiveSettings, clock: Clock, gradient: int = 1945636):
    return collectives.measure(source, settings, 2, 0, gradient, np.asarray, clock)


def test_nccl_tests_bus_factors():
    assert collectives.bandwidths("all_reduce", 10**9, 1.0, 8) == (1.0, pytest.approx(2 * 7 / 8))
    assert collectives.bandwidths("reduce_scatter", 10**9, 0.5, 4) == (2.0, pytest.approx(2 * 3 / 4))
    assert collectives.bandwidths("all_gather", 10**9, 0.5, 4)[1] == pytest.approx(1.5)
    assert collectives.bus_factor("reduce", 4) == collectives.bus_factor("broadcast", 4) == 1.0


def test_the_gradients_come_first_then_the_sweep_with_the_bucket_each_size_once_in_whole_elements():
    sizes = collectives.planned_sizes(64, 1945636, 16, ranks=2)
    assert sizes[0] == (1945640, "gradient")  # 486,409 elements rounded up to a multiple of the ranks
    assert sizes[1:] == [(8, "sweep"), (16, "bucket"), (32, "sweep"), (64, "sweep")]  # 4 and 8 bytes: one size
    assert collectives.sweep(100) == [4, 8, 16, 32, 64, 100]


def test_every_size_fits_a_generous_budget_and_its_latency_is_the_median():
    clock = Clock()
    result = measure(bench(clock, 1e-9), CollectiveSettings(60.0, 2**20, 5, 2), clock)
    assert result.reason == "" and all(row["iterations"] == 5 for row in result.rows)
    gradient = collectives.at_gradient(result.rows)
    assert gradient["latency_us"] == pytest.approx((1e-4 + 1945640e-9) * 1e6)
    assert gradient["busbw_gbps"] == pytest.approx(gradient["algbw_gbps"])  # two ranks: 2(n-1)/n = 1
    assert [row["size"] for row in result.rows].count("bucket") == 1


def test_a_short_budget_skips_the_sizes_that_would_not_fit_and_says_why():
    clock = Clock()
    # 1 GB/s: the sweep to 64 MiB would take over 1 s at 8 runs a size; the budget is 0.3 s
    result = measure(bench(clock, 1e-9), CollectiveSettings(0.3, 2**26, 6, 2), clock)
    measured = [row for row in result.rows if row["latency_us"] is not None]
    skipped = [row for row in result.rows if row["latency_us"] is None]
    assert measured and skipped and measured[0]["size"] == "gradient"
    assert max(row["bytes"] for row in measured) < min(row["bytes"] for row in skipped if row["size"] == "sweep")
    assert all("budget" in row["reason"] and "budget_s = 0.3 s" in row["reason"] for row in skipped)
    # within the budget, but for the one iteration that tells a size's time
    assert clock.now <= 0.3 + max(row["latency_us"] for row in measured) / 1e6
    assert result.seconds == pytest.approx(clock.now)


def test_a_size_with_room_for_fewer_iterations_records_how_many_ran():
    clock = Clock()
    # the gradients (1.9 ms a run) alone in a 10 ms budget: the first run, then what fits of the rest
    result = measure(bench(clock, 1e-9), CollectiveSettings(0.01, 4, 10, 1), clock)
    gradient = collectives.at_gradient(result.rows)
    assert gradient["iterations"] == 3 and gradient["latency_us"] is not None  # (10 ms - 2 ms) / 2 ms after the first


def test_nothing_is_measured_with_no_budget_and_nothing_is_allocated():
    clock = Clock()
    source = bench(clock, 1e-9)
    result = measure(source, CollectiveSettings(0.0, 2**20, 5, 2), clock)
    assert source.prepared == [8]  # the barrier: one float32 per rank, and nothing else
    assert all(row["latency_us"] is None and "budget is spent" in row["reason"] for row in result.rows)
    fields = collectives.run_fields(result, 2)["collectives"]
    assert fields["busbw_gbps"] is None and "budget_s = 0 s" in fields["reason"]


def test_a_size_that_cannot_be_prepared_ends_its_operation_with_the_reason():
    clock = Clock()
    result = measure(bench(clock, 1e-9, fail_at=2**10), CollectiveSettings(60.0, 2**20, 3, 1), clock)
    failed = collectives.at_gradient(result.rows)
    assert failed["latency_us"] is None and "MemoryError: cannot allocate 1945640 bytes" in failed["reason"]
    assert all("not measured: all_reduce failed at 1945640 bytes" == row["reason"] for row in result.rows[1:])


def test_a_backend_without_a_benchmark_says_why():
    result = measure("one replica: nothing to exchange", CollectiveSettings(5.0, 2**20, 3, 1), Clock())
    assert result.rows == [] and collectives.run_fields(result, 1)["collectives"]["reason"] == result.reason
