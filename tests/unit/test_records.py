"""One definition per record (records/definitions.py): the writers' builders write exactly its
fields, with its types, and the analysis reads nothing it does not define. The records a framework's
own objects write (its backends' training records, run.json from PyTorch's rank): test_records_torch.py,
test_records_tensorflow.py, with the checks here."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import subprocess
import sys

import pytest
from cell_records import write_cell
from conftest import REPO, cell_settings
from scalebench import outcome, records
from scalebench.analysis import collect
from scalebench.launch import accounting
from scalebench.records.definitions import COLLECTIVES, COMPILED, EPOCH, FINAL, RANK, RECORDS, RUN, TRAINING
from scalebench.records.fields import TYPES, Field, Record, UndefinedField
from scalebench.settings import RunSettings
from scalebench.train import (
    binding,
    collectives,
    flops,
    metrics,
    observed,
    profiling,
    provenance,
    rank_env,
    site,
    step_timing,
)
from scalebench.train.interfaces import Backend
from scalebench.train.step_timing import StepTimes

PROVENANCE = {"model_flops_per_image": 1e9, "peak_tflops": 100.0, "replicas": 2}


def check_written(definition: Record, record: dict, complete: bool = True) -> None:
    """`record`'s keys are the definition's (where `complete`, every field of today's that the
    definition does not say a writer may leave out), each value of its type."""
    assert not definition.undefined(record), f"{definition.name}: define {definition.undefined(record)}"
    if complete:
        missing = sorted(set(definition.always_written()) - set(record))
        assert not missing, f"{definition.name} record lacks {missing}"
    for name, value in record.items():
        known = definition.by_name.get(name)
        if known is not None and value is not None and not (isinstance(value, float) and math.isnan(value)):
            assert isinstance(value, TYPES[known.type]), f"{definition.name}.{name}: {value!r} is not {known.type}"


def an_epoch(split: dict) -> dict:
    record = metrics.epoch_record(2, 0.5, (1e-3, 1e-3), [2.0, 0.1, 300.0], 8, 4, 4.0, PROVENANCE, 4, energy_j=None)
    window = profiling.Window(None, ".", None, None)  # no training.profile: not traced
    return {**record, **split, **window.fields(1)}


def test_an_epoch_record_holds_exactly_the_defined_fields_split_or_not():
    fast = step_timing.rank_row(2.0, 0.2, StepTimes([0.3, 0.4, 0.5], [0.1, 0.1, 0.2], 0.8))
    slow = step_timing.rank_row(2.1, 0.1, StepTimes([0.6, 0.6, 0.7], [0.0, 0.05, 0.05]))
    table = step_timing.placed(fast, 0, 2) + step_timing.placed(slow, 1, 2)
    split = an_epoch(step_timing.epoch_fields(table, ["n1", "n2"], "no timed collectives"))
    check_written(EPOCH, split)
    for rank in split["ranks"]:
        check_written(RANK, rank)
    check_written(EPOCH, an_epoch(step_timing.unmeasured("training.step_split: false")))


def test_the_final_record_and_the_cost_are_the_defined_fields(tmp_path):
    final = records.final_record("ok", 1.5, 4.0, 2) | dict.fromkeys(records.COST_FIELDS)
    check_written(FINAL, final)
    # the launcher's final record of a refused cell (outcome.py), and its run.json
    outcome.record(tmp_path, "refused", "no GPU", {"framework": "torch", "backend": "native", "gpus": 1, "seed": 1})
    lines, _ = records.read_metrics(tmp_path / "metrics.jsonl")
    check_written(FINAL, lines[-1], complete=False)
    check_written(RUN, json.loads((tmp_path / "run.json").read_text()), complete=False)


# a two-rank cell's place, for the backends whose training record the tests build
TWO_RANKS = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}


def training_record_of(training, framework: str, made) -> tuple[dict, dict]:
    """run.json's training record of a two-rank cell of `framework` with these settings whose
    backend is `made`, and the backend's options."""
    options = made.options()
    record = provenance.training_record(
        training,
        framework=framework,
        device_type="cuda",
        replicas=2,
        threads=1,
        deterministic=True,
        passes=made.backward_passes_per_step,
        compression=made.gradient_compression,
        backend_options=options,
    )
    return record, options


