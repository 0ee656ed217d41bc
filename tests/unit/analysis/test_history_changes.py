"""Change points in the history (analysis/change_points.py, analysis/history_changes.py), on
histories whose truth is known: noise only (nothing found, at the method's false-alarm rate); a 10%
drop planted in one backend's efficiency from study 8 (found there, in that backend only, with the
planted NCCL upgrade named); two sites and two settings in one history (kept apart); an entry of an
older version (read where its columns allow, else skipped with the reason).

The studies are summary tables made by the real analysis without training (tests/study_tables.py)."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import ruptures
from scalebench.analysis import change_points, gate, history, history_changes
from scalebench.records.tables import CHANGES, HISTORY
from study_tables import write_study

pytestmark = pytest.mark.unit

ALPHA = 0.01
STUDIES = 12
PLANTED = 8  # the first study (1-based) of the planted drop


def noisy(rng: np.random.Generator, drop: str | None = None):
    """A study's factor: 1% noise per backend and GPU count; `drop`: that backend's 2-GPU cells 1/0.9
    times slower (its efficiency 10% lower)."""
    noise = {(backend, gpus): rng.normal(1, 0.01) for backend in ("native", "horovod") for gpus in (1, 2)}
    return lambda backend, gpus: noise[backend, gpus] / (0.9 if backend == drop and gpus == 2 else 1)


def build_history(root: Path, planted: bool, **study) -> tuple[Path, Path]:
    """STUDIES monthly studies (the last one this study, not added), 1% noise; with `planted`, from
    study PLANTED on, horovod's 2-GPU efficiency 10% lower and NCCL upgraded. The history's folder
    and this study's summary."""
    rng = np.random.default_rng(7)
    place = root / "history"
    for number in range(1, STUDIES + 1):
        late = planted and number >= PLANTED
        results = write_study(
            root / f"study{number}" / "results",
            (number - 1) % 12 + 1,
            1.0,
            "570.86.10",
            year=2025 + (number - 1) // 12,
            nccl="2.23.4" if late else "2.21.5",
            factor=noisy(rng, "horovod" if late else None),
            **study,
        )
        if number < STUDIES:
            history.add(results, place)
    return place, results / "summary"


@pytest.fixture(scope="module")
def noise_only(tmp_path_factory) -> history_changes.History:
    place, summary = build_history(tmp_path_factory.mktemp("noise"), planted=False)
    return history_changes.analyse(place, summary, ALPHA)


@pytest.fixture(scope="module")
def planted_history(tmp_path_factory) -> tuple[Path, Path]:
    return build_history(tmp_path_factory.mktemp("planted"), planted=True)


@pytest.fixture(scope="module")
def planted_drop(planted_history) -> history_changes.History:
    return history_changes.analyse(*planted_history, ALPHA)


def test_a_history_of_noise_only_shows_no_change_point(noise_only):
    series = noise_only.series
    assert len(noise_only.studies) == STUDIES and [s.this for s in noise_only.studies] == [False] * 11 + [True]
    assert set(series["position"]) == set(range(1, STUDIES + 1)) and series["this_study"].sum() > 0
    for figure in ("efficiency", "images_per_s_per_gpu", "waterfall_compute_growth"):
        assert figure in set(series["figure"])
    # every study gives each series one value with its interval from the study's two seeds
    efficiency = series[series["figure"] == "efficiency"]
    assert efficiency.groupby(["backend", "gpus"]).size().tolist() == [STUDIES, STUDIES]
    assert (efficiency["low"] < efficiency["value"]).all() and (efficiency["value"] < efficiency["high"]).all()
    assert noise_only.changes.empty and set(series["level"]) == {1} and noise_only.notes == []


def test_history_csv_and_changes_csv_are_written_as_defined(planted_drop, tmp_path):
    for table, frame in ((HISTORY, planted_drop.series), (CHANGES, planted_drop.changes)):
        frame.to_csv(tmp_path / table.name, index=False)
        with open(tmp_path / table.name, newline="") as handle:
            assert not table.header_problem(next(csv.reader(handle)))
    written = pd.read_csv(tmp_path / HISTORY.name, dtype=HISTORY.text())
    assert written["level"].dtype == "int64" and written["this_study"].dtype == bool


