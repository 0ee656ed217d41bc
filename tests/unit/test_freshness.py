"""What the planner decides about a finished cell (config/freshness.py), and the settings
comparison behind it: a key a record lacks counts as its default, a changed default or value
counts, another backend's section does not; the data folders' names ignore new keys."""

from __future__ import annotations

import json
import os

import pytest
from conftest import tiny_config
from scalebench import config as sb_config
from scalebench.cell import Cell
from scalebench.config import freshness
from scalebench.data import keys

NATIVE = Cell("torch", "native", 1, 1)
HOROVOD = Cell("torch", "horovod", 1, 1)


def settings_of(schema: dict, cell: Cell, **sections) -> tuple[dict, dict]:
    """The cell's settings in a tiny study (with `sections` updated) and at the schema's defaults."""
    study = sb_config.validate(tiny_config(**sections), schema)
    return sb_config.train_settings(study, cell), sb_config.train_settings(sb_config.validate({}, schema), cell)


def without(settings: dict, dotted: str) -> dict:
    """A copy of `settings` without one key, as a record written before the key existed."""
    copy = json.loads(json.dumps(settings))
    *path, last = dotted.split(".")
    node = copy
    for part in path:
        node = node[part]
    del node[last]
    return copy


def test_a_key_the_record_lacks_counts_as_its_default(schema):
    now, defaults = settings_of(schema, NATIVE)
    old_record = without(now, "training.loader.placement")  # a key added after the cell ran
    assert sb_config.settings_changes(old_record, now, defaults) == []
    # set away from its default, it is a change of what the cell would run with
    moved, _ = settings_of(
        schema, NATIVE, training={**tiny_config()["training"], "loader": {"workers": 0, "placement": "host"}}
    )
    assert sb_config.settings_changes(old_record, moved, defaults) == ['training.loader.placement: "auto" -> "host"']


def test_a_changed_default_still_counts(schema):
    now, defaults = settings_of(schema, NATIVE)
    recorded = json.loads(json.dumps(now))
    recorded["training"]["max_loss"] = 500  # what the default was when the cell ran
    assert sb_config.settings_changes(recorded, now, defaults) == ["training.max_loss: 500 -> 1000"]


def test_another_backends_section_is_not_a_change_of_this_cell(schema):
    options = {**tiny_config()["training"], "horovod": {"backward_passes_per_step": 2}}
    native_now, native_defaults = settings_of(schema, NATIVE, training=options)
    native_before, _ = settings_of(schema, NATIVE)
    assert sb_config.settings_changes(native_before, native_now, native_defaults) == []
    horovod_now, horovod_defaults = settings_of(schema, HOROVOD, training=options)
    horovod_before, _ = settings_of(schema, HOROVOD)
    assert sb_config.settings_changes(horovod_before, horovod_now, horovod_defaults) == [
        "training.horovod.backward_passes_per_step: 1 -> 2"
    ]


def finish(folder, settings: dict, status: str = "ok", final: bool = True) -> None:
    """A cell's outputs as its job leaves them."""
    folder.mkdir(parents=True, exist_ok=True)
    run = {"framework": "torch", "backend": "native", "gpus": 1, "seed": 1, "status": status, "settings": settings}
    (folder / "run.json").write_text(json.dumps(run))
    lines = [{"type": "epoch", "epoch": 1}] + ([{"type": "final", "status": status}] if final else [])
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    for name in freshness.OUTPUTS:  # written a while ago
        os.utime(folder / name, (1_000_000, 1_000_000))


def planned(folder, settings: dict, defaults: dict) -> tuple[freshness.Verdict, bool]:
    """The verdict, and whether Snakemake's modification-time rule now reruns the cell."""
    found = freshness.verdict(folder, settings, defaults)
    stamp = freshness.write_settings_file(folder, settings, found)
    assert json.loads(stamp.read_text()) == settings  # the job is started with the study's settings
    return found, stamp.stat().st_mtime > freshness.outputs_time(folder)


def test_settings_file_is_older_than_the_outputs_of_a_cell_whose_settings_stand(schema, tmp_path):
    now, defaults = settings_of(schema, NATIVE)
    finish(tmp_path, without(now, "training.loader.placement"))
    assert planned(tmp_path, now, defaults) == (freshness.Verdict("current"), False)
    # a run that would change a setting retrains the cell; going back leaves it as it was
    changed, _ = settings_of(schema, NATIVE, training={**tiny_config()["training"], "epochs": 9})
    found, reruns = planned(tmp_path, changed, defaults)
    assert (found.state, found.reason, reruns) == ("changed", "training.epochs: 3 -> 9", True)
    assert planned(tmp_path, now, defaults) == (freshness.Verdict("current"), False)


