"""The history of finished studies (analysis/history.py, history.path): a study added once as one
entry, again without a change; a damaged study refused with the history as it was; adds at once
all landing; entries another version wrote, or damaged since, skipped with the reason.

The studies are finished studies' summary tables made without training: cell folders as training
writes them (tests/cell_records.py) through the real collection, scaling, verdicts and answer."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import multiprocessing
import os
import re
from pathlib import Path

import pytest
from conftest import copy_study, tiny_config
from scalebench import config as sb_config
from scalebench import locks
from scalebench.analysis import gate, history
from study_tables import write_study

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def studies(tmp_path_factory) -> tuple[Path, Path]:
    """Two finished studies: March's, and April's after a driver upgrade (10% slower). Read them in
    place; a test that damages one copies it first."""
    root = tmp_path_factory.mktemp("studies")
    return (
        write_study(root / "march" / "results", 3, 1.0, "550.54.15"),
        write_study(root / "april" / "results", 4, 1.1, "560.35.03"),
    )


def state(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file and folder under `folder` (hidden ones too) with its bytes and modification time."""
    found = {".": (b"", folder.stat().st_mtime_ns)} if folder.exists() else {}
    for path in sorted(folder.rglob("*")) if folder.exists() else []:
        data = path.read_bytes() if path.is_file() else b""
        found[str(path.relative_to(folder))] = (data, path.stat().st_mtime_ns)
    return found


def study_id(results: Path) -> str:
    return hashlib.sha256((results / "summary" / "runs.csv").read_bytes()).hexdigest()[:12]


def test_a_study_is_added_as_one_entry_and_adding_it_again_changes_nothing(studies, tmp_path):
    march, _ = studies
    place = tmp_path / "history"
    entry = history.add(march, place)
    assert entry.new and entry.study_id == study_id(march) and entry.folder == place / entry.study_id
    summary = march / "summary"
    copied = sorted([*(p.name for p in summary.glob("*.csv")), "answer.json"])
    assert sorted(p.name for p in entry.folder.iterdir()) == sorted([*copied, "entry.json"])
    for name in copied:  # byte for byte, and each file's sha256 in entry.json
        assert (entry.folder / name).read_bytes() == (summary / name).read_bytes()
        assert entry.files[name] == hashlib.sha256((summary / name).read_bytes()).hexdigest()
    written = json.loads((entry.folder / "entry.json").read_text())
    assert written["format"] == history.FORMAT and written["study_id"] == entry.study_id
    assert written["study"] == {
        "start": "2025-03-01T11:00:00+00:00",
        "end": "2025-03-02T12:30:00+00:00",
        "cells": 8,
        "ok": 8,
    }
    provenance = written["provenance"]
    assert (provenance["driver"], provenance["nccl"], provenance["devices"]) == (["550.54.15"], ["2.21.5"], ["H100"])
    assert (provenance["nodes"], provenance["hosts"], provenance["config_hash"]) == (["2"], ["n1", "n2"], ["h1"])
    assert provenance["versions"] == ["python 3.11.7, torch 2.13.0"] and written["git_commit"] == ["abc"]
    assert written["unrecorded"] == [] and written["files"] == entry.files
    before = state(place)
    again = history.add(march, place)
    assert not again.new and again == entry and state(place) == before  # no new entry, no file rewritten
    # the same study from another folder (moved, copied) is the same study
    moved = copy_study(march, tmp_path / "moved" / "results")
    assert history.add(moved, place) == entry and state(place) == before
    assert history.read(place) == ([entry], [])


def test_the_entries_are_read_oldest_study_first(studies, tmp_path):
    march, april = studies
    place = tmp_path / "history"
    later, earlier = history.add(april, place), history.add(march, place)
    entries, skipped = history.read(place)
    assert [entry.study_id for entry in entries] == [earlier.study_id, later.study_id] and skipped == []
    assert [entry.provenance["driver"] for entry in entries] == [["550.54.15"], ["560.35.03"]]
    # by the study's dates, not by its id or when it was added: March's study run again in December
    record = json.loads((earlier.folder / "entry.json").read_text())
    record["study"]["start"] = "2025-12-01T10:00:00+00:00"
    (earlier.folder / "entry.json").write_text(json.dumps(record))
    assert [entry.study_id for entry in history.read(place)[0]] == [later.study_id, earlier.study_id]


