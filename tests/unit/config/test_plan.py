"""The study's plan (config/plan.py) and the one place that plans (config/planning.py): one immutable
object per start with a method per question the rules ask, the matrix expanded once, every side
effect of planning in plan_study, and none of them in a job's own process."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from conftest import REPO, tiny_config
from scalebench import rerun
from scalebench.analysis import round_outlook
from scalebench.cell import Cell
from scalebench.cluster import nvidia_smi
from scalebench.config import matrix, plan, planning, slurm_check, slurm_plugin
from scalebench.config.freshness import Verdict, code_digest

NATIVE_1 = Cell("torch", "native", 1, 1)
NATIVE_2 = Cell("torch", "native", 2, 1)
NATIVE_4 = Cell("torch", "native", 4, 1)


def study(schema: dict, **sections) -> plan.Study:
    """A validated tiny study: torch/native on 1, 2 and 4 GPUs, one seed (sections updated)."""
    config = tiny_config(matrix={"frameworks": ["torch"], "backends": ["native"], "gpus": [1, 2, 4], "seeds": [1]})
    for name, values in sections.items():
        config[name] = {**config.get(name, {}), **values} if isinstance(values, dict) else values
    return plan.Study.validate(config, schema)


def refuse(*args, **kwargs):
    raise AssertionError(f"called where nothing may happen: {args} {kwargs}")


def start(*argv: str, main: bool = True, **fields) -> planning.Start:
    """A start of `snakemake ARGV` as rules/common.smk would describe it (register_gpus and
    train_resources refuse to be called unless given)."""
    values = {
        "main_process": main,
        "argv": ("snakemake", *argv),
        "basedir": str(REPO),
        "configfiles": ("/study/config.yaml",),
        "snakefile": str(REPO / "Snakefile"),
        "declared_gpus": None,
        "cores_without_nodes": False,
        "register_gpus": refuse,
        "train_resources": refuse,
        "round_outlook": round_outlook.chances,
    }
    return planning.Start(**{**values, **fields})


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """The study's working directory, empty, on a machine without nvidia-smi."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(nvidia_smi, "call", lambda *_, **__: (None, "nvidia-smi is not on this node's PATH"))
    return tmp_path


