"""The components the training loop delegates to, each driven without a framework: run.json's
RunRecord (start, the benchmark's summary, the first epoch's observations, finish), the collective
benchmark's wiring, the profile window around an epoch, a rank's energy and the first step's check.
tests/integration trains real cells through all of them (test_step_split, test_collectives,
test_observed_steps, test_resume)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import cell_settings, training_settings
from scalebench.records.definitions import RUN
from scalebench.records.tables import CELL_COLLECTIVES
from scalebench.settings import ProcessFacts, RunSettings
from scalebench.train import collectives, energy, observed, profiling, run_record, step_timing
from scalebench.train.placement import DataPlacement
from scalebench.train.run_record import RunRecord

COMPILED = observed.compiled_record("torch.compile (inductor)", 0, 0, [])


class FakeBackend:
    """Rank `rank` of two, every collective answered as if the other rank said the same."""

    name = "native"
    replicas = processes = local_processes = 2
    local_rank = 0
    device_type = "cpu"
    backward_passes_per_step = 1
    gradient_compression = "none"

    def __init__(self, rank: int = 0, bench: collectives.Bench | str | Exception = "no bench here") -> None:
        self.rank, self.bench = rank, bench
        self.timeline: list[str] = []

    def allgather_text(self, text: str) -> list[str]:
        return [text, text]

    def allreduce_max(self, values: np.ndarray) -> np.ndarray:
        return values

    def allreduce_sum(self, values: np.ndarray) -> np.ndarray:
        return values * 2

    def versions(self) -> dict:
        return {"backend_library": "1.0"}

    def options(self) -> dict:
        return {}

    def collective_bench(self, model) -> collectives.Bench | str:
        if isinstance(self.bench, Exception):
            raise self.bench
        return self.bench

    def start_timeline(self, folder: Path) -> None:
        self.timeline.append("start")

    def stop_timeline(self) -> None:
        self.timeline.append("stop")


class FakeModel:
    def fields(self) -> dict:
        return {"parameters": 10, "gradient_bytes": 40}


class FakeDevice:
    def describe(self) -> dict:
        return {"device": "cpu", "layout": "channels_last", "tf32": False, "versions": {"torch": "2"}}

    def model(self) -> str:
        return "cpu (x86_64)"


class FakeNumerics:
    deterministic = True


class FakeSteps:
    """What a framework's steps observed, and the rate its optimizer holds."""

    def __init__(self, dtype: str = "float32", lr: float = 0.002) -> None:
        self.dtype, self.lr = dtype, lr

    def observed(self) -> dict:
        return {"compute_dtype": self.dtype, "compiled": COMPILED}

    def optimizer_lr(self) -> float:
        return self.lr


class FakeTracer:
    """A framework's profiler: each trace it starts and stops, in order."""

    def __init__(self) -> None:
        self.traces: list[str] = []

    def start(self, folder: Path) -> FakeTracer:
        self.traces.append("start")
        return self

    def stop(self) -> None:
        self.traces.append("stop")


def settings(tmp_path: Path, **training: object) -> RunSettings:
    return RunSettings.from_json(cell_settings("torch", "native", 2, **training), tmp_path / "data", tmp_path / "out")


def started_record(tmp_path: Path, monkeypatch, rank: int = 0) -> RunRecord:
    monkeypatch.setattr(run_record.site, "fields", lambda: {"site": {"node": "n1"}, "site_reasons": {}})
    monkeypatch.setattr(run_record.site, "update_libraries", lambda record: record.update(libraries_read=True))
    run = settings(tmp_path)
    Path(run.out_dir).mkdir(parents=True)
    return RunRecord(
        run,
        FakeBackend(rank),
        ProcessFacts(threads=3, gpu_required=False),
        "hash",
        framework="torch",
        model=FakeModel(),
        device=FakeDevice(),
        numerics=FakeNumerics(),
        placement=DataPlacement("host", 0, "training.loader.placement is host"),
    )


def written(record: RunRecord) -> dict:
    return json.loads(record.path.read_text())


def test_rank_0_writes_run_json_at_the_start_with_the_cell_its_ranks_and_its_settings(tmp_path, monkeypatch):
    record = started_record(tmp_path, monkeypatch)
    run = written(record)
    assert run["status"] == "running" and run["config_hash"] == "hash" and run["framework"] == "torch"
    assert run["versions"] == {"torch": "2", "backend_library": "1.0"}  # the framework's and the backend's
    assert (run["replicas"], run["threads_per_rank"], run["data_placement"]) == (2, 3, "host")
    assert run["rank_hosts"] == record.hosts and len(record.hosts) == 2 and run["site"] == {"node": "n1"}
    assert run["training"]["threads_per_rank"] == 3 and run["training"]["global_batch"] == 8
    assert not RUN.undefined(run)