def training_mismatch(record: dict, options: dict) -> tuple[list[str], list[str]]:
    """(the training record's names that TRAINING does not define, TRAINING's names it lacks), a
    backend's options aside: the record is built from TrainingSettings' fields, so a renamed or
    added setting shows here, not as an empty column of the analysis."""
    names = set(record) - set(options)
    return sorted(names - set(TRAINING.names)), sorted(set(TRAINING.written()) - names)


def assert_the_training_record_is_the_defined_settings_and_the_backends_options(
    framework: str, backend: str, make
) -> None:
    """The training record of a two-rank cell of `backend`, which `make(place, training)` builds (each
    framework's: test_records_torch.py, test_records_tensorflow.py)."""
    run = RunSettings.from_json(cell_settings(framework, backend, 2), "data", "out")
    made = make(rank_env.detect(TWO_RANKS), run.training)
    record, options = training_record_of(run.training, framework, made)
    assert record["device"] == "cuda"
    check_written(TRAINING, {key: value for key, value in record.items() if key not in options})
    assert training_mismatch(record, options) == ([], [])  # exactly the defined names (training is open)
    assert not set(options) & set(TRAINING.names), "a backend's option shadows a training setting"


def test_a_renamed_training_setting_fails_against_the_definition():
    """TrainingSettings' field renamed (eval_every -> validate_every): the record follows the
    dataclass, and the comparison with records/definitions.py names both names."""
    from scalebench.settings import TrainingSettings

    training = RunSettings.from_json(cell_settings("torch", "native", 2), "data", "out").training
    renamed_fields = [
        ("validate_every" if known.name == "eval_every" else known.name, known.type)
        for known in dataclasses.fields(TrainingSettings)
    ]
    Renamed = dataclasses.make_dataclass("TrainingSettings", renamed_fields, frozen=True)  # noqa: N806
    values = {known.name: getattr(training, known.name) for known in dataclasses.fields(training)}
    values["validate_every"] = values.pop("eval_every")
    # a backend without options of its own (the base class): the record is the settings' alone
    record, options = training_record_of(Renamed(**values), "torch", Backend(rank_env.detect(TWO_RANKS)))
    assert record["validate_every"] == training.eval_every and "eval_every" not in record
    assert training_mismatch(record, options) == (["validate_every"], ["eval_every"])


def test_the_training_definitions_take_each_settings_meaning_and_type_from_the_schema():
    """A setting's field is the schema's key (its first sentence, its type, what null means); only
    what the rank resolves keeps a meaning written in records/definitions.py."""
    from scalebench import config_keys
    from scalebench.records import definitions

    keys = config_keys.key("training")["properties"]
    resolved = {field.name for field in definitions.RESOLVED}
    for name, node in keys.items():
        if name in definitions.NOT_RECORDED or name in definitions.BACKEND_SECTIONS:
            assert name not in TRAINING.names
        elif name in resolved:
            assert TRAINING.by_name[name] in definitions.RESOLVED
        else:
            known = TRAINING.by_name[name]
            assert known.meaning.startswith(f"training.{name}: {config_keys.first_sentence(node['description'])}")
            assert known.type == config_keys.record_type(node) and bool(known.empty) == config_keys.nullable(node)
    assert TRAINING.by_name["steps_per_epoch"].empty.startswith(
        "training.steps_per_epoch null: one pass over the shard"
    )
    assert TRAINING.by_name["collective_timeout_s"].unit == "s"


def test_a_key_added_to_the_schema_is_defined_in_the_training_record_with_its_own_words():
    from scalebench import config_keys
    from scalebench.records import definitions

    schema = copy.deepcopy(config_keys.declared())
    keys = schema["properties"]["training"]["properties"]
    keys["warmup_steps"] = {
        "description": "Steps of linear warm-up (e.g. 100). More words.",
        "type": ["integer", "null"],
    }
    keys["epochs"]["description"] = "Epochs to train, each a pass over the shard."
    fields = {field.name: field for field in definitions.training_fields(schema)}
    assert fields["warmup_steps"] == Field(
        "warmup_steps",
        "int",
        "",
        "training.warmup_steps: Steps of linear warm-up (e.g. 100).",
        "training.warmup_steps is null",
    )
    assert fields["epochs"].meaning == "training.epochs: Epochs to train, each a pass over the shard."
    keys["device"]["description"] = "Changed."  # a resolved value keeps its own meaning
    assert definitions.training_fields(schema)[list(fields).index("device")].meaning.startswith("cuda or cpu")