def finish(cell: Cell) -> None:
    """The two outputs of the cell's train job, in its folder."""
    folder = Path(cell.folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text("{}")
    (folder / "metrics.jsonl").write_text("")


# --- the plan as an object


def test_the_plan_cannot_be_changed_by_its_reader_or_its_maker(schema):
    refused = {NATIVE_4: "SLURM refuses its job"}
    made = plan.StudyPlan(study(schema), None, [NATIVE_1, NATIVE_2], (), refused, priorities={NATIVE_1: 2})
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.cells = ()
    with pytest.raises(TypeError):
        made.refused[NATIVE_1] = "no"
    with pytest.raises(TypeError):
        made.priorities[NATIVE_2] = 7
    refused[NATIVE_2] = "added by the maker afterwards"
    made.config["matrix"]["gpus"].append(8)
    assert made.cells == (NATIVE_1, NATIVE_2) and dict(made.refused) == {NATIVE_4: "SLURM refuses its job"}
    assert made.config["matrix"]["gpus"] == [1, 2, 4] and made.study.config["matrix"]["gpus"] == [1, 2, 4]
    assert isinstance(made.finished, frozenset) and isinstance(made.study.matrix.combinations, tuple)


def test_each_question_the_rules_ask_is_answered_from_the_plan(schema):
    studied = study(schema, order={"seed": 3, "blocks": True}, matrix={"seeds": [2, 1]}, partial=True)
    cells = studied.matrix.cells()
    ordered = planning._order(studied, cells)
    made = plan.StudyPlan(studied, 2, cells, (), finished={NATIVE_1}, priorities=ordered)
    assert made.outputs("run.json")[:2] == [
        "results/runs/torch/native/g1/s1/run.json",
        "results/runs/torch/native/g1/s2/run.json",
    ]
    assert len(made.outputs("run.json")) == 6
    assert made.analysis_outputs("metrics.jsonl") == ["results/runs/torch/native/g1/s1/metrics.jsonl"]  # partial
    assert made.cell_of("torch", "native", "2", "1") == NATIVE_2
    assert made.settings_file(NATIVE_2) == "results/runs/torch/native/g2/s1/settings.json"
    assert made.settings(NATIVE_2)["cell"]["gpus"] == 2 and made.settings(NATIVE_2)["training"]["epochs"] == 3
    assert made.default_settings(NATIVE_2)["training"]["epochs"] == 20  # the schema's default
    # blocks: matrix.seeds' order, so seed 1's cells wait for seed 2's, and start after them
    assert sorted(made.previous_block(NATIVE_1)) == [c for c in cells if c.seed == 2]
    assert made.previous_block(Cell("torch", "native", 1, 2)) == []
    assert min(made.priority(c) for c in cells if c.seed == 2) > max(made.priority(c) for c in cells if c.seed == 1)
    assert made.priority(Cell("torch", "native", 8, 1)) == 0  # outside the order
    assert made.local_gpus(2) == 2 and made.local_gpus(4) == 4
    cpu = plan.StudyPlan(study(schema, training={"device": "cpu"}), 2, cells, ())
    assert cpu.local_gpus(2) == 0
    entries = json.loads(made.cells_json())
    assert [(e["gpus"], e["seed"]) for e in entries] == [(c.gpus, c.seed) for c in cells]
    assert entries[0]["settings"]["training"]["epochs"] == 3 and entries[0]["defaults"]["training"]["epochs"] == 20


def test_a_cell_the_plan_leaves_out_is_refused_naming_why(schema):
    studied = study(schema, training={"device": "cuda"})
    left = studied.matrix.left_out(2)
    made = plan.StudyPlan(studied, 2, studied.matrix.cells(2), left)
    with pytest.raises(plan.PlanError, match=r"^torch/native/g4/s1 cannot run: needs 4 GPUs and this machine has 2"):
        made.cell_of("torch", "native", "4", "1")
    with pytest.raises(plan.PlanError, match=r"'bf16' is not a variant of this study's optional axes.*\(none\)"):
        made.cell_of("torch", "native", "2", "1", "bf16")
    with pytest.raises(plan.PlanError, match=r"torch/fsdp/g1/s1 cannot run: fsdp needs at least 2 ranks"):
        made.cell_of("torch", "fsdp", "1", "1")  # named outside the matrix, and the matrix's rules refuse it
    on_cpu = plan.StudyPlan(study(schema, training={"device": "cpu"}), 2, studied.matrix.cells(), ())
    assert on_cpu.cell_of("torch", "native", "8", "2") == Cell("torch", "native", 8, 2)  # outside, but it can run
    assert [json.loads(made.left_out_json())[0][key] for key in ("backend", "gpus", "every_count")] == [
        "native",
        [4],
        False,
    ]
    # the resources' question: only the config's reasons (the pre-flight asks it while the plan is made)
    assert studied.cell_of("torch", "native", "4", "1") == NATIVE_4
    with pytest.raises(plan.PlanError, match="fsdp needs at least 2 ranks"):
        studied.cell_of("torch", "fsdp", "1", "1")


def test_finished_cells_have_both_outputs_and_are_not_retrained(workdir):
    for cell in (NATIVE_1, NATIVE_2):
        finish(cell)
    Path(NATIVE_4.folder).mkdir(parents=True)
    (Path(NATIVE_4.folder) / "run.json").write_text("{}")  # one output only
    verdicts = {NATIVE_2: Verdict("changed", "training.epochs: 2 -> 3")}
    assert plan.finished_cells((NATIVE_1, NATIVE_2, NATIVE_4), verdicts) == {NATIVE_1}


# --- the matrix, expanded once


def test_one_start_expands_the_matrix_once(schema, workdir, monkeypatch):
    expansions, variant_reads = [], []
    every_cell, variants = matrix._every_cell, matrix.variants
    monkeypatch.setattr(matrix, "_every_cell", lambda *a: expansions.append(1) or every_cell(*a))
    monkeypatch.setattr(matrix, "variants", lambda *a: variant_reads.append(1) or variants(*a))
    config = tiny_config(
        matrix={"frameworks": ["torch"], "backends": ["native", "fsdp"], "gpus": [1, 2], "seeds": [1, 2]}
    )
    studied = plan.Study.validate(config, schema)  # the schema's defaults: validated, not expanded
    made = planning.plan_study(studied, start("-n", declared_gpus=0), out=io.StringIO())
    made.cells_json(), made.left_out_json(), made.analysis_outputs("run.json"), made.cell_of("torch", "fsdp", "2", "2")
    assert (len(expansions), len(variant_reads)) == (1, 1)
    assert [entry.item for entry in made.left_out] == ["torch/fsdp g1"] and len(made.cells) == 6


# --- planning: the one place


def test_planning_writes_each_cells_settings_and_the_stamp_and_says_what_it_found(schema, workdir, monkeypatch, capsys):
    studied = study(schema, training={"device": "cpu"})
    finish(NATIVE_1)
    finish(NATIVE_2)
    found = {NATIVE_1.folder: Verdict("current"), NATIVE_2.folder: Verdict("changed", "training.epochs: 2 -> 3")}
    monkeypatch.setattr(planning, "verdict", lambda folder, *_: found.get(folder, Verdict("new")))
    started = start("-n", "--rerun-triggers", "mtime", "params", "--cores", "2", declared_gpus=0)
    made = planning.plan_study(studied, started)
    said = capsys.readouterr().err
    for cell in (NATIVE_1, NATIVE_2, NATIVE_4):
        written = json.loads(Path(made.settings_file(cell)).read_text())
        assert written == studied.settings(cell)
    outputs = (Path(NATIVE_2.folder) / "run.json").stat().st_mtime
    assert os.path.getmtime(made.settings_file(NATIVE_2)) > outputs  # newer: Snakemake retrains it
    assert os.path.getmtime(made.settings_file(NATIVE_1)) < (Path(NATIVE_1.folder) / "run.json").stat().st_mtime
    assert "warning: torch/native/g2/s1 was trained with other settings (training.epochs: 2 -> 3)" in said
    assert "warning: rerun triggers params are on; profiles/default sets `rerun-triggers: mtime`" in said
    assert made.finished == {NATIVE_1} and made.verdicts[NATIVE_2].state == "changed"
    assert made.machine_gpus == 0 and made.cells == (NATIVE_1, NATIVE_2, NATIVE_4)  # cpu ranks hold no GPU
    # the analysis' stamp: the project's code, the study's config, this invocation
    stamp = Path(planning.ANALYSIS_STAMP)
    digest = stamp.read_text()
    invocation = rerun.from_argv(list(started.argv), os.getcwd(), ["/study/config.yaml"], str(REPO / "Snakefile"))
    analysed = {section: value for section, value in studied.config.items() if section != "history"}
    content = {"code": code_digest(REPO), "config": analysed, "invocation": dataclasses.asdict(invocation)}
    assert json.loads(digest)["digest"] == hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
    before = stamp.stat().st_mtime
    time.sleep(0.01)
    planning.plan_study(studied, started)
    assert stamp.read_text() == digest and stamp.stat().st_mtime == before  # nothing changed: not rewritten
    # where the finished study is kept redraws nothing (history.path, the history target's)
    kept = study(schema, training={"device": "cpu"}, history={"path": str(workdir / "history")})
    planning.plan_study(kept, started)
    assert stamp.read_text() == digest and stamp.stat().st_mtime == before
    planning.plan_study(study(schema, training={"device": "cpu", "epochs": 4}), started)
    assert stamp.read_text() != digest


def test_a_local_run_counts_the_machines_gpus_and_leaves_out_what_does_not_fit(schema, workdir, capsys):
    registered = []
    counted = start("-n", "--cores", "2", register_gpus=registered.append)
    made = planning.plan_study(study(schema, training={"device": "cuda"}), counted, env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert registered == [2] and made.machine_gpus == 2 and made.cells == (NATIVE_1, NATIVE_2)
    assert "left out: torch/native g4: needs 4 GPUs and this machine has 2 (local_gpus=2)" in capsys.readouterr().err
    assert not Path(NATIVE_4.folder).exists()
    too_many = start("-n", "--cores", "2", declared_gpus=3, register_gpus=registered.append)
    with pytest.raises(plan.PlanError, match="declares more GPUs than this machine shows: 2"):
        planning.plan_study(study(schema), too_many, env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert registered == [2]


def test_a_cell_named_outside_the_matrix_is_planned_and_a_left_out_one_is_not(schema, workdir):
    targets = ("results/runs/torch/native/g8/s2/metrics.jsonl", f"{workdir}/results/runs/torch/fsdp/g1/s1/run.json")
    made = planning.plan_study(study(schema, training={"device": "cpu"}), start("-n", "--", *targets, declared_gpus=0))
    named = Cell("torch", "native", 8, 2)
    assert json.loads(Path(made.settings_file(named)).read_text())["cell"] == named.to_json()
    assert made.verdicts[named].state == "new" and named not in made.cells
    assert not Path("results/runs/torch/fsdp").exists()  # fsdp on one rank: refused when its job asks


def test_a_jobs_own_process_plans_nothing(schema, workdir, monkeypatch, capsys):
    monkeypatch.setattr(subprocess, "run", refuse)  # no program is run (nvidia-smi, sinfo, sbatch, squeue)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    finish(NATIVE_2)
    studied = study(schema, order={"seed": 1, "blocks": False})
    made = planning.plan_study(
        studied, start("--executor", "slurm", "--", "results/runs/torch/native/g8/s1/run.json", main=False)
    )
    assert sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*") if p.is_file()) == [
        "results/runs/torch/native/g2/s1/metrics.jsonl",
        "results/runs/torch/native/g2/s1/run.json",
    ]
    assert capsys.readouterr() == ("", "")
    assert made.cells == studied.matrix.cells() and made.machine_gpus is None
    assert dict(made.verdicts) == dict(made.refused) == dict(made.priorities) == {}
    assert made.finished == {NATIVE_2}


def test_the_slurm_preflight_leaves_out_what_sbatch_refuses(schema, workdir, monkeypatch, capsys):
    installed, asked = [], []
    monkeypatch.setattr(
        slurm_plugin,
        "install",
        lambda window_s, by_priority, stuck_after_min: installed.append((window_s, by_priority, stuck_after_min)),
    )
    monkeypatch.setattr(slurm_check, "node_cpus_problem", lambda *a: None)
    monkeypatch.setattr(slurm_check, "unknown_nodes_problem", lambda *a: None)

    def check(cells, resources_of, window_s):
        asked.extend(cells)
        assert resources_of(NATIVE_4) == ({"nodes": 1}, 4)
        return slurm_check.Findings(
            {NATIVE_4: "SLURM refuses its job (sbatch --test-only ...): Invalid qos"}, ["slurm check: 1 of 2"]
        )

    monkeypatch.setattr(slurm_check, "check", check)
    finish(NATIVE_1)
    monkeypatch.setattr(
        planning, "verdict", lambda folder, *_: Verdict("current" if folder == NATIVE_1.folder else "new")
    )
    resources = start("--executor", "slurm", "-n", train_resources=lambda cell: ({"nodes": 1}, cell.gpus))
    made = planning.plan_study(study(schema, order={"seed": 5, "blocks": False}), resources)
    assert installed == [(20 * 60, True, None)] and asked == [NATIVE_2, NATIVE_4]  # the finished cell is not submitted
    assert made.cells == (NATIVE_1, NATIVE_2) and set(made.priorities) == {NATIVE_1, NATIVE_2}
    assert dict(made.refused) == {NATIVE_4: "SLURM refuses its job (sbatch --test-only ...): Invalid qos"}
    with pytest.raises(plan.PlanError, match="torch/native/g4/s1 cannot run: SLURM refuses its job"):
        made.cell_of("torch", "native", "4", "1")
    said = capsys.readouterr().err
    assert "slurm check: 1 of 2" in said and "left out: torch/native g4: SLURM refuses its job" in said
    assert json.loads(made.left_out_json())[0]["reason"].endswith("Invalid qos")


def test_another_plugin_version_stops_the_start_before_any_request(schema, workdir, monkeypatch):
    install = slurm_plugin.install
    monkeypatch.setattr(slurm_plugin, "install", lambda *a, **k: install(60, version="2.9.0"))
    monkeypatch.setattr(slurm_check, "check", refuse)
    with pytest.raises(plan.PlanError, match="written for 2.8.0, and 2.9.0 is installed"):
        planning.plan_study(study(schema), start("--executor", "slurm", "-n"))


# --- rules/common.smk reads the plan


def test_common_smk_holds_no_planning_of_its_own():
    """Validation, the plan's construction and pure functions that read it: no state of its own that
    it changes, no file written, no program run (config/planning.py does all of that)."""
    text = (REPO / "rules" / "common.smk").read_text()
    for word in (
        "subprocess",
        "open(",
        "write_",
        "os.utime",
        "register_resource(",
        "global ",
        "sb_freshness",
        "sb_slurm",
    ):
        assert word not in text.replace("workflow.register_resource(sb_local_gpus", ""), word
    # module-level names are assigned once; Snakemake's own config is the one mapping changed, filled
    # with the schema's defaults (as snakemake.utils.validate does), inside validate()
    changes = [
        line.strip()
        for line in text.splitlines()
        if re.search(r"\.(update|clear|append|pop|setdefault)\(|\[:\] =|\] = ", line)
    ]
    assert changes == ["config.clear()", "config.update(study.config)", 'tables.append("baseline")'], changes
    names = re.findall(r"^([A-Z_]+) = ", text, re.MULTILINE)
    assert len(names) == len(set(names)) and not {"VERDICTS", "SLURM_REFUSED", "RUN_ORDER", "CELLS"} & set(names)
    assert "PLAN = study_plan()" in (REPO / "rules" / "train.smk").read_text()


def test_a_start_of_the_real_workflow_expands_the_matrix_once(tmp_path, monkeypatch):
    """The Snakefile read by Snakemake (its API), planning included: validation, the plan, every rule."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    expansions = []
    every_cell = matrix._every_cell
    monkeypatch.setattr(matrix, "_every_cell", lambda *a: expansions.append(1) or every_cell(*a))
    config = tiny_config(matrix={"frameworks": ["torch"], "backends": ["native", "horovod"], "gpus": [1, 2]})
    (tmp_path / "config.yaml").write_text(json.dumps(config))
    with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
        workflow = api.workflow(
            resource_settings=ResourceSettings(),
            config_settings=ConfigSettings(configfiles=[tmp_path / "config.yaml"]),
            snakefile=REPO / "Snakefile",
            workdir=tmp_path,
        )._workflow
        collect = workflow.get_rule("collect_runs")
    assert len(expansions) == 1
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("settings.json")) == [
        f"results/runs/torch/{backend}/g{gpus}/s1/settings.json" for backend in ("horovod", "native") for gpus in (1, 2)
    ]
    assert sorted(collect.input.metrics) == [  # the analysis rules read the plan's cells
        f"results/runs/torch/{backend}/g{gpus}/s1/metrics.jsonl" for backend in ("horovod", "native") for gpus in (1, 2)
    ]
