"""Import of the reference study's logs: rows, backend from the name, malformed files reported by name."""

from __future__ import annotations

import pytest
from scalebench.analysis import legacy
from scalebench.analysis import study as summary
from scalebench.analysis.scaling import scaling
from scalebench.rerun import Invocation

HEADER = ",time_per_epoch,loss,lr,training_time,test_time,iou\n"


def log(rows: list[tuple[float, float]], training_time: float, iou: float) -> str:
    """rows: (time_per_epoch, loss); the totals repeated on every row as the reference study wrote them."""
    body = "".join(f"{i},{t},{loss},0.001,{training_time},3.5,{iou}\n" for i, (t, loss) in enumerate(rows))
    return HEADER + body


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "log_1.csv").write_text(log([(30.0, 0.6), (20.0, 0.4), (22.0, 0.3), (21.0, 0.2)], 93.0, 0.91))
    (tmp_path / "log_4.csv").write_text(log([(9.0, 0.6), (6.0, 0.4), (5.0, 0.3)], 20.0, 0.88))
    (tmp_path / "log_hvd_4.csv").write_text(log([(8.0, 0.6), (5.0, 0.5)], 13.0, 0.85))
    (tmp_path / "log_hvd_8.csv").write_text(HEADER.replace(",iou", "") + "0,1.0,0.5,0.001,1.0,1.0\n")
    (tmp_path / "log_2.csv").write_text(log([(15.0, 0.6)], 15.0, 1.7))  # IOU out of range
    (tmp_path / "log_nope.csv").write_text(log([(1.0, 0.1)], 1.0, 0.5))
    (tmp_path / "notes.txt").write_text("not a log")
    return tmp_path


def test_import_reads_the_well_formed_files_and_reports_the_others_by_name(folder):
    runs, epochs, skipped = legacy.import_all([{"path": str(folder), "framework": "tensorflow", "label": "2021"}])
    keys = sorted((r["backend"], r["gpus"]) for r in runs)
    assert keys == [("horovod", 4), ("native", 1), ("native", 4)]
    one = next(r for r in runs if r["gpus"] == 1)
    assert (one["source"], one["framework"], one["status"]) == ("2021", "tensorflow", "ok")
    assert (one["train_time_s"], one["steady_epoch_s"], one["first_epoch_s"], one["iou"]) == (93.0, 21.0, 30.0, 0.91)
    assert one["test_time_s"] == 3.5
    assert len(epochs) == 4 + 3 + 2
    first = [e for e in epochs if e["gpus"] == 1]
    assert [e["train_time_s"] for e in first] == [30.0, 50.0, 72.0, 93.0]
    assert [e["loss"] for e in first] == [0.6, 0.4, 0.3, 0.2]
    reasons = {skip.path.rsplit("/", 1)[1]: skip.reason for skip in skipped}
    assert reasons == {
        "log_hvd_8.csv": "missing column(s) iou",
        "log_2.csv": "iou outside [0, 1]",
        "log_nope.csv": f"name is not {legacy.NAMES}",
    }


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "not a readable CSV"),
        (HEADER, "no epoch rows"),
        (HEADER + "0,fast,0.5,0.001,10,1,0.5\n", "non-numeric or empty values in column(s) time_per_epoch"),
        (HEADER + "0,1.0,0.5,0.001,,1,0.5\n", "non-numeric or empty values in column(s) training_time"),
        (HEADER + "0,-1.0,0.5,0.001,10,1,0.5\n", "negative times"),
    ],
)
def test_malformed_contents_name_the_problem(tmp_path, text, reason):
    (tmp_path / "log_1.csv").write_text(text)
    runs, _, skipped = legacy.import_folder({"path": str(tmp_path), "framework": "torch", "label": "old"}, 0)
    assert runs == []
    assert skipped[0].path.endswith("log_1.csv") and skipped[0].reason.startswith(reason)


def test_a_missing_folder_names_the_config_key_and_an_empty_one_is_reported(tmp_path):
    with pytest.raises(legacy.LegacyError, match=r"legacy\[1\]\.path: .*nowhere is not a folder"):
        legacy.import_all(
            [
                {"path": str(tmp_path), "framework": "torch", "label": "a"},
                {"path": str(tmp_path / "nowhere"), "framework": "torch", "label": "b"},
            ]
        )
    _, _, skipped = legacy.import_all([{"path": str(tmp_path), "framework": "torch", "label": "a"}])
    assert skipped[0].reason.startswith("no log_<gpus>.csv")


def test_labels_must_be_distinct_from_each_other_and_from_the_project(tmp_path):
    with pytest.raises(legacy.LegacyError, match=r"'legacy\[0\]\.label': 'scalebench' is already used"):
        legacy.import_all([{"path": str(tmp_path), "framework": "torch", "label": "scalebench"}])
    with pytest.raises(legacy.LegacyError, match=r"'legacy\[1\]\.label'"):
        legacy.import_all([{"path": str(tmp_path), "framework": "torch", "label": "x"}] * 2)


@pytest.fixture
def repeats(tmp_path):
    """The reference repositories' Logs/ folder: log_<gpus>.csv is repeat 0, log_<repeat>_<gpus>.csv the others."""
    logs = tmp_path / "Logs"
    logs.mkdir()
    totals = {"log_1.csv": 100.0, "log_1_1.csv": 110.0, "log_2_1.csv": 90.0}
    totals |= {
        "log_4.csv": 30.0,
        "log_1_4.csv": 28.0,
        "log_2_4.csv": 26.0,
        "log_hvd_4.csv": 40.0,
        "log_hvd_1_4.csv": 42.0,
    }
    for name, total in totals.items():
        (logs / name).write_text(log([(total / 2, 0.5), (total / 2, 0.4)], total, 0.9))
    return logs