def test_another_rank_holds_the_record_but_never_writes_it(tmp_path, monkeypatch):
    record = started_record(tmp_path, monkeypatch, rank=1)
    record.add({"collectives": {"op": None}})
    record.finish({"status": "ok", "stopped_at_target": False, "setup_s": 1.0, "epochs_completed": 3}, 0, dict)
    assert record.fields["gradient_bytes"] == 40 and "site" not in record.fields  # rank 0 reads the site
    assert not record.path.exists()


def test_the_first_steps_observations_are_written_after_the_first_epoch_not_before(tmp_path, monkeypatch):
    record = started_record(tmp_path, monkeypatch)
    record.observe({"compute_dtype": "float32", "compiled": COMPILED})
    assert record.observed and "compute_dtype" not in written(record)  # not on the epoch's clock
    record.first_epoch()
    assert written(record)["compute_dtype"] == "float32" and written(record)["compiled"] == COMPILED


def test_finish_writes_the_outcome_the_cost_and_the_libraries_as_loaded(tmp_path, monkeypatch, capsys):
    record = started_record(tmp_path, monkeypatch)
    record.add(collectives.run_fields(collectives.Result(reason="one replica: nothing to exchange"), 1))
    final = {
        "status": "ok",
        "stopped_at_target": True,
        "setup_s": 1.5,
        "epochs_completed": 2,
        "test_loss": 0.3,
        "iou": 0.7,
        "train_time_s": 4.0,
        "train_gpu_hours": 0.01,
        "energy_j": None,
        "energy_source": "rapl",
        "energy_reason": "no powercap",
    }
    record.finish(final, 1, FakeSteps().observed)
    run = written(record)
    assert (run["status"], run["setup_s"], run["resumed_from_epoch"], run["epochs_completed"]) == ("ok", 1.5, 1, 2)
    assert run["stopped_at_target"] is True and run["train_gpu_hours"] == 0.01 and run["energy_reason"] == "no powercap"
    assert run["end"] and run["libraries_read"] is True
    assert run["collectives"]["reason"] == "one replica: nothing to exchange"  # what add() wrote stays
    assert (
        "final: status ok  (stopped at the target IOU)  test loss 0.3  IOU 0.7  train 4.0 s" in capsys.readouterr().out
    )


def all_reduce(elements: int):
    return lambda: None


def test_the_benchmark_of_one_replica_measures_nothing_and_says_why(tmp_path):
    backend = FakeBackend()
    backend.replicas = 1
    result = collectives.benchmark(backend, None, training_settings().collectives, 40, tmp_path)
    assert result.reason == "one replica: nothing to exchange" and not (tmp_path / CELL_COLLECTIVES.name).exists()


def test_rank_0_writes_the_table_and_its_line_and_another_rank_neither(tmp_path, capsys):
    bench = collectives.all_reduce_bench(all_reduce, 2, "fake library")
    training = training_settings()
    result = collectives.benchmark(FakeBackend(0, bench), None, training.collectives, 40, tmp_path)
    assert result.library == "fake library" and result.rows[0]["size"] == "gradient"
    assert capsys.readouterr().out.startswith("collectives: ")
    assert (tmp_path / CELL_COLLECTIVES.name).read_text().startswith("op,")
    (tmp_path / CELL_COLLECTIVES.name).unlink()
    collectives.benchmark(FakeBackend(1, bench), None, training.collectives, 40, tmp_path)
    assert not (tmp_path / CELL_COLLECTIVES.name).exists() and capsys.readouterr().out == ""


def test_a_bench_that_cannot_be_built_leaves_the_cell_training_with_the_reason(tmp_path):
    backend = FakeBackend(0, RuntimeError("no library"))
    (tmp_path / "out").mkdir()
    result = collectives.benchmark(backend, None, training_settings().collectives, 40, tmp_path / "out")
    assert result.reason == "failed: RuntimeError: no library" and result.rows == []


def window(epoch: int, steps: int, backend: FakeBackend, tmp_path: Path) -> tuple[profiling.Window, FakeTracer]:
    tracer = FakeTracer()
    profile = training_settings(profile={"epoch": epoch, "steps": steps}).profile
    return profiling.Window(profile, tmp_path, tracer.start, backend), tracer


