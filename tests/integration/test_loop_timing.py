"""The epoch clock is read only after the device has finished its queued work, at both ends."""

from __future__ import annotations

import re

import pytest
from conftest import rank_in_process
from scalebench.train import loop

ENVIRONMENT = "torch"

pytestmark = pytest.mark.integration


def test_every_epoch_clock_read_follows_a_device_synchronisation(prepared_data, tmp_path, monkeypatch):
    built = rank_in_process("torch", "native", prepared_data, tmp_path, epochs=2, predictions=0)
    events: list[str] = []
    synchronize, train_step, clock = built.device.synchronize, built.steps.train, loop.time.perf_counter

    def spy_synchronize():
        events.append("sync")
        synchronize()

    def spy_step(batch, part):
        events.append("step")
        train_step(batch, part)

    def spy_clock():
        events.append("clock")
        return clock()

    monkeypatch.setattr(built.device, "synchronize", spy_synchronize)
    monkeypatch.setattr(built.steps, "train", spy_step)
    monkeypatch.setattr(loop.time, "perf_counter", spy_clock)
    try:
        assert built.train() == "ok"
    finally:
        built.backend.shutdown()
    trace = "".join({"sync": "y", "clock": "c", "step": "s"}[e] for e in events)
    # an epoch: sync, start clock, (two clock reads around each batch's wait, step and the clock
    # reads of its step split's marks and timed collectives)..., the last wait, sync, end clock;
    # without either synchronisation no epoch matches
    assert len(re.findall(r"yc(?:ccsc*)+ccyc", trace)) == 2, trace