def test_a_drop_planted_in_one_backend_is_found_at_its_study_with_the_planted_upgrade(planted_drop):
    changes = planted_drop.changes
    assert not changes.empty
    assert set(changes["backend"]) == {"horovod"} and set(changes["gpus"]) == {2}  # that backend only
    assert set(changes["position"]) == {PLANTED}  # where it was planted
    efficiency = changes[changes["figure"] == "efficiency"].iloc[0]
    assert efficiency["direction"] == "worse" and efficiency["p_value"] < ALPHA
    assert (
        efficiency["size_lo"] < 0.9 < efficiency["size_hi"] < 1 and efficiency["size_as"] == "after / before"
    )  # the 10% drop, sure of its sign
    assert (efficiency["studies_before"], efficiency["studies_after"]) == (PLANTED - 1, STUDIES - PLANTED + 1)
    assert '"2.21.5" -> "2.23.4"' in efficiency["provenance_changes"]
    assert efficiency["study"] == planted_drop.studies[PLANTED - 1].entry.study_id
    # the series' level changes at the change: one level before it, another after
    levels = planted_drop.series.query("figure == 'efficiency' and backend == 'horovod'").sort_values("position")
    assert levels["level"].tolist() == [1] * (PLANTED - 1) + [2] * (STUDIES - PLANTED + 1)


def test_the_gate_judges_against_the_level_since_the_last_change_point(planted_history, planted_drop):
    place, summary = planted_history
    judged = gate.judge(summary / "runs.csv", place, 0.02, ALPHA)
    ids = [study.entry.study_id for study in planted_drop.studies]
    assert judged["reference"]["studies"] == ids[:-1] and judged["reference"]["after_change"] == [
        "torch/horovod at 2 GPUs"
    ]
    by = {(row["backend"], row["gpus"], row["figure"]): row for row in judged["figures"]}
    # horovod at 2 GPUs against the studies since its drop (8 to 11), the others against all eleven
    assert by[("horovod", 2, "efficiency")]["studies"] == ids[PLANTED - 1 :]
    assert by[("native", 2, "efficiency")]["studies"] == ids
    assert by[("horovod", 1, "images_per_s")]["studies"] == ids
    # this study is as slow as the four before it: no regression; against all eleven it would be one
    assert judged["passed"] and by[("horovod", 2, "efficiency")]["verdict"] != "regressed"
    assert 0.97 < by[("horovod", 2, "efficiency")]["ratio"] < 1.03
    everything = gate.judge(summary / "runs.csv", place, 0.02, alpha=1e-9)  # no change point can be found
    assert not everything["passed"] and "efficiency of torch/horovod at 2 GPUs" in everything["regressed_beyond_band"]


@pytest.mark.parametrize("apart", ["site", "config_hash"])
def test_two_sites_or_two_settings_in_one_history_are_kept_apart(tmp_path, monkeypatch, apart):
    """A year of monthly studies on A100s, then a year on H100s (or with other settings), 30% faster:
    one history, two series of twelve, neither with a change. Taken as one series, they would show one."""
    place, rng = tmp_path / "history", np.random.default_rng(3)
    for number in range(1, 2 * STUDIES + 1):
        other = number > STUDIES
        where = {"device": "H100" if other else "A100"} if apart == "site" else {"config_hash": "h2" if other else "h1"}
        results = write_study(
            tmp_path / f"s{number}" / "results",
            (number - 1) % 12 + 1,
            0.7 if other else 1.0,
            "570.86.10",
            year=2025 + (number - 1) // 12,
            factor=noisy(rng),
            **where,
        )
        history.add(results, place)
    found = history_changes.analyse(place, results / "summary", ALPHA)
    assert found.series[apart].nunique() == 2
    for _, rows in found.series.groupby(history_changes.SERIES):  # never a series across sites or settings
        assert rows["site"].nunique() == 1 and rows["config_hash"].nunique() == 1
    assert found.changes.empty
    # the same history with the two taken as one series: the move is found as a change
    monkeypatch.setattr(history_changes, "SERIES", [name for name in history_changes.SERIES if name != apart])
    assert not history_changes.analyse(place, results / "summary", ALPHA).changes.empty


