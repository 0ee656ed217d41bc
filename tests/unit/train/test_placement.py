"""training.loader.placement: the decision every rank of a cell takes alike, and its refusal."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scalebench.train import placement
from scalebench.train.placement import PlacementError, decide, local_figures

MIB = 2**20


def reduced(*ranks: tuple[int, int | None]) -> list[float]:
    """local_figures of every rank reduced by max, as the loop's allreduce_max does."""
    return np.max(np.array([local_figures(needed, free) for needed, free in ranks]), axis=0).tolist()


def test_auto_puts_samples_on_the_device_where_they_fit_in_the_share_of_free_memory():
    chosen = decide("auto", reduced((100 * MIB, 1000 * MIB)), 0.25, "cuda")
    assert (chosen.kind, chosen.device_bytes) == ("device", 100 * MIB)
    assert "fit in 0.25 of the 1,000.0 MiB free" in chosen.reason


def test_auto_keeps_samples_on_the_host_beyond_the_share_and_says_why():
    chosen = decide("auto", reduced((300 * MIB, 1000 * MIB)), 0.25, "cuda")
    assert (chosen.kind, chosen.device_bytes) == ("host", 0)
    assert "exceed 0.25 of the 1,000.0 MiB free" in chosen.reason and "device_memory_share" in chosen.reason


def test_a_mixed_node_decides_once_from_the_rank_with_the_least_free_memory():
    # rank 1's device has little free: every rank goes to the host, though rank 0's would fit
    figures = reduced((100 * MIB, 8000 * MIB), (120 * MIB, 300 * MIB))
    assert figures[0] == 120 * MIB and -figures[2] == 300 * MIB
    assert decide("auto", figures, 0.25, "cuda").kind == "host"
    assert decide("auto", reduced((100 * MIB, 8000 * MIB), (120 * MIB, 600 * MIB)), 0.25, "cuda").kind == "device"


def test_unknown_free_memory_on_any_rank_keeps_auto_on_the_host():
    chosen = decide("auto", reduced((1, 8000 * MIB), (1, None)), 0.25, "cuda")
    assert chosen.kind == "host" and "unknown" in chosen.reason
    assert decide("device", reduced((1, None)), 0.25, "cuda").kind == "device"  # asked for: not checked


def test_device_that_does_not_fit_is_refused_naming_the_key_the_bytes_and_the_free_memory():
    with pytest.raises(PlacementError) as refused:
        decide("device", reduced((900 * MIB, 8000 * MIB), (900 * MIB, 800 * MIB)), 0.25, "cuda")
    message = str(refused.value)
    assert "config key 'training.loader.placement'" in message
    assert f"({900 * MIB} bytes)" in message and f"({800 * MIB} bytes) free" in message
    # device ignores the share: it needs only to fit
    assert decide("device", reduced((700 * MIB, 800 * MIB)), 0.25, "cuda").kind == "device"


def test_host_needs_no_figures():
    assert decide("host", [0.0, 0.0, 0.0], 0.25, "cpu") == placement.DataPlacement(
        "host", 0, "training.loader.placement: host"
    )


def test_a_cpu_rank_has_its_share_of_the_nodes_available_memory(tmp_path):
    assert placement.host_free_bytes(1) > 0  # this machine's /proc/meminfo
    # the share, from one reading (the machine's own changes between two reads)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:         1000000 kB\nMemAvailable:   16000004 kB\n")
    one, four = placement.host_free_bytes(1, str(meminfo)), placement.host_free_bytes(4, str(meminfo))
    assert (one, four) == (16000004 * 1024, 16000004 * 1024 // 4)


def test_unknown_free_memory_reduces_to_minus_infinity_so_known_ones_still_count():
    assert local_figures(5, None) == [5.0, 1.0, -math.inf]
    assert local_figures(5, 7) == [5.0, 0.0, -7.0]


def test_a_sample_is_its_uint8_image_and_mask():
    assert placement.sample_bytes((768, 1024)) == 2 * 768 * 1024


def test_the_busiest_device_holds_its_replicas_samples_and_on_the_first_the_evaluated_ones():
    per_replica = [np.array([0, 1, 2]), np.array([3, 4, 5, 6])]
    size = placement.sample_bytes((16, 16))
    assert placement.busiest_device_bytes(per_replica, [], (16, 16)) == 4 * size
    # validation 7, test 8 and 2 (2 is a training sample there already): the first device holds 5
    assert placement.busiest_device_bytes(per_replica, [[7], [8, 2]], (16, 16)) == 5 * size
