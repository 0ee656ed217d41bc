"""matrix.seeds' two forms: the list as before, {initial, max} refused in its bad forms before any job
(naming matrix.seeds), its first seeds expanded, the cells a round could add planned like the others
(settings.json, the draw) and nothing else, and the rounds' stamp rewritten only when what decides
them changes."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from conftest import tiny_config
from scalebench.cell import Cell
from scalebench.cluster import nvidia_smi
from scalebench.config import ConfigError, plan, planning, seeds, validate
from test_plan import start

pytestmark = pytest.mark.unit


def config(schema: dict, matrix_seeds, **matrix) -> dict:
    values = {"frameworks": ["torch"], "backends": ["native"], "gpus": [1, 2], "seeds": matrix_seeds, **matrix}
    return validate(tiny_config(matrix=values), schema)


@pytest.mark.parametrize(
    "given, said",
    [
        ({"initial": 1, "max": 3}, "config key 'matrix.seeds.initial': 1 is less than the minimum of 2"),
        ({"initial": 3, "max": 2}, "config key 'matrix.seeds': max 2 is below initial 3"),
        ({"initial": 2.5, "max": 4}, "config key 'matrix.seeds.initial': 2.5 is not of type 'integer'"),
        ({"initial": 3.0, "max": 5}, "config key 'matrix.seeds': 3.0 is not a whole number"),
        ([1, 2.0], "config key 'matrix.seeds': 2.0 is not a whole number"),
        (2.5, "config key 'matrix.seeds': 2.5 is not a list of integers or {initial: integer, max: integer}"),
        ([1, {"initial": 2, "max": 3}], "config key 'matrix.seeds[1]': {'initial': 2, 'max': 3} is not of type"),
        ({"initial": 2, "max": 4, "list": [1, 2]}, "unknown config key 'matrix.seeds.list'"),
        ({"initial": 2}, "config key 'matrix.seeds': 'max' is a required property"),
    ],
)
def test_bad_forms_are_refused_naming_matrix_seeds(schema, given, said):
    with pytest.raises(ConfigError) as refused:
        config(schema, given)
    assert said in str(refused.value)
    assert "matrix.seeds" in str(refused.value)


def test_the_mapping_from_the_command_line_is_read_as_numbers(schema):
    """--config 'matrix={"seeds": {"initial": 2, "max": 4}}' arrives as strings inside the structure."""
    resolved = config(schema, {"initial": "2", "max": "4"})
    assert resolved["matrix"]["seeds"] == {"initial": 2, "max": 4}
    assert seeds.seed_rule(resolved) == seeds.SeedRule((1, 2), 4)


def test_a_list_works_as_before_and_the_mapping_starts_with_seeds_one_to_initial(schema):
    listed = plan.Study.validate(tiny_config(matrix={"gpus": [1, 2], "seeds": [3, 1]}), schema)
    assert [cell.path for cell in listed.matrix.cells()] == [
        "torch/native/g1/s1",
        "torch/native/g1/s3",
        "torch/native/g2/s1",
        "torch/native/g2/s3",
    ]
    assert not listed.seed_rule.adaptive and seeds.round_cells(listed.matrix.cells(), listed.seed_rule) == ()
    adaptive = plan.Study.validate(tiny_config(matrix={"gpus": [1, 2], "seeds": {"initial": 3, "max": 5}}), schema)
    assert sorted({cell.seed for cell in adaptive.matrix.cells()}) == [1, 2, 3]
    assert adaptive.seed_rule.blocks == [1, 2, 3, 4, 5]


def test_the_rounds_could_add_seeds_only_where_the_answer_can_rest_on_a_comparison(schema):
    """torch with three backends and TensorFlow with two, at 1, 2 and 4 GPUs: every configuration at 4
    GPUs (each framework's largest; the frameworks share native and horovod there), seeds 4 and 5."""
    study = plan.Study.validate(
        tiny_config(
            matrix={
                "frameworks": ["torch", "tensorflow"],
                "backends": ["native", "horovod", "fsdp"],
                "gpus": [1, 2, 4],
                "seeds": {"initial": 3, "max": 5},
            }
        ),
        schema,
    )
    added = seeds.round_cells(study.matrix.cells(), study.seed_rule)
    assert sorted(cell.path for cell in added) == [
        f"{pair}/g4/s{seed}"
        for pair in ("tensorflow/horovod", "tensorflow/native", "torch/fsdp", "torch/horovod", "torch/native")
        for seed in (4, 5)
    ]


def test_frameworks_share_a_backend_at_a_count_below_a_frameworks_largest():
    keys = [("torch", "native", "", 8), ("torch", "native", "", 4), ("tensorflow", "native", "", 4)]
    assert sorted(seeds.round_configurations(keys)) == sorted(keys)  # torch's 8, and both at the shared 4
    assert seeds.round_configurations([("torch", "native", "", 1), ("torch", "horovod", "", 1)]) == [
        ("torch", "native", "", 1),
        ("torch", "horovod", "", 1),
    ]


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(nvidia_smi, "call", lambda *_, **__: (None, "nvidia-smi is not on this node's PATH"))
    return tmp_path


def adaptive_study(schema: dict, **sections) -> plan.Study:
    values = tiny_config(
        matrix={"frameworks": ["torch"], "backends": ["native", "horovod"], "gpus": [1, 2]},
        order={"seed": 5},
    )
    values["matrix"]["seeds"] = {"initial": 2, "max": 4}
    for name, section in sections.items():
        values[name] = {**values.get(name, {}), **section}
    return plan.Study.validate(values, schema)


def test_planning_plans_the_cells_a_round_could_add_and_stamps_what_decides_the_rounds(schema, workdir):
    made = planning.plan_study(adaptive_study(schema), start("-n", declared_gpus=0), env={}, out=io.StringIO())
    assert sorted(cell.path for cell in made.round_cells) == [
        "torch/horovod/g2/s3",
        "torch/horovod/g2/s4",
        "torch/native/g2/s3",
        "torch/native/g2/s4",
    ]
    assert {cell.seed for cell in made.cells} == {1, 2} and len(made.cells) == 8
    # each with its settings.json (a round's train job only reads it), none for a cell no round adds
    for cell in made.round_cells:
        written = json.loads(Path(made.settings_file(cell)).read_text())
        assert written == made.settings(cell) and written["cell"]["seed"] == cell.seed
    assert not Path("results/runs/torch/native/g1/s3").exists()
    # drawn in the study's order like the others, after them (their block), and askable by name
    assert all(made.priority(cell) > 0 for cell in made.possible)
    assert made.cell_of("torch", "native", "2", "4") == Cell("torch", "native", 2, 4)
    assert made.round_cells_of(({"framework": "torch", "backend": "native", "variant": "", "gpus": 2, "seed": 3},))
    with pytest.raises(plan.PlanError, match="torch/native/g1/s3 is named by a round of matrix.seeds"):
        made.round_cells_of(({"framework": "torch", "backend": "native", "variant": "", "gpus": 1, "seed": 3},))
    # what the analysis reads: every cell a round could add (it keeps those the rounds added)
    assert len(json.loads(made.cells_json())) == 12 and len(json.loads(made.first_cells_json())) == 8
    # the stamp: rewritten only when what decides the rounds changes
    stamp = Path(seeds.ROUNDS_STAMP)
    before = stamp.read_text()
    os.utime(stamp, (1, 1))
    planning.plan_study(adaptive_study(schema), start("-n", declared_gpus=0), env={}, out=io.StringIO())
    assert stamp.stat().st_mtime == 1
    planning.plan_study(
        adaptive_study(schema, verdicts={"equivalence": 0.05}), start("-n", declared_gpus=0), env={}, out=io.StringIO()
    )
    assert stamp.read_text() != before and stamp.stat().st_mtime > 1


def test_a_list_of_seeds_plans_no_round_and_writes_no_stamp(schema, workdir):
    values = tiny_config(matrix={"gpus": [1, 2], "seeds": [1, 2]})
    made = planning.plan_study(
        plan.Study.validate(values, schema), start("-n", declared_gpus=0), env={}, out=io.StringIO()
    )
    assert made.round_cells == () and made.possible == made.cells
    assert not Path(seeds.ROUNDS_STAMP).exists()
