"""The typed settings a rank receives: the schema's keys, nothing more or less, in their types."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import REPO, cell_settings, sb_config
from scalebench.settings import HorovodSettings, LoaderSettings, RunSettings, TrainingSettings
from scalebench.train.entry import cell_hash


def schema_keys(*path: str) -> set[str]:
    node = sb_config.load_schema(REPO / "config" / "schema.yaml")
    for name in path:
        node = node["properties"][name]
    return set(node["properties"])


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        (TrainingSettings, ("training",)),
        (LoaderSettings, ("training", "loader")),
        (HorovodSettings, ("training", "horovod")),
    ],
)
def test_dataclass_fields_are_the_schema_keys(kind, path):
    assert {f.name for f in dataclasses.fields(kind)} == schema_keys(*path)


def test_a_cell_settings_become_typed_once():
    run = RunSettings.from_json(cell_settings("tensorflow", "horovod", 2, base_lr=1), "data", "out", env={})
    assert (run.cell.framework, run.cell.backend, run.cell.gpus, run.cell.seed) == ("tensorflow", "horovod", 2, 1)
    assert run.training.base_lr == 1.0 and isinstance(run.training.base_lr, float)
    assert run.training.loader.workers == 0 and run.training.horovod.backward_passes_per_step == 1
    assert run.image_size == (32, 48) and run.threads == 1
    assert run.training.precision == "fp32" and run.training.autocast_dtype is None


def test_threads_default_to_slurms_cpus_per_task():
    settings = cell_settings("torch", "native", 1, threads_per_rank=None)
    assert RunSettings.from_json(settings, "d", "o", env={"SLURM_CPUS_PER_TASK": "6"}).threads == 6
    assert RunSettings.from_json(settings, "d", "o", env={}).threads == 1


def test_unknown_or_missing_keys_are_refused_by_name():
    settings = cell_settings("torch", "native", 1)
    settings["training"]["epochz"] = 3
    del settings["training"]["epochs"]
    with pytest.raises(ValueError, match=r"training': unknown keys \['epochz'\], missing keys \['epochs'\]"):
        RunSettings.from_json(settings, "d", "o")


def test_a_cells_hash_changes_with_its_schedule_and_its_arrays(prepared_data, tmp_path):
    settings = cell_settings("torch", "native", 1)
    first = cell_hash(settings, prepared_data)
    assert cell_hash(cell_settings("torch", "native", 1), prepared_data) == first
    assert cell_hash(cell_settings("torch", "native", 1, epochs=4), prepared_data) != first
    other = tmp_path / "other"
    other.mkdir()
    manifest = json.loads((prepared_data / "manifest.json").read_text())
    (other / "manifest.json").write_text(json.dumps({**manifest, "sha256": {"images.npy": "0" * 64}}))
    assert cell_hash(settings, other) != first
