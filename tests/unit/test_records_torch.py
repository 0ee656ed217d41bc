"""run.json as PyTorch's rank writes it, and the training record of its Horovod backend: exactly
the definitions' fields (records/definitions.py), with test_records.py's checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import cell_settings
from scalebench import records
from scalebench.launch import accounting
from scalebench.records.definitions import COLLECTIVES, COMPILED, GPU_STACK, RUN, TRAINING
from scalebench.settings import ProcessFacts, RunSettings
from scalebench.train import collectives, observed, provenance, rank_env, run_record
from scalebench.train.placement import DataPlacement
from scalebench.train.torch import dp, model, runtime
from scalebench.train.torch.horovod import HorovodTorchBackend
from test_records import assert_the_training_record_is_the_defined_settings_and_the_backends_options, check_written

ENVIRONMENT = "torch"


def test_the_horovod_training_record_is_the_defined_settings_and_the_backends_options():
    assert_the_training_record_is_the_defined_settings_and_the_backends_options(
        "torch", "horovod", lambda place, training: HorovodTorchBackend(place, training.horovod)
    )


def written_run_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch | None = None, drop: str = "") -> dict:
    """run.json as the writers of a cell that ended ok leave it: the rank's RunRecord from the cell's
    start to its finish (one process, with a real DataParallel backend, PyTorch's device and model
    on the CPU) and launch.py's accounting after it. `drop`: a field the rank's writer leaves out."""
    if drop:
        monkeypatch.setattr(run_record.provenance, "start_record", dropping(provenance.start_record, drop))
    run = RunSettings.from_json(cell_settings("torch", "dp", 1), tmp_path / "data", tmp_path / "out")
    Path(run.out_dir).mkdir(parents=True)
    process, place = ProcessFacts.of_rank(run, {}), rank_env.detect({})
    device = runtime.build_device(run, process, place)
    backend = dp.create(run, place, device.type, process.share_gpu)
    numerics = runtime.Numerics(None, True)  # build_numerics would seed this test process's generators
    built = model.build(run, device, numerics, backend)
    placement = DataPlacement("host", 0, "training.loader.placement: host")
    record = run_record.RunRecord(
        run, backend, process, "hash", framework="torch", model=built, device=device, numerics=numerics,
        placement=placement,
    )  # fmt: skip
    record.add(collectives.run_fields(collectives.Result(reason="one replica: nothing to exchange"), 1))
    steps = {"compute_dtype": "float32", "compiled": observed.compiled_record("torch.compile (inductor)", 0, 0, [])}
    record.observe(steps)
    record.first_epoch()
    final = records.final_record("ok", 1.0, 2.0, 1) | dict.fromkeys(records.COST_FIELDS) | {"iou": 0.5}
    record.finish(final, 0, lambda: steps)
    accounting.record(record.path, None)  # launch.py, after the ranks: a local cell
    return json.loads(record.path.read_text())


def dropping(builder, name: str):
    """`builder` whose record lacks `name` (a writer that forgot a field)."""

    def built(*args, **kwargs) -> dict:
        record = builder(*args, **kwargs)
        record.pop(name)
        return record

    return built


def test_run_json_as_the_writers_leave_it_holds_every_defined_field(tmp_path):
    run = written_run_json(tmp_path)
    check_written(RUN, run)  # every field a cell that ended ok holds: all but reason and error
    check_written(TRAINING, {key: value for key, value in run["training"].items() if key != "dp"})
    check_written(COLLECTIVES, run["collectives"])
    check_written(COMPILED, run["compiled"])
    check_written(GPU_STACK, run["gpu_stack"])  # a machine without nvidia-smi: the check says why it did not run
    assert {field.name for field in RUN.fields if field.absent} == {"reason", "error"}


def test_a_run_json_writer_that_drops_a_defined_field_fails_naming_it(tmp_path, monkeypatch):
    run = written_run_json(tmp_path, monkeypatch, drop="python")
    with pytest.raises(AssertionError, match=r"run record lacks \[.python.\]"):
        check_written(RUN, run)
