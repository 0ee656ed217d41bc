"""The epoch clock is read only after the device has finished its queued work, at both ends."""

from __future__ import annotations

import re

import pytest
from conftest import cell_settings
from scalebench.settings import ProcessFacts, RunSettings
from scalebench.train import loop, rank_env
from scalebench.train.entry import cell_hash, create_framework

pytestmark = pytest.mark.integration


def test_every_epoch_clock_read_follows_a_device_synchronisation(prepared_data, tmp_path, monkeypatch):
    settings = cell_settings("torch", "native", 1, epochs=2, predictions=0)
    run = RunSettings.from_json(settings, prepared_data, tmp_path)
    framework = create_framework(run, ProcessFacts.of_rank(run, {}), rank_env.detect({}))
    events: list[str] = []
    synchronize, train_step, clock = framework.synchronize, framework.train_step, loop.time.perf_counter

    def spy_synchronize():
        events.append("sync")
        synchronize()

    def spy_step(batch, part):
        events.append("step")
        train_step(batch, part)

    def spy_clock():
        events.append("clock")
        return clock()

    monkeypatch.setattr(framework, "synchronize", spy_synchronize)
    monkeypatch.setattr(framework, "train_step", spy_step)
    monkeypatch.setattr(loop.time, "perf_counter", spy_clock)
    try:
        assert loop.TrainingLoop(run, framework, cell_hash(settings, prepared_data), clock()).train() == "ok"
    finally:
        framework.backend.shutdown()
    trace = "".join({"sync": "y", "clock": "c", "step": "s"}[e] for e in events)
    # an epoch: sync, start clock, (two clock reads around each batch's wait, step and the clock
    # reads of its step split's marks and timed collectives)..., the last wait, sync, end clock;
    # without either synchronisation no epoch matches
    assert len(re.findall(r"yc(?:ccsc*)+ccyc", trace)) == 2, trace