def test_run_json_from_the_ranks_builders_and_the_launchers_accounting_is_the_defined_fields():
    cell = {"framework": "torch", "backend": "native", "gpus": 2, "seed": 1, "axes": []}
    run = provenance.start_record(cell, "abc")
    run |= provenance.rank_layout(["n1", "n1"], ["cpu", "cpu"], (64, 64))
    run |= binding.fields(lambda text: [text, text], env={})
    run |= site.fields(call=lambda *args: (None, "no nvidia-smi"), sys_root="/nonexistent", maps="", env={})
    run |= flops.peak_fields("cpu", False, "fp32", {})
    result = collectives.Result(reason="one replica: nothing to exchange")
    run |= collectives.run_fields(result, 1)
    run |= observed.run_fields({"compute_dtype": "float32", "compiled": observed.compiled_record("none", 0, 0, [])})
    run |= accounting.read(None, None)
    check_written(RUN, run, complete=False)
    check_written(COLLECTIVES, run["collectives"])
    check_written(COMPILED, run["compiled"])


def test_an_old_records_words_and_names_read_as_todays():
    """The compatibility reader (records.read_run): an old TensorFlow record's device gpu reads as
    cuda (run.json's and its training section's), an old world_size (which counted replicas) as
    replicas; today's words and a record that holds both names keep today's."""
    old = records.read_run({"device": "gpu", "training": {"device": "gpu"}, "world_size": 4, "processes": 1})
    assert old["device"] == "cuda" and old["training"]["device"] == "cuda"
    assert old["replicas"] == 4 and "world_size" not in dict(old)
    with pytest.raises(UndefinedField):
        old.get("world_size")  # the analysis asks for today's name only
    today = records.read_run({"device": "cpu", "training": {"device": "cuda"}, "replicas": 2, "world_size": 9})
    assert (today["device"], today["training"]["device"], today["replicas"]) == ("cpu", "cuda", 2)


def test_the_docs_say_what_each_renamed_field_was_called():
    text = (REPO / "docs" / "records.md").read_text()
    assert "| `replicas` | int |" in text and "`world_size`" in text
    assert "`gpu` reads as `cuda`" in text


def test_the_analysis_refuses_a_name_no_record_defines():
    epoch = EPOCH.read({"type": "epoch", "epoch_time": 2.0})
    with pytest.raises(UndefinedField, match="epoch record has no field 'epoch_time'"):
        epoch.get("epoch_time")
    with pytest.raises(UndefinedField):
        _ = "epoch_time" in epoch
    run = RUN.read({"collectives": {"op": "all_reduce"}, "training": {"tf_strategy": "x"}})
    with pytest.raises(UndefinedField, match="collectives record has no field 'operation'"):
        run["collectives"].get("operation")
    assert run["training"]["tf_strategy"] == "x"  # training is open: a backend's own options


def test_a_renamed_epoch_field_fails_the_collection_instead_of_reading_as_nan(tmp_path, monkeypatch):
    keys = {"framework": "torch", "backend": "native", "variant": "", "gpus": 1, "seed": 1}
    folder = write_cell(tmp_path, "torch", "native", 1, 1, [3.0, 2.0])
    row, _ = collect.read_cell(folder, keys)
    assert row["steady_epoch_s"] == 2.0
    renamed = tuple(f if f.name != "epoch_time_s" else Field("epoch_seconds", "float", "s", "x") for f in EPOCH.fields)
    monkeypatch.setattr(collect, "EPOCH", Record("epoch", "", "", renamed))
    with pytest.raises(UndefinedField, match="epoch_time_s"):
        collect.read_cell(folder, keys)


def test_every_field_says_what_it_is():
    for definition in RECORDS:
        for known in definition.fields:
            assert known.meaning and known.meaning == known.meaning.strip(), f"{definition.name}.{known.name}"


def test_docs_records_md_is_generated_from_the_definitions():
    """docs/records.md is the current output of tools/records_reference.py, and names every field."""
    page = subprocess.run(
        [sys.executable, str(REPO / "tools" / "records_reference.py")], capture_output=True, text=True, check=True
    ).stdout
    assert page == (REPO / "docs" / "records.md").read_text(), "run: python tools/records_reference.py --write"
    for definition in RECORDS:
        assert all(f"| `{known.name}` |" in page for known in definition.fields)
    assert "(docs/records.md)" in (REPO / "README.md").read_text()
