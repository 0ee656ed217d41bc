"""Energy meters: RAPL from fake powercap files, NVML from a fake pynvml module.

The real counters cannot be read on the test machine (no powercap, no GPU), so these check
the arithmetic (wrap-around, millijoules, power integration, the sum across ranks) and that
every way of not measuring gives None with a reason, never 0.
"""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest
from scalebench.train import devices, energy


def rapl_zone(root, name, zone_name, energy_uj, max_range=1000):
    zone = root / name
    zone.mkdir(parents=True)
    (zone / "name").write_text(zone_name + "\n")
    (zone / "energy_uj").write_text(f"{energy_uj}\n")
    (zone / "max_energy_range_uj").write_text(f"{max_range}\n")
    return zone


def set_energy(zone, value):
    (zone / "energy_uj").write_text(f"{value}\n")


def test_rapl_sums_the_packages_and_leaves_out_their_subzones_and_psys(tmp_path):
    first = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 100)
    second = rapl_zone(tmp_path, "intel-rapl:1", "package-1", 200)
    core = rapl_zone(tmp_path, "intel-rapl:0:0", "core", 50)
    rapl_zone(tmp_path, "intel-rapl:2", "psys", 0)
    meter = energy.RaplMeter(tmp_path, poll_s=60)
    assert meter.available and meter.source == "rapl"
    meter.start()
    set_energy(first, 400)
    set_energy(second, 700)
    set_energy(core, 999)
    assert meter.stop() == (pytest.approx(800e-6), "")


def test_rapl_counts_through_a_wrap_around(tmp_path):
    zone = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 900, max_range=1000)
    meter = energy.RaplMeter(tmp_path, poll_s=60)
    meter.start()
    set_energy(zone, 150)  # 900 -> 1000 wraps to 0 -> 150: 250 microjoules
    assert meter.stop() == (pytest.approx(250e-6), "")
    assert energy.wrapped_delta(10, 30, 1000) == 20 and energy.wrapped_delta(990, 5, 1000) == 15


def test_rapl_counter_without_permission_is_empty_with_the_reason(tmp_path, monkeypatch):
    zone = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 100)
    (zone / "energy_uj").chmod(0o200)  # as Linux >= 5.10 leaves it for users other than root
    if os.geteuid() == 0:  # root reads it anyway: refuse the read as the kernel does a user's
        read_text = Path.read_text

        def refuse(path, *args, **kwargs):
            if path.name == "energy_uj":
                raise PermissionError(13, "Permission denied", str(path))
            return read_text(path, *args, **kwargs)

        monkeypatch.setattr(Path, "read_text", refuse)
    meter = energy.RaplMeter(tmp_path)
    meter.start()
    joules, reason = meter.stop()
    assert joules is None and not meter.available
    assert "permission denied" in reason and "energy_uj" in reason


def test_rapl_counter_that_becomes_unreadable_during_an_epoch_is_empty_with_the_reason(tmp_path):
    zone = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 100)
    meter = energy.RaplMeter(tmp_path, poll_s=60)
    meter.start()
    (zone / "energy_uj").unlink()
    joules, reason = meter.stop()
    assert joules is None and "RAPL counter read failed during the epoch" in reason


def test_no_powercap_is_empty_with_the_reason(tmp_path):
    joules, reason = energy.RaplMeter(tmp_path / "absent").stop()
    assert joules is None and "no RAPL package zone" in reason


class FakeNvml(types.SimpleNamespace):
    """pynvml's calls the meter makes: devices by index or UUID, energy in mJ, power in mW."""

    class NVMLError(Exception):
        pass

    def __init__(self, energy_mj=None, power_mw=None, count=4):
        super().__init__()
        self.energy_mj = energy_mj or {}  # handle -> counter; absent: no counter on that board
        self.power_mw = power_mw or {}
        self.count = count
        self.opened = []

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index):
        if index >= self.count:
            raise self.NVMLError(f"invalid index {index}")
        self.opened.append(index)
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.opened.append(uuid)
        return uuid

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if handle not in self.energy_mj:
            raise self.NVMLError("Not Supported")
        return self.energy_mj[handle]

    def nvmlDeviceGetPowerUsage(self, handle):
        return self.power_mw[handle]


def test_nvml_energy_counter_in_millijoules_of_this_process_gpus():
    nvml = FakeNvml(energy_mj={2: 1_000, 3: 5_000})
    meter = energy.NvmlMeter([0, 1], nvml=nvml, environ={"CUDA_VISIBLE_DEVICES": "2,3"})
    assert meter.available and nvml.opened == [2, 3]  # the framework's GPU 0 is NVML's 2
    meter.start()
    nvml.energy_mj.update({2: 3_500, 3: 6_000})
    assert meter.stop() == (pytest.approx(3.5), "")


def test_nvml_rank_gpu_by_uuid_and_by_local_rank():
    nvml = FakeNvml(energy_mj={"GPU-b": 0})
    energy.NvmlMeter(devices.process_gpus(1, 1, 2), nvml=nvml, environ={"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b"})
    assert nvml.opened == ["GPU-b"]
    assert devices.process_gpus(0, 4, 4) == [0, 1, 2, 3]  # one process driving a node's GPUs
    assert devices.process_gpus(3, 1, 1) == [0]  # a task that sees only its own GPU (task binding)


def test_nvml_without_a_counter_integrates_sampled_power(monkeypatch):
    nvml = FakeNvml(power_mw={0: 200_000})
    clock = iter([10.0, 12.0])  # the sample at start, the one at stop
    monkeypatch.setattr(energy.time, "monotonic", lambda: next(clock))
    meter = energy.NvmlMeter([0], nvml=nvml, environ={}, sample_s=3600)
    meter.start()
    assert meter.stop() == (pytest.approx(400.0), "")  # 200 W for 2 s


def test_nvml_missing_or_failing_is_empty_with_the_reason(monkeypatch):
    monkeypatch.setattr(energy, "import_nvml", lambda: None)
    joules, reason = energy.NvmlMeter([0], environ={}).stop()
    assert joules is None and "pynvml is not installed" in reason
    meter = energy.NvmlMeter([0], nvml=FakeNvml(count=0), environ={"CUDA_VISIBLE_DEVICES": "7"})
    assert meter.stop() == (None, meter.reason) and "NVML cannot read this process's GPUs" in meter.reason


def test_ranks_sharing_a_gpu_are_not_measured():
    meter = energy.meter_for("cuda", [0], shared_gpu=True)
    assert meter.stop()[0] is None and "share a GPU" in meter.reason


def test_sum_across_ranks_is_known_only_when_every_measuring_rank_read():
    def reduce(*ranks):
        return [sum(column) for column in zip(*ranks, strict=True)]

    both = reduce(energy.contribution(10.0, True), energy.contribution(5.0, True))
    assert energy.total(both, "") == (15.0, "")
    # a CPU node's second rank measures nothing and blocks nothing
    assert energy.total(reduce(energy.contribution(10.0, True), energy.contribution(None, False)), "") == (10.0, "")
    one_failed = reduce(energy.contribution(10.0, True), energy.contribution(None, True))
    assert energy.total(one_failed, "") == (None, "1 of 2 measuring ranks could not read their counter")
    assert energy.total(reduce(energy.contribution(None, True)), "no pynvml") == (None, "no pynvml")
    assert energy.measures_node("cpu", 1) is False and energy.measures_node("cuda", 1) is True