def cut(path: Path) -> None:
    """Half of the file, as a copy or a disk that filled up leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def short_row(path: Path) -> None:
    """The last row without its last fields, its line still ended."""
    lines = path.read_text().splitlines(keepends=True)
    lines[-1] = lines[-1].rsplit(",", 3)[0] + "\n"
    path.write_text("".join(lines))


DAMAGES = {
    "runs.csv cut in half": ("runs.csv", cut, "runs.csv: truncated: its last line ends without a newline"),
    "a row of scaling.csv cut short": ("scaling.csv", short_row, "scaling.csv: row 5 has"),
    "verdicts.csv empty": ("verdicts.csv", lambda path: path.write_bytes(b""), "verdicts.csv: empty"),
    "provenance.csv missing": ("provenance.csv", Path.unlink, "provenance.csv: missing"),
    "answer.json cut in half": ("answer.json", cut, "answer.json: not whole JSON"),
    "epochs.csv unreadable": ("epochs.csv", lambda path: path.write_bytes(b"a,b\n\xff,1\n"), "epochs.csv: not UTF-8"),
}


@pytest.mark.parametrize("damage", DAMAGES, ids=list(DAMAGES))
def test_a_damaged_study_is_refused_naming_the_file_and_the_history_is_left_as_it_was(studies, tmp_path, damage):
    march, april = studies
    place = tmp_path / "history"
    history.add(april, place)
    name, spoil, words = DAMAGES[damage]
    damaged = copy_study(march, tmp_path / "damaged" / "results")
    spoil(damaged / "summary" / name)
    before = state(place)
    with pytest.raises(history.DamagedStudy) as refused:
        history.add(damaged, place)
    assert str(refused.value).startswith(str(damaged / "summary" / name)) and words in str(refused.value)
    assert state(place) == before  # byte-identical: no entry, no temporary folder, nothing dated anew
    # and a history that did not exist yet is not made for a refused study
    with pytest.raises(history.DamagedStudy):
        history.add(damaged, tmp_path / "new-history")
    assert not (tmp_path / "new-history").exists()


def test_a_table_without_a_column_the_history_needs_is_refused(studies, tmp_path):
    march, _ = studies
    damaged = copy_study(march, tmp_path / "older" / "results")
    runs = damaged / "summary" / "runs.csv"
    rows = list(csv.DictReader(io.StringIO(runs.read_text())))
    text = io.StringIO()
    columns = [name for name in rows[0] if name not in ("status", "images_per_s")]
    writer = csv.DictWriter(text, columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    runs.write_text(text.getvalue())
    with pytest.raises(history.DamagedStudy, match=r"runs\.csv: lacks the column\(s\) status, images_per_s"):
        history.add(damaged, tmp_path / "history")
    assert not (tmp_path / "history").exists()


def adding(results: Path, place: Path, start, answers) -> None:
    """One process's add, started with the others (`start`: a barrier), its answer or error queued."""
    start.wait()
    try:
        entry = history.add(results, place)
        answers.put((entry.study_id, entry.new))
    except Exception as error:  # the test says which add failed, and why
        answers.put((str(results), repr(error)))