def test_an_older_entry_is_read_where_its_columns_allow_and_skipped_where_they_do_not(tmp_path):
    place = tmp_path / "history"
    old = write_study(tmp_path / "old" / "results", 1, 1.0, "550.54.15")
    runs = pd.read_csv(old / "summary" / "runs.csv")
    runs.drop(columns=["collective_busbw_gbps"]).to_csv(old / "summary" / "runs.csv", index=False)
    (old / "summary" / "waterfall.csv").unlink()
    older = history.add(old, place)
    oldest = write_study(tmp_path / "oldest" / "results", 2, 1.0, "550.54.15")
    history.add(oldest, place)
    # an entry whose runs.csv has lost a column the comparison needs since (its sha256 rewritten, as
    # an older version's entry would be whole)
    entry = place / history.id_of((oldest / "summary" / "runs.csv").read_bytes())
    frame = pd.read_csv(entry / "runs.csv").drop(columns=["train_time_s"])
    frame.to_csv(entry / "runs.csv", index=False)
    record = (entry / "entry.json").read_text()
    digest = history.hashlib.sha256((entry / "runs.csv").read_bytes()).hexdigest()
    import json

    written = json.loads(record)
    written["files"]["runs.csv"] = digest
    (entry / "entry.json").write_text(json.dumps(written))
    this = write_study(tmp_path / "this" / "results", 3, 1.0, "550.54.15")
    found = history_changes.analyse(place, this / "summary", ALPHA)
    assert [study.entry.study_id for study in found.studies] == [older.study_id, found.studies[-1].entry.study_id]
    notes = " | ".join(found.notes)
    assert f"{older.study_id}: its tables lack bus bandwidth, the loss waterfall" in notes
    assert f"{entry.name}: skipped, its runs.csv lacks train_time_s" in notes
    old_rows = found.series[found.series["study"] == older.study_id]
    assert "efficiency" in set(old_rows["figure"]) and not old_rows["figure"].str.startswith("waterfall").any()


def test_the_methods_false_alarm_rate_is_at_most_alpha_and_a_planted_step_is_found():
    rng = np.random.default_rng(11)
    trials = 600
    alarms = sum(bool(change_points.find(rng.normal(1, 0.02, STUDIES), ALPHA)) for _ in range(trials))
    # at most alpha, within three binomial standard deviations
    assert alarms / trials <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / trials)
    found = []
    for _ in range(100):
        values = rng.normal(1, 0.02, STUDIES)
        values[PLANTED - 1 :] *= 0.9
        found.append([change.index for change in change_points.find(values, ALPHA)])
    assert sum(indices == [PLANTED - 1] for indices in found) >= 95


def test_the_permutation_test_scores_the_split_ruptures_chose():
    rng = np.random.default_rng(5)
    for _ in range(20):
        values = np.log(rng.normal(1, 0.02, STUDIES) * np.r_[np.ones(5), np.full(STUDIES - 5, 0.95)])
        chosen = ruptures.Binseg(model="l2", min_size=change_points.MIN_SIDE, jump=1).fit(values).predict(n_bkps=1)[0]
        best = change_points.reduction(values[None, :])[0].argmax() + change_points.MIN_SIDE
        assert chosen == best
    # a perfect step's p-value is about the share of orderings that put its studies at either end
    step = np.r_[np.ones(8), np.full(4, 0.8)]
    assert change_points.find(step, ALPHA)[0].p_value < ALPHA
    assert change_points.smallest_side(STUDIES, ALPHA) == 3 and change_points.smallest_side(6, ALPHA) is None


def test_the_history_figures_draw_the_studies_and_mark_the_change(planted_drop, tmp_path):
    from plotnine import geom_vline
    from scalebench.report.history_figures import history_figure
    from scalebench.report.saving import save_figure

    for waterfall in (False, True):
        figure = history_figure(planted_drop.series, planted_drop.changes, waterfall)
        marks = [layer for layer in figure.layers if isinstance(layer.geom, geom_vline)]
        assert len(marks) == 1 and set(marks[0].geom.data["position"]) == {PLANTED}
        save_figure(figure, tmp_path / f"history-{waterfall}.png")
        assert (tmp_path / f"history-{waterfall}.png").stat().st_size > 10_000
    said = history_changes.sentences(planted_drop)
    assert said.startswith("The history holds 12 studies, from 2025-01-01 to 2025-12-01; this study is number 12.")
    assert "torch horovod at 2 GPUs on H100: parallel efficiency of the training time changed from study 8" in said
    assert not re.search(r"[a-z)\]*]\.[A-Z][a-z]", said)  # no sentence glued to the next (test_report_text.py)
    # nothing to draw: a placeholder that says so
    empty = history_figure(planted_drop.series.iloc[0:0], planted_drop.changes.iloc[0:0])
    assert empty.data is None and "No study of the history has these figures yet." in str(
        empty.layers[0].geom.aes_params
    )