def test_the_window_opens_around_the_profiled_epoch_only_and_closes_after_its_steps(tmp_path):
    backend = FakeBackend()
    profile, tracer = window(2, 2, backend, tmp_path)
    with profile.around(0) as opened:  # epoch 1: not the profiled one
        opened.after_step(1)
    assert tracer.traces == [] and profile.fields(0)["profiled"] is False
    with profile.around(1) as opened:
        assert tracer.traces == ["start"] and backend.timeline == ["start"]
        opened.after_step(1)
        assert tracer.traces == ["start"]  # one step of two: still tracing
        opened.after_step(2)
        assert tracer.traces == ["start", "stop"]
    assert tracer.traces == ["start", "stop"] and backend.timeline == ["start", "stop"]  # stopped once
    assert profile.fields(1) == {"profiled": True, "profile_trace": "profile", "profile_reason": None}


def test_a_window_longer_than_the_epoch_closes_when_its_steps_end(tmp_path):
    profile, tracer = window(1, 3, FakeBackend(), tmp_path)
    with profile.around(0) as opened:
        opened.after_step(1)  # an epoch of one step (a dataset smaller than config could tell)
        assert tracer.traces == ["start"]
    assert tracer.traces == ["start", "stop"]


def test_an_epoch_that_raises_leaves_the_window_as_it_was(tmp_path):
    profile, tracer = window(1, 3, FakeBackend(), tmp_path)
    with pytest.raises(RuntimeError, match="step failed"):
        with profile.around(0):
            raise RuntimeError("step failed")
    assert tracer.traces == ["start"] and profile.active  # no trace written on the way out


class FakeMeter(energy.Meter):
    source = "fake"

    def __init__(self, joules: float | None, reason: str = "") -> None:
        super().__init__()
        self.joules, self.read = joules, reason

    def stop(self) -> tuple[float | None, str]:
        return self.joules, self.read


def test_a_ranks_energy_adds_its_reading_and_the_cost_sums_the_epochs(monkeypatch):
    monkeypatch.setattr(energy, "meter_for", lambda *args: FakeMeter(5.0))
    ranks = energy.RankEnergy("cuda", [0], False, 0)
    part = ranks.stop()
    assert part == [5.0, 1.0, 1.0] and ranks.epoch_joules([10.0, 2.0, 2.0]) == 10.0 and ranks.reason == ""
    cost = ranks.cost([{"energy_j": 10.0}, {"energy_j": 12.0}], 2, 3600.0)
    assert cost == {"train_gpu_hours": 2.0, "energy_j": 22.0, "energy_source": "fake", "energy_reason": ""}


def test_a_rank_that_could_not_read_leaves_the_epoch_empty_with_its_reason(monkeypatch):
    monkeypatch.setattr(energy, "meter_for", lambda *args: FakeMeter(None, "counter unreadable"))
    ranks = energy.RankEnergy("cuda", [0], False, 0)
    summed = [value * 2 for value in ranks.stop()]
    assert ranks.epoch_joules(summed) is None and ranks.reason == "counter unreadable"
    assert ranks.cost([{"energy_j": None}], 1, 0.0)["energy_reason"] == "counter unreadable"


def test_an_epoch_without_the_split_records_why():
    fields = step_timing.gather_epoch(None, 2.0, 0.1, FakeBackend(), ["n1", "n1"])
    assert fields["step_split_reason"] == "training.step_split is off" and fields["compute_s"] is None


def test_the_split_is_gathered_from_every_rank():
    steps = step_timing.StepTimes([0.3, 0.4], [0.1, 0.1])
    fields = step_timing.gather_epoch(steps, 2.0, 0.1, FakeBackend(), ["n1", "n2"])
    assert [rank["host"] for rank in fields["ranks"]] == ["n1", "n2"] and fields["step_split_reason"] is None


def test_the_first_step_is_checked_against_the_cell_and_its_observations_returned():
    training = training_settings()
    assert observed.check_first_step(FakeSteps(), training, 0.002, 0)["compiled"] == COMPILED
    with pytest.raises(
        observed.ObservedMismatch, match=r"training.precision is bf16 .*; the learning rate: .* held 0.5"
    ):
        observed.check_first_step(FakeSteps(dtype="float32", lr=0.5), training_settings(precision="bf16"), 0.002, 0)
