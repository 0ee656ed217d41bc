"""Energy of the epochs, where the hardware tells: NVML on NVIDIA GPUs, RAPL on CPUs.

One small meter per source, with one interface: start() before an epoch's clock starts,
stop() after it stops, returning (joules, "") or (None, reason). A meter that cannot
measure never raises and never reports 0: it says why, and the loop records None.
`RankEnergy` is what the loop holds: this rank's meter, its part in each epoch's sum across
ranks, and the final record's GPU-hours and energy.

What each counts:
- NvmlMeter: the GPUs this process drives (by CUDA_VISIBLE_DEVICES, as the framework numbers
  them), from the board's energy counter (Volta and newer) or, where the board has none, by
  integrating its power draw sampled in a thread. The GPUs only: not the host CPU or memory.
- RaplMeter: the CPU packages of this node (powercap's package zones; their core/dram subzones
  are inside the package or not always present, so they are not added). The counter covers
  everything on the package, other jobs included: exact only when the cell has the node.
  A thread reads it every `poll_s` so a counter that wraps more than once per epoch is still
  counted.

Clocks here use time.monotonic, never perf_counter (the loop's epoch clock, which its timing
test spies on).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType

from scalebench import measures
from scalebench.cluster import gpu_ids

POWERCAP = Path("/sys/class/powercap")


class Meter:
    """The common interface; `source` names it in run.json and runs.csv ("nvml", "rapl")."""

    source = ""

    def __init__(self) -> None:
        self.reason = ""  # why it cannot measure ("" when it can)

    @property
    def available(self) -> bool:
        return not self.reason

    def start(self) -> None:
        """Begin a measurement (does nothing when unavailable)."""

    def stop(self) -> tuple[float | None, str]:
        """Joules since start(), or (None, why not)."""
        return None, self.reason


class Unavailable(Meter):
    """No source for this device: the fields stay empty, with the reason."""

    def __init__(self, reason: str, source: str = "") -> None:
        super().__init__()
        self.reason, self.source = reason, source


class _Poller:
    """Calls `read` every `interval` seconds in a daemon thread until stopped (and once more then)."""

    def __init__(self, interval: float, read: Callable[[], None]) -> None:
        self.interval, self.read = interval, read
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="energy-meter", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.done.wait(self.interval):
                self.read()
        except Exception as error:  # a meter failing must not end training; stop() reports it
            self.error = error

    def stop(self) -> BaseException | None:
        self.done.set()
        self.thread.join()
        if self.error is None:
            try:
                self.read()
            except Exception as error:
                self.error = error
        return self.error


# ---------------------------------------------------------------- RAPL


def rapl_zones(root: Path = POWERCAP) -> list[Path]:
    """The package zones (intel-rapl:N named package-N; AMD's powercap driver uses the same names)."""
    zones = []
    for zone in sorted(root.glob("intel-rapl:*")):
        if zone.name.count(":") != 1:  # intel-rapl:N:M is a subzone of package N
            continue
        try:
            name = (zone / "name").read_text().strip()
        except OSError:
            name = ""
        if name.startswith("package"):
            zones.append(zone)
    return zones


def wrapped_delta(before: int, after: int, max_range: int) -> int:
    """Counter increase from `before` to `after`, where it wraps to 0 past `max_range`."""
    return after - before if after >= before else after + max_range - before


class RaplMeter(Meter):
    source = "rapl"

    def __init__(self, root: Path = POWERCAP, poll_s: float = 10.0) -> None:
        super().__init__()
        self.root, self.poll_s = root, poll_s
        self.microjoules, self.last = 0, []  # the epoch's sum so far, and the counters' last reading
        self.poller: _Poller | None = None  # reads the counters during an epoch (start)
        self.zones = rapl_zones(root)
        if not self.zones:
            self.reason = f"no RAPL package zone under {root} (no powercap driver, or not an x86 host)"
            return
        try:
            self.ranges = [int((zone / "max_energy_range_uj").read_text()) for zone in self.zones]
            self._read()
        except PermissionError as error:
            self.reason = (
                f"RAPL counter not readable ({error.filename}: permission denied; since Linux 5.10 energy_uj "
                "is root-only unless the administrator grants read access)"
            )
        except (OSError, ValueError) as error:
            self.reason = f"RAPL counter not readable: {error}"

    def _read(self) -> list[int]:
        return [int((zone / "energy_uj").read_text()) for zone in self.zones]

    def _accumulate(self) -> None:
        now = self._read()
        for i, (before, after) in enumerate(zip(self.last, now, strict=True)):
            self.microjoules += wrapped_delta(before, after, self.ranges[i])
        self.last = now

    def start(self) -> None:
        if not self.available:
            return
        self.microjoules, self.last = 0, self._read()
        self.poller = _Poller(self.poll_s, self._accumulate)
        self.poller.start()

    def stop(self) -> tuple[float | None, str]:
        if not self.available:
            return None, self.reason
        error = self.poller.stop()
        if error is not None:
            return None, f"RAPL counter read failed during the epoch: {error}"
        return self.microjoules / 1e6, ""


# ---------------------------------------------------------------- NVML


def import_nvml() -> ModuleType | None:
    """pynvml (the nvidia-ml-py package), imported only where a GPU cell measures."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def nvml_handle(nvml: ModuleType, index: int, environ: Mapping[str, str] | None = None):
    """NVML's handle of the framework's GPU `index`, by the index or UUID gpu_ids.device_id names it
    with. (CUDA orders devices fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, NVML by PCI bus:
    on a node of mixed GPUs set that variable for the indices to agree.)"""
    identifier = gpu_ids.device_id(index, environ)
    if identifier.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(identifier))
    return nvml.nvmlDeviceGetHandleByUUID(identifier)


class NvmlMeter(Meter):
    """The energy of GPUs `indices` (the framework's numbering) of this process."""

    source = "nvml"

    def __init__(
        self, indices: list[int], nvml: ModuleType | None = None, environ: dict | None = None, sample_s: float = 0.1
    ) -> None:
        super().__init__()
        self.nvml = nvml if nvml is not None else import_nvml()
        self.sample_s = sample_s
        self.begin: list[int] = []  # the energy counters at the epoch's start
        # GPUs without a counter: their power sampled during the epoch, and the joules integrated
        self.poller: _Poller | None = None
        self.samples: list[tuple[float, float]] = []
        self.sampled_j = 0.0
        if self.nvml is None:
            self.reason = "pynvml is not installed (pip install nvidia-ml-py to measure GPU energy)"
            return
        try:
            self.nvml.nvmlInit()
            self.handles = [nvml_handle(self.nvml, i, environ) for i in indices]
            self.counters = [self._has_counter(handle) for handle in self.handles]
        except Exception as error:  # NVMLError and its many subclasses, a bad index
            self.reason = f"NVML cannot read this process's GPUs: {error}"

    def _has_counter(self, handle) -> bool:
        try:
            self.nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except self.nvml.NVMLError:  # not supported before Volta: sample the power instead
            return False
        return True

    def _sample_power(self) -> None:
        now = time.monotonic()
        watts = sum(self.nvml.nvmlDeviceGetPowerUsage(h) / 1000 for h, c in zip(self.handles, self.counters) if not c)
        if self.samples:
            (then, before) = self.samples[-1]
            self.sampled_j += (now - then) * (before + watts) / 2  # trapezoid between samples
        self.samples.append((now, watts))

    def start(self) -> None:
        if not self.available:
            return
        self.begin = [
            self.nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h, c in zip(self.handles, self.counters) if c
        ]
        self.poller = None
        if not all(self.counters):
            self.samples, self.sampled_j = [], 0.0
            self._sample_power()
            self.poller = _Poller(self.sample_s, self._sample_power)
            self.poller.start()

    def stop(self) -> tuple[float | None, str]:
        if not self.available:
            return None, self.reason
        try:
            end = [self.nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h, c in zip(self.handles, self.counters) if c]
        except Exception as error:
            return None, f"NVML energy counter read failed: {error}"
        joules = sum(after - before for before, after in zip(self.begin, end, strict=True)) / 1000  # millijoules
        if self.poller is not None:
            error = self.poller.stop()
            if error is not None:
                return None, f"NVML power sampling failed during the epoch: {error}"
            joules += self.sampled_j
        return joules, ""


def measures_node(device_type: str, local_rank: int) -> bool:
    """Whether this rank's energy counts: every GPU rank (its own GPUs); on CPUs the first rank
    of each node, since RAPL's counters are the node's, not a rank's."""
    return device_type == "cuda" or local_rank == 0


def meter_for(device_type: str, gpu_indices: list[int], shared_gpu: bool) -> Meter:
    """This rank's meter: NVML on its own GPUs (none where ranks share one: it would count
    twice), RAPL on a CPU rank."""
    if device_type == "cuda":
        if shared_gpu:
            return Unavailable("ranks share a GPU (SCALEBENCH_SHARE_GPU=1): its energy would count twice", "nvml")
        return NvmlMeter(gpu_indices)
    return RaplMeter()


def contribution(joules: float | None, measures: bool) -> list[float]:
    """What a rank adds to the epoch's sum across ranks: [joules, measuring ranks, ranks that read]."""
    read = measures and joules is not None
    return [float(joules) if read else 0.0, float(measures), float(read)]


def total(sums: list[float], root_reason: str) -> tuple[float | None, str]:
    """The cell's joules from the summed contributions: None unless every measuring rank read
    its counter (a partial sum would pass for a small one)."""
    joules, measuring, read = sums
    if measuring and read == measuring:
        return joules, ""
    if root_reason:
        return None, root_reason
    return None, f"{int(measuring - read)} of {int(measuring)} measuring ranks could not read their counter"


class RankEnergy:
    """One rank's part in the cell's energy: its meter around each epoch, whether its reading
    counts in the sum (measures_node), and why the latest sum is empty (`reason`)."""

    def __init__(self, device_type: str, gpu_indices: list[int], shared_gpu: bool, local_rank: int) -> None:
        self.meter = meter_for(device_type, gpu_indices, shared_gpu)
        self.counts = measures_node(device_type, local_rank)
        self.reason = self.meter.reason  # why the cell's energy is empty ('' while measured)
        self.read_reason = ""  # why this rank's last reading is empty

    def start(self) -> None:
        """After the epoch's synchronisation, before its clock: off the epoch's time."""
        self.meter.start()

    def stop(self) -> list[float]:
        """After the epoch's clock: this rank's contribution to the epoch's sum across ranks."""
        joules, self.read_reason = self.meter.stop()
        return contribution(joules, self.counts)

    def epoch_joules(self, sums: list[float]) -> float | None:
        """The epoch's joules from the summed contributions (None: `reason` says why)."""
        joules, self.reason = total(sums, self.read_reason)
        return joules

    def cost(self, epoch_records: list[dict], replicas: int, train_time_s: float) -> dict:
        """The final record's GPU-hours and energy of the epochs (a resumed run's earlier ones included)."""
        joules, reason = measures.cell_energy([record.get("energy_j") for record in epoch_records], self.reason)
        return {
            "train_gpu_hours": measures.gpu_hours(replicas, train_time_s),
            "energy_j": joules,
            "energy_source": self.meter.source or None,
            "energy_reason": reason,
        }
