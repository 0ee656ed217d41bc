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
    assert len(json.loads(made.cells_json())) == 12 and len(json.loads(made.keys_json(made.cells))) == 8
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


def test_the_rounds_rules_are_read_once_from_matrix_seeds_and_verdicts(schema):
    study = adaptive_study(schema)
    rules = seeds.Rules.of(study.config)
    assert rules == seeds.Rules(2, 4, 0.02, ("throughput", "time_to_target"))
    assert seeds.Rules(**json.loads(seeds.Rules.json_of(study.config))) == rules  # as the scripts read it
    assert seeds.Rules.json_of(config(schema, [1, 2])) == "null"
    chosen = adaptive_study(schema, verdicts={"rounds_decide": ["throughput"], "equivalence": 0.05})
    assert seeds.Rules.of(chosen.config) == seeds.Rules(2, 4, 0.05, ("throughput",))


def test_the_kinds_the_rounds_may_decide_are_the_kinds_the_answer_rests_on(schema):
    from scalebench.analysis.verdicts import KINDS

    listed = schema["properties"]["verdicts"]["properties"]["rounds_decide"]
    assert tuple(listed["items"]["enum"]) == seeds.ANSWER_KINDS == tuple(listed["default"])
    assert set(seeds.ANSWER_KINDS) <= set(KINDS)


@pytest.mark.parametrize(
    "given, said",
    [
        (
            ["throughput", "epochs"],
            "config key 'verdicts.rounds_decide[1]': 'epochs' is not one of ['throughput', 'time_to_target']",
        ),
        (
            ["epoch_time"],
            "config key 'verdicts.rounds_decide[0]': 'epoch_time' is not one of ['throughput', 'time_to_target']",
        ),
        ([], "config key 'verdicts.rounds_decide': the list is empty"),
        ("throughput", "config key 'verdicts.rounds_decide': 'throughput' is not of type 'array'"),
    ],
)
def test_a_kind_of_verdict_the_project_does_not_have_is_refused_before_any_job(schema, given, said):
    with pytest.raises(ConfigError) as refused:
        adaptive_study(schema, verdicts={"rounds_decide": given})
    assert said in str(refused.value)


ROUND_ONE = {
    "round": 1,
    "cells": [{"framework": "torch", "backend": "native", "variant": "", "gpus": 2, "seed": 1}],
    "adds": [],
    "stopped": "every comparison the answer rests on is decided",
}


@pytest.mark.parametrize(
    "text, said",
    [
        ('{"round": 1, "cells": ', "JSONDecodeError: Expecting value"),
        ("", "JSONDecodeError"),
        (json.dumps({**ROUND_ONE, "round": "1"}), "'1' is not a whole number"),
        (json.dumps({**ROUND_ONE, "cells": 3}), "3 is not a list of cells"),
        (json.dumps({**ROUND_ONE, "cells": [{**ROUND_ONE["cells"][0], "gpus": "2"}]}), "gpus '2' is not of type int"),
        (json.dumps({key: value for key, value in ROUND_ONE.items() if key != "adds"}), "no 'adds'"),
        (json.dumps([1, 2]), "TypeError"),
        (b"\xff\xfe".decode("latin-1"), "JSONDecodeError"),
    ],
)
def test_a_round_file_that_cannot_be_read_is_named_never_a_traceback(tmp_path, text, said):
    path = tmp_path / "round-1.json"
    path.write_text(text)
    with pytest.raises(seeds.RoundFileError) as refused:
        seeds.read_round(path)
    assert str(refused.value).startswith(f"the round file {path} cannot be read (") and said in str(refused.value)


def test_planning_removes_a_round_file_that_cannot_be_read_and_says_so(schema, workdir):
    folder = Path(seeds.ROUNDS_FOLDER)
    folder.mkdir(parents=True)
    (folder / "round-1.json").write_text(json.dumps(ROUND_ONE))
    (folder / "round-2.json").write_text('{"round": 1, "cells": ')
    out = io.StringIO()
    planning.plan_study(adaptive_study(schema), start("-n", declared_gpus=0), env={}, out=out)
    assert (folder / "round-1.json").exists() and not (folder / "round-2.json").exists()
    assert (
        f"warning: the round file {folder / 'round-2.json'} cannot be read (JSONDecodeError: Expecting value: "
        "line 1 column 23 (char 22)): removed; the round is decided again from the cells' records"
    ) in out.getvalue()
    assert seeds.read_round(folder / "round-1.json").stopped == ROUND_ONE["stopped"]