def test_repeat_files_are_the_seeds_of_one_cell(repeats):
    runs, epochs, skipped = legacy.import_all([{"path": str(repeats), "framework": "torch", "label": "2023"}])
    assert skipped == []
    seeds = sorted((r["backend"], r["gpus"], r["seed"], r["train_time_s"]) for r in runs)
    assert seeds == [
        ("horovod", 4, 0, 40.0),
        ("horovod", 4, 1, 42.0),
        ("native", 1, 0, 100.0),
        ("native", 1, 1, 110.0),
        ("native", 1, 2, 90.0),
        ("native", 4, 0, 30.0),
        ("native", 4, 1, 28.0),
        ("native", 4, 2, 26.0),
    ]
    assert sorted({(e["gpus"], e["seed"]) for e in epochs if e["backend"] == "native"}) == [
        (1, 0),
        (1, 1),
        (1, 2),
        (4, 0),
        (4, 1),
        (4, 2),
    ]


def test_imported_repeats_get_seed_intervals_like_our_own(repeats, tmp_path):
    entries = [{"path": str(repeats), "framework": "torch", "label": "2023"}]
    collected = summary.collect_study(str(tmp_path / "runs"), [], 0.8, entries, Invocation(("snakemake",), "/w", ()))
    table = scaling(collected.runs).set_index(["backend", "gpus"])
    native4 = table.loc[("native", 4)]
    assert native4["interval"] == "paired t"  # repeat k at 4 GPUs against repeat k at 1 GPU
    ratios = [100.0 / 30.0, 110.0 / 28.0, 90.0 / 26.0]
    assert native4["speedup_train_time"] == pytest.approx(sum(ratios) / 3)
    assert native4["speedup_train_time_lo"] < min(ratios) and native4["speedup_train_time_hi"] > max(ratios)
    # Horovod ran 4 GPUs only: its own base, as for single files.
    assert table.loc[("horovod", 4), "base_gpus"] == 4


def test_a_repeat_given_twice_is_skipped_by_name(repeats):
    (repeats / "log_0_4.csv").write_text(log([(1.0, 0.5)], 1.0, 0.9))
    runs, _, skipped = legacy.import_all([{"path": str(repeats), "framework": "torch", "label": "2023"}])
    assert [(s.path.rsplit("/", 1)[1], s.reason) for s in skipped] == [
        ("log_4.csv", "repeat 0 of native on 4 GPUs is already log_0_4.csv")
    ]
    assert sum(1 for r in runs if (r["backend"], r["gpus"], r["seed"]) == ("native", 4, 0)) == 1


def test_imported_rows_join_the_tables_and_scale_against_their_own_base(folder, tmp_path):
    entries = [{"path": str(folder), "framework": "torch", "label": "reference"}]
    collected = summary.collect_study(str(tmp_path / "runs"), [], 0.8, entries, Invocation(("snakemake",), "/w", ()))
    assert set(collected.runs["source"]) == {"reference"}
    assert set(collected.runs["seed"]) == {0}  # one run per GPU count: repeat 0
    skipped = collected.incomplete[collected.incomplete["status"] == "skipped (legacy import)"]
    assert sorted(p.rsplit("/", 1)[1] for p in skipped["item"]) == ["log_2.csv", "log_hvd_8.csv", "log_nope.csv"]
    table = scaling(collected.runs)
    native4 = table[(table["backend"] == "native") & (table["gpus"] == 4)].iloc[0]
    assert native4["speedup_train_time"] == pytest.approx(93.0 / 20.0)
    assert native4["interval"] == "none"
    # Horovod has no 1-GPU log: its own smallest GPU count is the base.
    assert table[table["backend"] == "horovod"].iloc[0]["base_gpus"] == 4


def test_imported_studies_get_verdicts_on_their_epoch_time_and_time_to_target(repeats, tmp_path):
    """The seed studies' repeats at 4 GPUs (native 3 runs, Horovod 2): no images/s in the logs, so the
    backends are compared on their steady epoch time, and on the time to the target where the log's one
    IOU, after training, reached it; where it did not, the time to target is empty with the reason."""
    from scalebench.analysis import verdicts

    entries = [{"path": str(repeats), "framework": "torch", "label": "2023"}]
    collected = summary.collect_study(str(tmp_path / "runs"), [], 0.8, entries, Invocation(("snakemake",), "/w", ()))
    runs = collected.runs
    assert set(runs["time_to_target_s"]) == set(runs["train_time_s"])  # IOU 0.9 >= 0.8 after every run
    table = verdicts.verdicts(runs).set_index("kind")
    assert "throughput" not in table.index
    epoch = table.loc["epoch_time"]
    assert (epoch["source"], epoch["gpus"], epoch["a"], epoch["b"]) == ("2023", 4, "native", "horovod")
    assert (epoch["seeds_a"], epoch["seeds_b"]) == (3, 2) and epoch["verdict"].startswith("faster per epoch by")
    target = table.loc["time_to_target"]
    assert (target["a"], target["b"]) == ("native", "horovod") and target["ratio"] == pytest.approx(41 / 28, rel=0.02)
    below = summary.collect_study(str(tmp_path / "runs"), [], 0.95, entries, Invocation(("snakemake",), "/w", ()))
    assert below.runs["time_to_target_s"].isna().all()
    assert set(below.runs["time_to_target_reason"]) == {
        "the log's one IOU, after training, is 0.900, below the target 0.95"
    }
    (row,) = verdicts.verdicts(below.runs).query("kind == 'time_to_target'").to_dict("records")
    assert row["state"] == "none" and row["verdict"].startswith("not every seed reached the target")
