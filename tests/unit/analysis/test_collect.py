"""Reading cells into runs/epochs tables: statuses from what exists, steady-state time, NaN not 0."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from cell_records import cell, rank_rows, write_cell
from scalebench.analysis import collect as analysis
from scalebench.analysis import completeness, summary_csv
from scalebench.analysis import study as summary
from scalebench.records.tables import INCOMPLETE
from scalebench.rerun import Invocation
from scalebench.timing import step_split


def test_a_finished_cell_becomes_one_row_with_its_numbers(tmp_path):
    write_cell(tmp_path, gpus=2)
    runs, epochs = analysis.collect(tmp_path, [cell(gpus=2)])
    row = runs.iloc[0]
    assert (row["status"], row["epochs"], row["train_time_s"], row["steady_epoch_s"]) == ("ok", 4, 25.0, 5.0)
    assert row["first_epoch_s"] == 10.0
    assert row["images_per_s"] == pytest.approx(20.0)  # median of 100/4, 100/6, 100/5
    assert row["images_per_s_per_gpu"] == pytest.approx(10.0)
    assert row["data_wait_share"] == pytest.approx(0.1)
    assert row["peak_mem_mb"] == 104.0
    assert row["hosts"] == "n1,n2" and row["devices"] == "H100" and row["slurm_job_id"] == "42"
    assert row["versions"] == "python 3.11.7, torch 2.13.0"  # None entries left out
    assert row["source"] == "scalebench"
    assert list(epochs["epoch"]) == [1, 2, 3, 4] and epochs["train_time_s"].iloc[-1] == 25.0


def test_a_cell_resumed_on_other_nodes_is_marked_and_its_steady_figures_are_one_sets(tmp_path):
    # requeued after epoch 2, resumed on n3,n4: epoch 2 (n1,n2) and epoch 4 (n3,n4) are steady, a
    # tie that goes to the later nodes; a median over both sets would mix two allocations (4.5 s)
    moved = {"ranks": rank_rows(8.0, ["n3", "n4"])}
    write_cell(tmp_path, times=(10.0, 4.0, 8.0, 5.0), epochs_extra={3: {**moved, "resumed": True}, 4: moved})
    row = analysis.collect(tmp_path, [cell()])[0].iloc[0]
    assert (row["node_sets"], row["steady_epoch_s"]) == (2, 5.0)
    assert row["images_per_s"] == pytest.approx(20.0)  # every steady figure from the same epochs
    assert row["node_sets_note"].startswith("epochs 1-2 on n1,n2; epochs 3-4 on n3,n4: the steady figures from n3,n4's")
    write_cell(tmp_path, seed=2)
    same = analysis.collect(tmp_path, [cell(seed=2)])[0].iloc[0]
    assert same["node_sets"] == 1 and pd.isna(same["node_sets_note"])


def test_truncated_last_line_keeps_the_complete_records_and_fails_the_cell(tmp_path):
    write_cell(tmp_path, truncate=True)
    runs, epochs = analysis.collect(tmp_path, [cell()])
    assert runs.iloc[0]["status"] == "failed"
    assert "truncated" in runs.iloc[0]["reason"]
    assert len(epochs) == 4  # the final record was cut, the epochs survive


def test_missing_run_json_is_a_failed_cell_and_an_empty_folder_a_missing_one(tmp_path):
    write_cell(tmp_path, seed=1, run_json=False)
    (tmp_path / "torch" / "native" / "g1" / "s2").mkdir()
    (tmp_path / "torch" / "native" / "g1" / "s2" / "train.log").write_text("Traceback\n")
    runs, _ = analysis.collect(tmp_path, [cell(seed=1), cell(seed=2), cell(seed=3)])
    assert list(runs["status"]) == ["failed", "failed", "missing"]
    assert list(runs["seed"]) == [1, 2, 3]  # keys from the matrix, not from run.json
    assert runs.iloc[0]["reason"].startswith("no run.json")


def test_other_statuses_and_records_without_a_final_record(tmp_path):
    write_cell(tmp_path, seed=1, status="diverged")
    write_cell(tmp_path, seed=2, final=False)
    write_cell(tmp_path, seed=3, status="running")
    runs, _ = analysis.collect(tmp_path, [cell(seed=s) for s in (1, 2, 3)])
    assert list(runs["status"]) == ["diverged", "failed", "failed"]
    assert "no final record" in runs.iloc[1]["reason"]


def test_unknown_numbers_stay_nan_never_zero(tmp_path):
    write_cell(tmp_path, epochs_extra={n: {"peak_mem_mb": None, "data_wait_s": None} for n in range(1, 5)})
    runs, epochs = analysis.collect(tmp_path, [cell()])
    row = runs.iloc[0]
    assert math.isnan(row["peak_mem_mb"]) and math.isnan(row["data_wait_share"])
    assert epochs["val_iou"].isna().all() and math.isnan(row["time_to_target_s"])


def test_time_to_target_is_the_training_time_of_the_first_epoch_at_the_target_validation_iou(tmp_path):
    write_cell(tmp_path, epochs_extra={2: {"val_iou": 0.5}, 3: {"val_iou": 0.85}, 4: {"val_iou": 0.9}})
    runs, epochs = analysis.collect(tmp_path, [cell()], target_iou=0.8)
    assert runs.iloc[0]["time_to_target_s"] == 20.0  # 10 + 4 + 6
    assert pd.isna(runs.iloc[0]["time_to_target_reason"])
    assert list(epochs["val_iou"].dropna()) == [0.5, 0.85, 0.9]


def test_a_target_never_reached_leaves_time_to_target_empty_with_the_best_iou(tmp_path):
    write_cell(tmp_path, epochs_extra={2: {"val_iou": 0.5}, 4: {"val_iou": 0.9}})  # the final test IOU is 0.9 too
    runs, _ = analysis.collect(tmp_path, [cell()], target_iou=0.95)
    row = runs.iloc[0]
    assert math.isnan(row["time_to_target_s"]) and row["status"] == "ok"
    assert row["time_to_target_reason"] == "never reached 0.95 (best 0.9 in 2 evaluations)"


def test_without_validation_during_training_the_reason_names_eval_every(tmp_path):
    write_cell(tmp_path, seed=1, training={"eval_every": 0})
    write_cell(tmp_path, seed=2, epochs_extra={2: {"test_iou": 0.9}})  # a cell from before the validation split
    runs, _ = analysis.collect(tmp_path, [cell(seed=1), cell(seed=2)], target_iou=0.8)
    assert runs["time_to_target_s"].isna().all() and list(runs["status"]) == ["ok", "ok"]
    assert runs.iloc[0]["time_to_target_reason"] == "no validation evaluation during training (training.eval_every: 0)"
    assert "not validation pairs" in runs.iloc[1]["time_to_target_reason"]


def test_a_cell_stopped_at_the_target_is_ok_and_says_so_through_the_csv(tmp_path):
    write_cell(
        tmp_path, times=(10.0, 4.0), epochs_extra={2: {"val_iou": 0.85}}, final_extra={"stopped_at_target": True}
    )
    write_cell(tmp_path, seed=2, final=False)
    runs, _ = analysis.collect(tmp_path, [cell(), cell(seed=2)], target_iou=0.8)
    runs.to_csv(tmp_path / "runs.csv", index=False)
    runs = summary_csv.read_runs(tmp_path / "runs.csv")
    assert list(runs["status"]) == ["ok", "failed"] and runs.iloc[0]["epochs"] == 2
    assert runs["stopped_at_target"].tolist()[0] is True and pd.isna(runs.iloc[1]["stopped_at_target"])
    assert runs.iloc[0]["time_to_target_s"] == 14.0


STUDY = Invocation(("snakemake",), "/work/study", ("--profile", "/repo/profiles/slurm", "--configfile", "/s.yaml"))


def test_rerun_commands_name_the_cell_and_force_only_where_outputs_exist(tmp_path):
    write_cell(tmp_path, seed=1, status="diverged")
    write_cell(tmp_path, seed=2, run_json=False)
    collected = summary.collect_study(str(tmp_path), [cell(seed=s) for s in (1, 2, 3)], 0.8, [], STUDY)
    commands = dict(zip(collected.incomplete["item"], collected.incomplete["rerun"]))
    study = "cd /work/study && snakemake --profile /repo/profiles/slurm --configfile /s.yaml"
    assert commands == {
        "torch/native/g1/s1": f"{study} --force -- results/runs/torch/native/g1/s1/metrics.jsonl",
        "torch/native/g1/s2": f"{study} -- results/runs/torch/native/g1/s2/metrics.jsonl",
        "torch/native/g1/s3": f"{study} -- results/runs/torch/native/g1/s3/metrics.jsonl",
        completeness.ALL_ITEM: f"{study} --force -- "
        + " ".join(f"results/runs/torch/native/g1/s{s}/metrics.jsonl" for s in (1, 2, 3)),
    }
    assert list(collected.incomplete["status"]) == ["diverged", "failed", "missing", ""]
    assert INCOMPLETE.names == list(collected.incomplete.columns)
    assert list(collected.provenance["config_hash"].fillna("")) == ["h1", "", ""]


def test_a_refused_cell_is_listed_with_its_reason_and_the_command_that_reruns_it(tmp_path):
    reason = "rank0: DeviceError: this cell is meant for GPUs (training.device is cuda) but torch sees none"
    write_cell(tmp_path, seed=1, status="refused", times=(), run_extra={"reason": reason})
    collected = summary.collect_study(str(tmp_path), [cell(seed=1)], 0.8, [], STUDY)
    (row,) = collected.incomplete.to_dict("records")
    assert (row["item"], row["status"], row["reason"]) == ("torch/native/g1/s1", "refused", reason)
    assert row["rerun"].endswith(" --force -- results/runs/torch/native/g1/s1/metrics.jsonl")


def test_a_cell_trained_on_other_prepared_data_is_stale_not_ok(tmp_path):
    write_cell(tmp_path, seed=1, data_key="synthetic-32x48-aaaa")
    write_cell(tmp_path, seed=2, data_key="synthetic-32x48-bbbb")
    write_cell(tmp_path, seed=3)  # written before cells recorded their data key: nothing to compare
    collected = summary.collect_study(
        str(tmp_path), [cell(seed=s) for s in (1, 2, 3)], 0.8, [], STUDY, "synthetic-32x48-bbbb"
    )
    runs = collected.runs
    assert list(runs["status"]) == ["stale", "ok", "ok"]
    assert "trained on prepared data synthetic-32x48-aaaa, the study's is synthetic-32x48-bbbb" in runs["reason"][0]
    assert list(collected.incomplete["item"]) == ["torch/native/g1/s1"]
    assert " --force -- results/runs/torch/native/g1/s1/metrics.jsonl" in collected.incomplete["rerun"][0]


def test_a_cell_trained_with_other_settings_is_stale_and_the_reason_says_what_changed(tmp_path):
    now = {"training": {"epochs": 3, "base_lr": 0.001}, "cell": {"gpus": 1}}
    write_cell(tmp_path, seed=1, settings={"training": {"epochs": 2, "base_lr": 0.001}, "cell": {"gpus": 1}})
    write_cell(tmp_path, seed=2, settings=now)
    cells = [{**cell(seed=s), "settings": now} for s in (1, 2)]
    runs = summary.collect_study(str(tmp_path), cells, 0.8, [], STUDY).runs
    assert list(runs["status"]) == ["stale", "ok"]
    assert runs["reason"][0] == "trained with other settings than the study's: training.epochs: 2 -> 3"


def test_the_provenance_table_shows_the_training_settings_that_differ_between_cells(tmp_path):
    def settings(gpus: int, backend: str) -> dict:
        record = {"epochs": 3, "batch_per_gpu": 4, "global_batch": 4 * gpus, "precision": "fp32"}
        if backend == "horovod":
            record["horovod"] = {"allow_cpu_reductions": False, "backward_passes_per_step": gpus}
        return record

    cells = [cell(gpus=1), cell(gpus=2), cell(backend="horovod", gpus=1), cell(backend="horovod", gpus=2)]
    for keys in cells:
        write_cell(tmp_path, **keys, training=settings(keys["gpus"], keys["backend"]))
    write_cell(tmp_path, gpus=4, run_json=False)  # a failed cell has no settings: it compares with nothing
    collected = summary.collect_study(str(tmp_path), [*cells, cell(gpus=4)], 0.8, [], STUDY)
    table = collected.provenance
    added = [c for c in table.columns if c.startswith("training.")]
    assert added == ["training.global_batch", "training.horovod.backward_passes_per_step"]
    rows = {(b, g): row for b, g, row in zip(table["backend"], table["gpus"], table.to_dict("records"))}
    assert rows[("horovod", 2)]["training.global_batch"] == 8
    assert rows[("horovod", 2)]["training.horovod.backward_passes_per_step"] == 2
    assert rows[("native", 2)]["training.horovod.backward_passes_per_step"] is None  # not a Horovod cell
    assert rows[("native", 4)]["training.global_batch"] is None
    assert "training" not in table.columns  # the whole record stays in runs.csv
    assert collected.runs["training"].notna().sum() == 4


def test_cells_with_the_same_settings_add_no_columns(tmp_path):
    for seed in (1, 2):
        write_cell(tmp_path, seed=seed, training={"epochs": 3, "loader": {"workers": 2}})
    table = summary.collect_study(str(tmp_path), [cell(seed=1), cell(seed=2)], 0.8, [], STUDY).provenance
    assert not [c for c in table.columns if c.startswith("training.")]


def test_left_out_pairs_and_counts_are_listed_with_their_reason_and_no_command(tmp_path, schema):
    import dataclasses

    from conftest import tiny_config
    from scalebench import config as sb_config

    config = sb_config.validate(
        tiny_config(matrix={"frameworks": ["torch", "tensorflow"], "backends": ["native", "fsdp"], "gpus": [1, 2]}),
        schema,
    )
    left_out = [dataclasses.asdict(entry) for entry in sb_config.left_out(config)]
    write_cell(tmp_path, gpus=1)
    collected = summary.collect_study(str(tmp_path), [cell(gpus=1)], 0.8, [], STUDY, None, left_out)
    rows = collected.incomplete.set_index("item")
    assert list(rows.index) == ["torch/fsdp g1", "tensorflow/fsdp"]
    assert set(rows["status"]) == {completeness.LEFT_OUT} and set(rows["rerun"]) == {""}
    assert rows.loc["torch/fsdp g1", "reason"] == "fsdp needs at least 2 ranks (with one there is nothing to shard)"
    assert rows.loc["tensorflow/fsdp", "reason"].startswith("fsdp is not a TensorFlow backend")


def test_cost_columns_gpu_hours_and_energy_of_the_epochs(tmp_path):
    measured = {n: {"energy_j": 100.0 * n} for n in range(1, 5)}
    nvml = {"energy_source": "nvml", "energy_reason": ""}
    write_cell(
        tmp_path, gpus=4, seed=1, epochs_extra=measured, final_extra={"energy_j": 1000.0, **nvml}, run_extra=nvml
    )
    # out of memory: the final record outcome.py writes has no cost; the epochs' sum stands in
    write_cell(tmp_path, gpus=4, seed=2, status="oom", epochs_extra=measured, run_extra=nvml)
    unread = "RAPL counter not readable (permission denied)"
    write_cell(
        tmp_path,
        gpus=4,
        seed=3,
        epochs_extra={n: {"energy_j": None} for n in range(1, 5)},
        final_extra={"energy_j": None, "energy_source": "rapl", "energy_reason": unread},
        run_extra={"energy_source": "rapl", "energy_reason": unread},
    )
    write_cell(tmp_path, gpus=4, seed=4)  # written before energy was recorded
    runs, epochs = analysis.collect(tmp_path, [cell(gpus=4, seed=s) for s in (1, 2, 3, 4)])
    assert list(runs["train_gpu_hours"]) == pytest.approx([4 * 25.0 / 3600] * 4)  # GPUs x the epochs' summed time
    assert runs["energy_j"].iloc[0] == 1000.0 and runs["energy_j"].iloc[1] == 1000.0
    assert list(runs["energy_source"].iloc[:3]) == ["nvml", "nvml", "rapl"]
    assert math.isnan(runs["energy_j"].iloc[2]) and runs["energy_reason"].iloc[2] == unread  # empty, never 0
    assert math.isnan(runs["energy_j"].iloc[3]) and "not recorded" in runs["energy_reason"].iloc[3]
    assert list(epochs[epochs["seed"] == 1]["energy_j"]) == [100.0, 200.0, 300.0, 400.0]


def test_gpu_hours_are_what_the_job_held_and_an_older_record_leaves_them_empty_with_the_reason(tmp_path):
    """One cost: gpu_hours = GPUs x the job's wall (launch.py's job_s), never the epochs' share and
    never 0 where the record has no job wall."""
    held = {"job_s": 90.0, "job_s_source": "launch", "job_attempts": 1, "job_s_reason": None}
    write_cell(tmp_path, gpus=4, seed=1, run_extra=held)
    write_cell(tmp_path, gpus=4, seed=2)  # written before launch.py recorded the job's wall
    runs, _ = analysis.collect(tmp_path, [cell(gpus=4, seed=s) for s in (1, 2)])
    first, older = runs.iloc[0], runs.iloc[1]
    assert first["gpu_hours"] == pytest.approx(4 * 90.0 / 3600) and first["job_s_source"] == "launch"
    assert first["train_gpu_hours"] == pytest.approx(4 * 25.0 / 3600)
    assert math.isnan(older["gpu_hours"]) and math.isnan(older["job_s"])
    assert older["job_s_reason"].startswith("not recorded (run.json has no job_s")


def test_slurm_s_accounting_columns_beside_the_epochs_cost(tmp_path):
    accounted = {
        "alloc_gpu_hours": 0.25,
        "alloc_gpu_hours_reason": None,
        "step_energy_j": 90000.0,
        "step_energy_source": "sacct",
        "step_energy_reason": None,
    }
    unaccounted = {
        "alloc_gpu_hours": None,
        "alloc_gpu_hours_reason": "not a SLURM job (a local run)",
        "step_energy_j": None,
        "step_energy_source": None,
        "step_energy_reason": "no accounting: AccountingStorageType is accounting_storage/none, so sacct has no steps",
    }
    write_cell(tmp_path, gpus=4, seed=1, run_extra=accounted)
    write_cell(tmp_path, gpus=4, seed=2, run_extra=unaccounted)
    write_cell(tmp_path, gpus=4, seed=3)  # written before SLURM's accounting was recorded
    runs, _ = analysis.collect(tmp_path, [cell(gpus=4, seed=s) for s in (1, 2, 3)])
    assert runs["alloc_gpu_hours"].iloc[0] == 0.25 and runs["step_energy_j"].iloc[0] == 90000.0
    assert runs["step_energy_source"].iloc[0] == "sacct"
    assert runs["train_gpu_hours"].iloc[0] == pytest.approx(4 * 25.0 / 3600)  # the epochs' figure, unchanged
    for seed in (1, 2):  # empty with the reason, never 0
        row = runs.iloc[seed]
        assert math.isnan(row["alloc_gpu_hours"]) and math.isnan(row["step_energy_j"])
        assert row["alloc_gpu_hours_reason"] and row["step_energy_reason"]
    assert runs["step_energy_reason"].iloc[1].startswith("no accounting")
    assert "not recorded" in runs["alloc_gpu_hours_reason"].iloc[2]


def test_what_the_steps_did_is_collected_beside_the_settings_and_read_back_from_the_csv(tmp_path):
    compiled = {"compiler": "torch.compile (inductor)", "graphs": 3, "recompiles": 1, "recompile_reasons": ["x"]}
    rates = {n: {"lr": 0.002 * (1 + 1e-8), "scheduled_lr": 0.002} for n in (1, 2, 3, 4)}
    run = {"compute_dtype": "bfloat16", "compiled": compiled}
    write_cell(tmp_path, run_extra=run, training={"precision": "bf16", "compile": True}, epochs_extra=rates)
    runs, epochs = analysis.collect(tmp_path, [cell()])
    row = runs.iloc[0]
    assert (row["precision"], row["compute_dtype"]) == ("bf16", "bfloat16")
    assert (row["compiled_graphs"], row["recompiles"], row["observed_reason"]) == (3, 1, None)
    assert list(epochs["lr"]) == [0.002 * (1 + 1e-8)] * 4 and list(epochs["scheduled_lr"]) == [0.002] * 4
    runs.to_csv(tmp_path / "runs.csv", index=False)
    back = summary_csv.read_runs(tmp_path / "runs.csv").iloc[0]
    assert (back["compute_dtype"], back["compiled_graphs"], back["recompiles"]) == ("bfloat16", 3, 1)


def test_records_from_before_the_observation_read_as_not_measured_with_the_reason(tmp_path):
    # run.json's compiled was the setting's description then, and the epoch's lr the schedule's
    write_cell(tmp_path, seed=1, run_extra={"compiled": "torch.compile (inductor) of the training model's forward"})
    write_cell(tmp_path, seed=2, times=(), status="refused", final=True)
    runs, epochs = analysis.collect(tmp_path, [cell(seed=1), cell(seed=2)])
    old, refused = runs.iloc[0], runs.iloc[1]
    assert old["compute_dtype"] is None and pd.isna(old["compiled_graphs"]) and pd.isna(old["recompiles"])
    assert old["observed_reason"] == analysis.NOT_OBSERVED
    assert refused["observed_reason"] == "no epoch finished (status refused)"
    assert epochs["lr"].isna().all() and list(epochs["scheduled_lr"]) == [0.001] * 4


def test_placement_and_site_reach_runs_csv_and_stay_out_of_the_provenance_table(tmp_path):
    placed = {
        "local_gpu_ids": ["1", "2"],
        "rank_cpus": ["0-3", "4-7"],
        "site": {"driver": "550.54.15", "gpus": {"0": {"power_limit": "700.00"}}, "environment": {"NCCL_ALGO": "Ring"}},
    }
    write_cell(tmp_path, gpus=2, run_extra=placed)
    write_cell(tmp_path, gpus=1)  # a cell from before placements and sites were recorded
    collected = summary.collect_study(str(tmp_path), [cell(gpus=1), cell(gpus=2)], 0.8, [], STUDY)
    runs = collected.runs.set_index("gpus")
    assert (runs.loc[2, "local_gpu_ids"], runs.loc[2, "rank_cpus"]) == ("1,2", "0-3;4-7")
    assert json.loads(runs.loc[2, "site"]) == {
        "driver": "550.54.15",
        "gpus.0.power_limit": "700.00",
        "environment.NCCL_ALGO": "Ring",
    }
    assert runs.loc[1, ["local_gpu_ids", "rank_cpus", "site"]].isna().all()
    assert {"local_gpu_ids", "rank_cpus"} <= set(collected.provenance.columns) and "site" not in collected.provenance


def test_the_step_split_per_steady_epoch_and_the_profiled_epoch_left_out(tmp_path):
    # epoch 3 traced a window (training.profile): slower, and out of every steady figure
    write_cell(
        tmp_path,
        times=(10.0, 4.0, 9.0, 6.0),
        epochs_extra={
            3: {"profiled": True, "profile_trace": "profile"},
            4: {"straggler_rank": 0, "straggler_host": "n1"},
        },
    )
    runs, epochs = analysis.collect(tmp_path, [cell()])
    row = runs.iloc[0]
    assert row["steady_epoch_s"] == 5.0 and row["images_per_s"] == pytest.approx((100 / 4 + 100 / 6) / 2)  # 2, 4
    # the median rank's parts, as recorded, and the critical path of the steady median epochs (2 and 4:
    # 4 and 6 s): rank 1 computed longest and waited least, so rank 0's longer wait is not communication
    assert row["compute_median_s"] == pytest.approx(0.7 * 5.0) and row["comm_exposed_median_s"] == pytest.approx(0.75)
    path = [row[name] for name in step_split.CRITICAL_PATH]
    assert path == pytest.approx([0.65 * 5.0, 0.1 * 5.0, 0.1 * 5.0, 0.1 * 5.0, 0.05 * 5.0])
    assert sum(path) == pytest.approx(row["steady_epoch_s"]) and row["critical_rank"] == 1
    assert row["comm_share"] == pytest.approx(0.1) and row["comm_overlap"] == pytest.approx(0.5)
    assert (row["profiled_epoch"], row["profile_trace"]) == (3, "profile") and pd.isna(row["step_split_reason"])
    assert row["straggler_rank"] in (0, 1) and row["straggler_host"] == ["n1", "n2"][row["straggler_rank"]]
    assert list(epochs["profiled"]) == [False, False, True, False]
    assert list(epochs["compute_median_s"]) == pytest.approx([7.0, 2.8, 6.3, 4.2])
    assert list(epochs["imbalance_s"]) == pytest.approx([1.0, 0.4, 0.9, 0.6])  # 0.75 - 0.65 of each epoch
    parts = epochs[step_split.CRITICAL_PATH].sum(axis=1)
    assert list(parts) == pytest.approx(list(epochs["epoch_time_s"]))


def test_the_first_epoch_after_a_resume_is_a_warm_up_out_of_the_steady_figures(tmp_path):
    # the cell resumed from epoch 2's checkpoint (a retry, a requeued job): epoch 3 warmed up again
    write_cell(tmp_path, times=(10.0, 4.0, 9.0, 6.0), epochs_extra={3: {"resumed": True}})
    runs, _ = analysis.collect(tmp_path, [cell()])
    row = runs.iloc[0]
    assert row["steady_epoch_s"] == 5.0 and row["compute_median_s"] == pytest.approx(0.7 * 5.0)  # epochs 2 and 4
    assert row["images_per_s"] == pytest.approx((100 / 4 + 100 / 6) / 2)


def test_records_from_before_the_split_or_with_it_off_read_as_not_measured(tmp_path):
    from cell_records import without_split
    from scalebench.train.step_timing import unmeasured

    without_split(write_cell(tmp_path, seed=1))
    off = unmeasured("training.step_split is off")  # as the loop records an epoch with the split off
    write_cell(tmp_path, seed=2, epochs_extra=dict.fromkeys(range(1, 5), off))
    runs, epochs = analysis.collect(tmp_path, [cell(seed=1), cell(seed=2)])
    runs.to_csv(tmp_path / "runs.csv", index=False)
    epochs.to_csv(tmp_path / "epochs.csv", index=False)
    runs, epochs = summary_csv.read_runs(tmp_path / "runs.csv"), summary_csv.read_epochs(tmp_path / "epochs.csv")
    old, unmeasured_row = runs.iloc[0], runs.iloc[1]
    for row in (old, unmeasured_row):
        names = ("compute_median_s", "comm_exposed_median_s", "comm_total_s", "comm_share", "rest_median_s")
        assert all(math.isnan(row[c]) for c in (*names, *step_split.CRITICAL_PATH))
        assert row["status"] == "ok" and row["steady_epoch_s"] == 5.0
    assert old["step_split_reason"] == "not recorded (the cell predates the step split)"
    assert unmeasured_row["step_split_reason"] == "training.step_split is off"
    assert epochs[epochs["seed"] == 1]["step_split_reason"].eq("not recorded (the cell predates the step split)").all()
    assert epochs["compute_median_s"].isna().all() and epochs["imbalance_s"].isna().all()


def test_a_cell_whose_job_the_study_ended_stuck_is_listed_as_such_with_the_command_that_reruns_it(tmp_path):
    from scalebench.analysis import completeness
    from scalebench.cluster import stuck_jobs

    held = tmp_path / "torch" / "native" / "g1" / "s1"
    ended = stuck_jobs.Ended("held", "PENDING", "JobHeldUser", "41", 125.0, 120.0, "2030-01-01T00:00:00+00:00")
    stuck_jobs.write_mark(held, ended)
    write_cell(tmp_path, seed=2)
    stuck_jobs.write_mark(tmp_path / "torch" / "native" / "g1" / "s2", ended)  # a later run finished it: ok
    runs = analysis.collect(tmp_path, [cell(seed=1), cell(seed=2)])[0]
    assert runs["status"].tolist() == ["held", "ok"]
    assert runs["reason"].iloc[0] == (
        "SLURM job 41 sat 2.1 min in state PENDING (JobHeldUser), longer than cluster.stuck_after_min (2.0 min): "
        "ended by the study"
    )
    listed = completeness.incomplete(runs, [], Invocation(("snakemake",), "/study", ("--executor", "slurm")))
    assert (
        listed["status"].tolist() == ["held"] and "results/runs/torch/native/g1/s1/metrics.jsonl" in listed["rerun"][0]
    )