@pytest.mark.parametrize(
    ("status", "final", "reason"),
    [
        ("running", False, "run.json says running: the job did not finish"),
        ("ok", False, "metrics.jsonl has no final record: the job did not finish"),
    ],
)
def test_incomplete_outputs_are_retrained(schema, tmp_path, status, final, reason):
    now, defaults = settings_of(schema, NATIVE)
    finish(tmp_path, now, status, final)
    assert planned(tmp_path, now, defaults) == (freshness.Verdict("incomplete", reason), True)


def test_an_incomplete_cell_that_a_live_job_holds_says_the_next_job_waits_for_it(schema, tmp_path):
    from scalebench.cluster import cell_holder

    now, defaults = settings_of(schema, NATIVE)
    finish(tmp_path, now, "running", False)
    held = cell_holder.hold(tmp_path, None, say=pytest.fail)  # this process holds the cell's lock
    found, reruns = planned(tmp_path, now, defaults)
    assert found.held_by == f"process {os.getpid()} on {held.mine.host}" and reruns
    assert found.warning("torch/native/g1/s1", str(tmp_path)) == (
        f"torch/native/g1/s1 is being trained by process {os.getpid()} on {held.mine.host} (its job still runs); "
        "a run that builds it waits for that job and adopts its outcome instead of training beside it"
    )
    cell_holder.release(held)
    assert planned(tmp_path, now, defaults)[0].held_by == ""


def test_a_record_that_cannot_be_read_is_kept(schema, tmp_path):
    now, defaults = settings_of(schema, NATIVE)
    finish(tmp_path, now)
    (tmp_path / "run.json").write_text(json.dumps({"framework": "torch", "epochs": 3}))
    os.utime(tmp_path / "run.json", (1_000_000, 1_000_000))
    found, reruns = planned(tmp_path, now, defaults)
    assert (found.state, reruns) == ("unreadable", False)
    assert found.reason == "run.json has no backend, gpus, seed, status: written by a version too old to read"
    (tmp_path / "run.json").write_text("{not json")
    os.utime(tmp_path / "run.json", (1_000_000, 1_000_000))
    assert planned(tmp_path, now, defaults) == (freshness.Verdict("unreadable", "run.json is not valid JSON"), False)


def test_a_new_cell_gets_its_settings_file(schema, tmp_path):
    now, defaults = settings_of(schema, NATIVE)
    found = freshness.verdict(tmp_path / "new", now, defaults)
    assert found == freshness.Verdict("new")
    written = freshness.write_settings_file(tmp_path / "new", now, found)
    assert json.loads(written.read_text()) == now


def test_the_analysis_stamp_changes_only_with_its_content(tmp_path):
    stamp = tmp_path / "summary" / ".stamp"
    freshness.write_stamp(stamp, {"code": "a", "config": {"x": 1}})
    os.utime(stamp, (1_000_000, 1_000_000))
    freshness.write_stamp(stamp, {"config": {"x": 1}, "code": "a"})
    assert stamp.stat().st_mtime == 1_000_000
    freshness.write_stamp(stamp, {"code": "b", "config": {"x": 1}})
    assert stamp.stat().st_mtime > 1_000_000


def test_the_code_digest_follows_content_not_place(tmp_path):
    for root in (tmp_path / "a", tmp_path / "b"):
        (root / "rules").mkdir(parents=True)
        (root / "rules" / "x.smk").write_text("rule x:\n")
        (root / "Snakefile").write_text("include: 'rules/x.smk'\n")
    parts = ("Snakefile", "rules")
    assert freshness.code_digest(tmp_path / "a", parts) == freshness.code_digest(tmp_path / "b", parts)
    (tmp_path / "b" / "rules" / "x.smk").write_text("rule y:\n")
    assert freshness.code_digest(tmp_path / "a", parts) != freshness.code_digest(tmp_path / "b", parts)


def test_data_folder_names_ignore_keys_a_release_adds(schema):
    dataset = sb_config.validate(tiny_config(), schema)["dataset"]
    names = keys.synthetic_key(dataset["synthetic"]), keys.prepared_key(dataset)
    grown = json.loads(json.dumps(dataset))
    grown["synthetic"]["noise"] = 0.0
    grown["new_option"] = True
    assert (keys.synthetic_key(grown["synthetic"]), keys.prepared_key(grown)) == names
    # the names of today's settings are the names a finished study's folders have
    assert names == ("synthetic-c6e6d84469", "synthetic-32x48-aacaf793e8")  # as named before this change
