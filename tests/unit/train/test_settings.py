"""The typed settings a rank receives: the schema's keys, nothing more or less, in their types."""

from __future__ import annotations

import dataclasses
import json
import types
import typing

import pytest
from conftest import REPO, cell_settings, sb_config
from scalebench import config_keys
from scalebench.settings import (
    CollectiveSettings,
    HorovodSettings,
    LoaderSettings,
    ProcessFacts,
    ProfileSettings,
    RunSettings,
    TrainingSettings,
)
from scalebench.train.entry import cell_hash

SECTIONS = [
    (TrainingSettings, ("training",)),
    (LoaderSettings, ("training", "loader")),
    (HorovodSettings, ("training", "horovod")),
    (CollectiveSettings, ("training", "collectives")),
    (ProfileSettings, ("training", "profile")),
]
# a dataclass field's Python type as the JSON-schema types it may have
JSON_TYPES = {int: "integer", float: "number", bool: "boolean", str: "string", type(None): "null", dict: "object"}


def schema_keys(*path: str) -> set[str]:
    node = sb_config.load_schema(REPO / "config" / "schema.yaml")
    for name in path:
        node = node["properties"][name]
    return set(node["properties"])


@pytest.mark.parametrize(("kind", "path"), SECTIONS, ids=[kind.__name__ for kind, _ in SECTIONS])
def test_dataclass_fields_are_the_schema_keys(kind, path):
    assert {f.name for f in dataclasses.fields(kind)} == schema_keys(*path)


def hint_types(hint: object) -> set[str]:
    parts = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    return {"object" if dataclasses.is_dataclass(part) else JSON_TYPES[part] for part in parts}


def schema_types(node: dict) -> set[str]:
    return set(config_keys.types(node)) | ({"null"} if config_keys.nullable(node) else set())


@pytest.mark.parametrize(("kind", "path"), SECTIONS, ids=[kind.__name__ for kind, _ in SECTIONS])
def test_each_settings_field_has_its_keys_type_in_the_schema(kind, path):
    """The typed settings are checked against the schema key by key: a key's type changed on one
    side only (an integer made a number, null allowed) fails here, naming it."""
    hints = typing.get_type_hints(kind)
    section = config_keys.key(".".join(path))["properties"]
    for name, node in section.items():
        assert hint_types(hints[name]) == schema_types(node), f"{'.'.join(path)}.{name}: {hints[name]} vs {node}"


def test_the_type_check_finds_a_key_whose_type_differs():
    assert hint_types(int | None) == schema_types({"type": ["integer", "null"]})
    assert hint_types(int) != schema_types({"type": ["integer", "null"]})
    assert hint_types(float) != schema_types({"type": "integer"})
    assert hint_types(str) == schema_types({"enum": ["a", "b"]})


def test_a_cell_settings_become_typed_once():
    run = RunSettings.from_json(cell_settings("tensorflow", "horovod", 2, base_lr=1), "data", "out")
    assert (run.cell.framework, run.cell.backend, run.cell.gpus, run.cell.seed) == ("tensorflow", "horovod", 2, 1)
    assert run.training.base_lr == 1.0 and isinstance(run.training.base_lr, float)
    assert run.training.loader.workers == 0 and run.training.horovod.backward_passes_per_step == 1
    assert run.image_size == (32, 48) and ProcessFacts.of_rank(run, {}).threads == 1
    assert run.training.precision == "fp32" and run.training.autocast_dtype is None


def test_threads_default_to_slurms_cpus_per_task():
    run = RunSettings.from_json(cell_settings("torch", "native", 1, threads_per_rank=None), "d", "o")
    assert ProcessFacts.of_rank(run, {"SLURM_CPUS_PER_TASK": "6"}).threads == 6
    assert ProcessFacts.of_rank(run, {}).threads == 1


def test_each_process_resolves_its_own_facts_and_the_settings_read_no_environment(monkeypatch):
    """The study's settings are the same wherever they are read; a process's facts are its own:
    launch.py's threads come from its allocation (not a variable of its own environment), a rank's
    from the SLURM_CPUS_PER_TASK its launcher gave it."""
    settings = cell_settings("torch", "native", 1, threads_per_rank=None, device="auto")
    settings["gpus_per_node"] = 4
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "9")
    monkeypatch.setenv("SCALEBENCH_SHARE_GPU", "1")
    run = RunSettings.from_json(settings, "d", "o")
    assert not {"threads", "gpu_required", "share_gpu"} & {f.name for f in dataclasses.fields(RunSettings)}
    slurm_rank = {"SLURM_CPUS_PER_TASK": "6", "SCALEBENCH_EXECUTOR": "slurm"}
    assert ProcessFacts.of_rank(run, slurm_rank) == ProcessFacts(threads=6, gpu_required=True, share_gpu=False)
    assert ProcessFacts.of_rank(run, {}) == ProcessFacts(threads=1, gpu_required=False, share_gpu=False)
    assert ProcessFacts.resolve(run, {"SLURM_CPUS_PER_TASK": "6"}, None).threads == 1  # a local launcher
    assert ProcessFacts.resolve(run, {}, 4).threads == 4  # a SLURM launcher: its allocation's CPUs


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