def test_two_studies_added_at_once_both_land_once(studies, tmp_path):
    place = tmp_path / "history"
    context = multiprocessing.get_context("fork")
    start, answers = context.Barrier(4), context.Queue()
    # each study twice: two adds of one study at once leave one entry, and neither fails
    processes = [context.Process(target=adding, args=(s, place, start, answers)) for s in (*studies, *studies)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    said = sorted(answers.get(timeout=5) for _ in processes)
    first, second = sorted(map(study_id, studies))
    assert said == [(first, False), (first, True), (second, False), (second, True)]
    entries, skipped = history.read(place)
    assert sorted(entry.study_id for entry in entries) == [first, second] and skipped == []
    assert sorted(path.name for path in place.iterdir()) == [".history.lock", first, second]  # nothing left over


def test_an_add_waits_while_another_holds_the_history(studies, tmp_path):
    march, _ = studies
    place = tmp_path / "history"
    place.mkdir()
    context = multiprocessing.get_context("fork")
    start, answers = context.Barrier(2), context.Queue()
    # started before the lock is taken: a child forked while it is held would hold it too
    waiting = context.Process(target=adding, args=(march, place, start, answers))
    waiting.start()
    with locks.held(history.LOCK, place):
        start.wait()
        waiting.join(timeout=2)
        assert waiting.is_alive() and not (place / study_id(march)).exists()  # it waits; it wrote nothing
    waiting.join(timeout=60)
    assert answers.get(timeout=5) == (study_id(march), True)
    assert history.read(place)[0][0].study_id == study_id(march)


def test_an_entry_of_another_format_or_damaged_since_is_skipped_with_the_reason(studies, tmp_path):
    march, april = studies
    place = tmp_path / "history"
    older, newer = history.add(march, place), history.add(april, place)
    record = json.loads((older.folder / "entry.json").read_text())
    (older.folder / "entry.json").write_text(json.dumps({**record, "format": 2}))
    with open(newer.folder / "verdicts.csv", "a") as handle:
        handle.write("edited by hand\n")
    (place / "notes").mkdir()  # a folder a person put there
    entries, skipped = history.read(place)
    assert entries == []
    reasons = {item.folder.name: item.reason for item in skipped}
    assert reasons == {
        older.study_id: "entry.json is of format 2; this version of scalebench reads format 1",
        newer.study_id: "verdicts.csv is not the file that was added (its sha256 differs from entry.json's): "
        "changed or damaged since",
        "notes": "no entry.json: not an entry of the history",
    }
    (older.folder / "entry.json").write_text('{"format": 1, "study_')  # cut short
    reasons = {item.folder.name: item.reason for item in history.read(place)[1]}
    assert reasons[older.study_id].startswith("entry.json cannot be read")
    # adding the study whose entry is damaged says so, and rewrites nothing
    before = state(place)
    with pytest.raises(history.HistoryError, match=re.escape(f"already in the history as {newer.folder}, whose entry")):
        history.add(april, place)
    assert state(place) == before


# history.path, checked with the config before any job


def validated(path: Path, schema: dict) -> dict:
    return sb_config.validate(tiny_config(history={"path": str(path)}), schema)


def test_history_path_is_refused_where_it_is_a_file(schema, tmp_path):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(sb_config.ConfigError, match="config key 'history.path': .*a-file is not a folder"):
        validated(tmp_path / "a-file", schema)
    with pytest.raises(
        sb_config.ConfigError, match="config key 'history.path': .* cannot be created: .*a-file is a file"
    ):
        validated(tmp_path / "a-file" / "history", schema)


def test_a_jobs_own_snakemake_does_not_check_the_folders_it_never_reads(schema, tmp_path):
    """A train job's Snakemake runs on a compute node, which may not reach the history (or
    budget.from's study): the folders are checked in the process the user started only."""
    from scalebench.config.plan import Study

    (tmp_path / "a-file").write_text("")
    config = tiny_config(history={"path": str(tmp_path / "a-file")})
    with pytest.raises(sb_config.ConfigError, match="config key 'history.path'"):
        Study.validate(config, schema)
    assert Study.validate(config, schema, folders=False).config["history"]["path"] == str(tmp_path / "a-file")


def test_history_path_is_refused_where_this_user_cannot_write(schema, tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    if os.geteuid() == 0:  # root writes anyway: answer as the kernel answers a user
        granted = os.access

        def access(path, mode, **options):
            return granted(path, mode, **options) and not (mode & os.W_OK and Path(path) == locked)

        monkeypatch.setattr(os, "access", access)
    try:
        with pytest.raises(
            sb_config.ConfigError, match="config key 'history.path': .*locked is a folder this user cannot write to"
        ):
            validated(locked, schema)
        words = f"config key 'history.path': {locked / 'history'} cannot be created: this user cannot write to {locked}"
        with pytest.raises(sb_config.ConfigError, match=re.escape(words)):
            validated(locked / "history", schema)
    finally:
        locked.chmod(0o755)


def test_history_path_is_optional_is_not_created_by_checking_and_is_no_cell_setting(schema, tmp_path):
    assert sb_config.validate(tiny_config(), schema)["history"] == {
        "path": None,
        "gate_threshold": 0.05,
        "change_alpha": 0.01,
    }
    kept = validated(tmp_path / "new" / "history", schema)
    assert kept["history"]["path"] == str(tmp_path / "new" / "history") and not (tmp_path / "new").exists()
    plain = sb_config.validate(tiny_config(), schema)
    for one in sb_config.cells(kept):  # changing it retrains nothing: no cell's settings hold it
        assert sb_config.train_settings(kept, one) == sb_config.train_settings(plain, one)
    assert "history" not in json.dumps([sb_config.train_settings(kept, one) for one in sb_config.cells(kept)])


def test_what_an_add_killed_before_its_rename_left_is_never_read_and_the_next_add_removes_it(studies, tmp_path):
    march, _ = studies
    place = tmp_path / "history"
    leftover = place / f"{history.ADDING}abc-1"
    leftover.mkdir(parents=True)
    (leftover / "runs.csv").write_text("half")
    assert history.read(place) == ([], [])
    history.add(march, place)
    assert not leftover.exists() and sorted(p.name for p in place.iterdir()) == [".history.lock", study_id(march)]


# --- the gate: this study against the history (analysis/gate.py)


def test_the_gate_fails_a_study_that_regressed_beyond_the_band_and_names_the_figure(studies, tmp_path):
    march, april = studies
    history.add(march, tmp_path / "history")
    judged = gate.judge(april / "summary" / "runs.csv", tmp_path / "history", 0.05)
    march_id = history.id_of((march / "summary" / "runs.csv").read_bytes())
    april_id = history.id_of((april / "summary" / "runs.csv").read_bytes())
    assert judged["reference"]["study"] == march_id and judged["study"] == april_id
    assert judged["passed"] is False and "550.54.15" in judged["provenance_differences"]
    by = {(row["backend"], row["gpus"], row["figure"]): row for row in judged["figures"]}
    throughput = by[("native", 2, "images_per_s")]  # April ran 10% slower: 1 / 1.1
    assert (
        throughput["verdict"] == "regressed" and throughput["fails"] and throughput["studies"] == [march_id, april_id]
    )
    assert throughput["ratio"] == pytest.approx(1 / 1.1, rel=1e-3) and throughput["high"] < 1 / 1.05
    assert by[("native", 2, "efficiency")]["verdict"] == "unchanged"  # both scale alike
    assert "images_per_s of torch/native at 2 GPUs" in judged["regressed_beyond_band"]
    assert gate.summary(judged).startswith(f"gate: FAILED against 1 study of the history, the newest {march_id} (")


def test_the_gate_passes_a_regression_inside_the_band_an_improvement_and_an_empty_history(studies, tmp_path):
    march, april = studies
    history.add(march, tmp_path / "history")
    wide = gate.judge(april / "summary" / "runs.csv", tmp_path / "history", 0.2)  # 10% slower, within 20%
    rows = [row for row in wide["figures"] if row["figure"] == "images_per_s"]
    assert wide["passed"] and {row["verdict"] for row in rows} == {"regressed"} and not any(r["fails"] for r in rows)
    history.add(april, tmp_path / "history")  # now March against the newest other study, April's
    back = gate.judge(march / "summary" / "runs.csv", tmp_path / "history", 0.05)
    assert back["passed"] and {r["verdict"] for r in back["figures"] if r["figure"] == "images_per_s"} == {"improved"}
    empty = gate.judge(march / "summary" / "runs.csv", tmp_path / "nothing", 0.05)
    assert empty["passed"] and empty["reference"] is None and empty["figures"] == []
    assert "no earlier study of the history ran on the same devices" in empty["note"]


def test_the_gate_never_compares_a_study_of_other_devices_and_says_why_a_figure_is_undecided(studies):
    entry = lambda study_id, devices: history.Entry(  # noqa: E731
        study_id, Path(study_id), "2025-01-01", None, None, 1, 1, {"devices": devices}, [], [], {}
    )
    entries = [entry("a100", ["A100"]), entry("h100", ["H100"]), entry("mine", ["A100"])]
    # the newer H100 study is another site, and this study is not its own reference
    assert [entry.study_id for entry in gate.same_site(entries, "mine", ["A100"])] == ["a100"]
    assert gate.same_site(entries, "mine", ["V100"]) == []
    assert gate.verdict(1.0, 0.97, 1.04, True, 0.05) == ("unchanged", False)
    assert gate.verdict(0.93, 0.85, 1.02, True, 0.05) == ("insufficient data", False)  # too wide to tell
    assert gate.verdict(1.2, 1.16, 1.25, False, 0.05) == ("regressed", True)  # 20% longer to target
    assert gate.verdict(float("nan"), float("nan"), float("nan"), True, 0.05) == ("insufficient data", False)
