"""The recipes of docs/architecture.md, followed in this process with no other edit: a config key
declared in the schema and its settings class reaches every place that derives from them.
(A backend declared by its registry entry alone: tests/unit/test_backend_matrix.py.)"""

from __future__ import annotations

import dataclasses
import sys

import pytest
from conftest import REPO
from scalebench import config as sb_config
from scalebench import settings
from scalebench.config.cell_settings import settings_changes
from scalebench.records import definitions
from scalebench.train import provenance

pytestmark = pytest.mark.unit

KEY = {
    "description": "Clip each step's gradient norm at this value (e.g. 1.0). null: no clipping.",
    "type": ["number", "null"],
    "default": None,
}


def with_the_key(monkeypatch) -> dict:
    """Steps 1 and 2 of the recipe: the key in the schema, a field of its name and type in the class."""
    schema = sb_config.load_schema(REPO / "config" / "schema.yaml")
    schema["properties"]["training"]["properties"]["grad_clip"] = KEY
    extended = dataclasses.make_dataclass(
        "TrainingSettings", [("grad_clip", float | None)], bases=(settings.TrainingSettings,), frozen=True
    )
    monkeypatch.setattr(settings, "TrainingSettings", extended)
    return schema


def study(schema: dict, **training) -> dict:
    return sb_config.validate({"training": training}, schema)


def test_a_new_training_key_reaches_validation_the_ranks_run_json_its_definition_and_the_reference(monkeypatch):
    schema = with_the_key(monkeypatch)
    cell = sb_config.Cell("torch", "native", 2, 1)
    # validation fills its default, takes a value and names the key when the value is wrong
    assert study(schema)["training"]["grad_clip"] is None
    config = study(schema, grad_clip=1)
    with pytest.raises(sb_config.ConfigError, match="training.grad_clip"):
        study(schema, grad_clip="high")
    # every cell's settings carry it, and a rank reads it into the typed class
    given = sb_config.train_settings(config, cell)
    assert given["training"]["grad_clip"] == 1
    run = settings.RunSettings.from_json(given, "data", "out")
    assert run.training.grad_clip == 1.0 and isinstance(run.training.grad_clip, float)
    # run.json's training records it, and its definition, taken from the schema, defines it
    record = provenance.training_record(
        run.training,
        framework="torch",
        device_type="cpu",
        replicas=2,
        threads=1,
        deterministic=True,
        passes=1,
        compression="none",
        backend_options={},
    )
    assert record["grad_clip"] == 1.0
    fields = {field.name: field for field in definitions.training_fields(schema)}
    assert set(record) == set(fields)  # nothing undefined, nothing defined and unwritten
    assert fields["grad_clip"].type == "float"
    assert fields["grad_clip"].meaning == "training.grad_clip: Clip each step's gradient norm at this value (e.g. 1.0)."
    assert fields["grad_clip"].empty == "training.grad_clip null: no clipping"
    # the configuration reference lists it with its type and default
    sys.path.insert(0, str(REPO / "tools"))
    import config_reference

    (row,) = [row for row in config_reference.rows(schema) if row[0] == "training.grad_clip"]
    assert "number" in row[1] and "null" in row[2]


def test_a_new_key_at_its_default_retrains_no_finished_cell_and_a_value_away_from_it_does(monkeypatch):
    schema = with_the_key(monkeypatch)
    cell = sb_config.Cell("torch", "native", 2, 1)
    before = sb_config.train_settings(
        sb_config.validate({}, sb_config.load_schema(REPO / "config" / "schema.yaml")), cell
    )
    assert "grad_clip" not in before["training"]  # a cell finished by the release before the key
    defaults = sb_config.train_settings(study(schema), cell)
    assert settings_changes(before, defaults, defaults) == []
    assert settings_changes(before, sb_config.train_settings(study(schema, grad_clip=1.0), cell), defaults) == [
        "training.grad_clip: null -> 1.0"
    ]
