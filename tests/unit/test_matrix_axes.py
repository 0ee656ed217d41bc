"""The optional matrix axes (model width, batch per GPU, precision, compression) and strong scaling: the cells
they make, their paths and settings, the bad input refused naming the key, and the tables keyed
on them."""

from __future__ import annotations

import pandas as pd
import pytest
from cell_records import cell, write_cell
from conftest import tiny_config
from scalebench import config as sb_config
from scalebench.analysis import study as summary
from scalebench.analysis.scaling import scaling
from scalebench.report.style import tidy
from scalebench.rerun import Invocation
from scalebench.settings import RunSettings
from scalebench.train.lr_schedule import scaled_lr

STUDY = Invocation(("snakemake",), "/work/study", ("--configfile", "/s.yaml"))


def resolved(schema, matrix=None, training=None, **sections):
    base = {"frameworks": ["torch", "tensorflow"], "backends": ["native", "horovod"], "gpus": [1, 2], "seeds": [1]}
    return sb_config.validate(
        tiny_config(matrix={**base, **(matrix or {})}, training=training or {}, **sections), schema
    )


def test_a_study_without_optional_axes_keeps_its_paths_and_settings(schema):
    config = resolved(schema)
    cells = sb_config.cells(config)
    assert [c.path for c in cells[:2]] == ["torch/native/g1/s1", "torch/native/g2/s1"]
    assert all(c.variant == "" for c in cells)
    settings = sb_config.train_settings(config, cells[0])
    assert settings["cell"] == {"framework": "torch", "backend": "native", "gpus": 1, "seed": 1}


def test_axes_name_their_values_in_the_paths_and_set_each_cells_training(schema):
    config = resolved(schema, {"batch_per_gpu": [2, 4], "precision": ["fp32", "bf16"], "frameworks": ["torch"]})
    cells = sb_config.cells(config)
    assert len(cells) == 2 * 2 * 2 * 2  # backends x batches x precisions x gpus
    paths = {c.path for c in cells}
    assert "torch/native/batch2_fp32/g1/s1" in paths and "torch/horovod/batch4_bf16/g2/s1" in paths
    chosen = next(c for c in cells if c.path == "torch/horovod/batch4_bf16/g2/s1")
    settings = sb_config.train_settings(config, chosen)
    assert settings["training"]["batch_per_gpu"] == 4 and settings["training"]["precision"] == "bf16"
    run = RunSettings.from_json(settings, "/data", "/out")
    assert run.cell == chosen and run.training.autocast_dtype == "bfloat16"


def test_a_compression_a_backend_lacks_is_left_out_with_the_reason(schema):
    config = resolved(schema, {"compression": ["none", "fp16"]})
    paths = {c.path for c in sb_config.cells(config)}
    assert "torch/native/compress-fp16/g2/s1" in paths and "tensorflow/horovod/compress-fp16/g2/s1" in paths
    assert "tensorflow/native/compress-none/g2/s1" in paths
    assert "tensorflow/native/compress-fp16/g2/s1" not in paths
    [entry] = sb_config.left_out(config)
    assert entry.item == "tensorflow/native compress-fp16"
    assert "compression fp16 is not available for TensorFlow backend native" in entry.describe()


def test_compile_sweeps_eager_and_compiled_and_leaves_out_the_backends_that_cannot(schema):
    matrix = {"compile": [False, True], "backends": ["native", "horovod", "dp", "mirrored"]}
    config = resolved(schema, matrix, {"deterministic": False})
    paths = {c.path for c in sb_config.cells(config)}
    assert {"torch/native/eager/g2/s1", "torch/native/compiled/g2/s1", "tensorflow/mirrored/compiled/g2/s1"} <= paths
    assert "torch/dp/eager/g1/s1" in paths and "torch/dp/compiled/g1/s1" not in paths
    compiled_cell = next(c for c in sb_config.cells(config) if c.path == "tensorflow/horovod/compiled/g1/s1")
    assert sb_config.train_settings(config, compiled_cell)["training"]["compile"] is True
    # (torch/mirrored and tensorflow/dp do not exist, at either variant)
    left = [
        entry
        for entry in sb_config.left_out(config)
        if entry.variant == "compiled" and " is not a " not in entry.reason
    ]
    assert [entry.item for entry in left] == ["torch/dp compiled"]
    assert "nn.DataParallel copies the model to every GPU" in left[0].reason


def test_compiled_tensorflow_steps_that_must_be_deterministic_are_left_out_saying_why(schema):
    config = resolved(schema, {"compile": [True]}, {"deterministic": True})
    reasons = {entry.item: entry.reason for entry in sb_config.left_out(config)}
    assert set(reasons) == {"tensorflow/native compiled", "tensorflow/horovod compiled"}
    assert all("XLA has no deterministic implementation" in reason for reason in reasons.values())
    assert {c.framework for c in sb_config.cells(config)} == {"torch"}


def test_strong_scaling_divides_the_global_batch_and_keeps_the_rate(schema):
    config = resolved(schema, {"gpus": [1, 2, 4]}, {"scaling": "strong", "global_batch": 8, "batch_per_gpu": 1})
    cells = [c for c in sb_config.cells(config) if c.framework == "torch" and c.backend == "native"]
    assert [c.path for c in cells] == [f"torch/native/strong_global8/g{g}/s1" for g in (1, 2, 4)]
    runs = [RunSettings.from_json(sb_config.train_settings(config, c), "/d", "/o") for c in cells]
    assert [r.training.batch_per_gpu for r in runs] == [8, 4, 2]
    assert [scaled_lr(r.training, c.gpus) for r, c in zip(runs, cells)] == [runs[0].training.base_lr] * 3


def test_weak_and_strong_in_one_study_each_cell_names_its_scaling(schema):
    config = resolved(
        schema, {"scaling": ["weak", "strong"], "frameworks": ["torch"], "backends": ["native"]}, {"global_batch": 8}
    )
    assert [c.path for c in sb_config.cells(config)] == [
        "torch/native/weak/g1/s1",
        "torch/native/weak/g2/s1",
        "torch/native/strong_global8/g1/s1",
        "torch/native/strong_global8/g2/s1",
    ]


@pytest.mark.parametrize(
    ("matrix", "training", "message"),
    [
        ({"precision": ["fp32", "fp8"]}, {}, "config key 'matrix.precision[1]': 'fp8' is not one of"),
        ({"compression": ["gzip"]}, {}, "config key 'matrix.compression[0]'"),
        (
            {"gpus": [1, 2, 3]},
            {"scaling": "strong", "global_batch": 8},
            "config key 'training.global_batch': 8 does not divide over 3 GPUs",
        ),
        ({}, {"scaling": "strong"}, "config key 'training.global_batch': required with strong scaling"),
        (
            {"scaling": ["strong"], "batch_per_gpu": [2]},
            {"global_batch": 8},
            "config key 'matrix.batch_per_gpu': strong scaling",
        ),
        ({"precision": ["bf16", "fp16"]}, {"device": "cpu"}, "config key 'matrix.precision': fp16 needs a GPU"),
        ({"batch_per_gpu": [2, 500]}, {}, "config key 'matrix.batch_per_gpu': 500 is larger than the shard"),
        ({"model_width": [1, 0]}, {}, "config key 'matrix.model_width[1]': 0 is less than the minimum of 1"),
        ({"model_width": [-2]}, {}, "config key 'matrix.model_width[0]': -2 is less than the minimum of 1"),
        ({"model_width": [1.5]}, {}, "config key 'matrix.model_width[0]': 1.5 is not of type 'integer'"),
        ({"model_width": [4.0]}, {}, "config key 'matrix.model_width': 4.0 is not a whole number (write 4)"),
        ({"model_width": [1, 1]}, {}, "config key 'matrix.model_width': duplicate values [1]"),
    ],
)
def test_bad_axes_are_refused_naming_the_key(schema, matrix, training, message):
    with pytest.raises(sb_config.ConfigError) as error:
        resolved(schema, matrix, training)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("width", "message"),
    [
        (0, "config key 'model.width': 0 is less than the minimum of 1"),
        (-1, "config key 'model.width': -1 is less than the minimum of 1"),
        (2.5, "config key 'model.width': 2.5 is not of type 'integer'"),
        ("wide", "config key 'model.width': 'wide' is not of type 'integer'"),
    ],
)
def test_a_bad_model_width_is_refused_naming_the_key(schema, width, message):
    with pytest.raises(sb_config.ConfigError) as error:
        resolved(schema, model={"width": width})
    assert message in str(error.value)


def test_model_width_sweeps_the_unet_and_names_each_width_in_the_paths(schema):
    config = resolved(schema, {"model_width": [1, 4], "precision": ["bf16"], "frameworks": ["torch"]})
    paths = {c.path for c in sb_config.cells(config)}
    assert {"torch/native/width1_bf16/g1/s1", "torch/horovod/width4_bf16/g2/s1"} <= paths and len(paths) == 8
    chosen = next(c for c in sb_config.cells(config) if c.path == "torch/native/width4_bf16/g2/s1")
    settings = sb_config.train_settings(config, chosen)
    assert settings["model"] == {"width": 4} and "model_width" not in settings["training"]
    assert RunSettings.from_json(settings, "/d", "/o").model_width == 4
    # without the axis the study's model.width, and no folder level: today's paths and settings
    plain = resolved(schema, model={"width": 2})
    first = sb_config.cells(plain)[0]
    assert first.path == "torch/native/g1/s1" and sb_config.train_settings(plain, first)["model"] == {"width": 2}


def test_a_width_that_cannot_fit_the_declared_gpu_memory_is_refused_before_any_job(schema):
    from scalebench import architecture

    sixteen = architecture.memory_floor_bytes(16, 4, (32, 48), 4)  # width 16's state alone: about 1.9 GiB
    assert 16 * architecture.parameter_count(16) <= sixteen < 16 * architecture.parameter_count(16) + 2**30
    cluster = {"device_memory_gb": 1.5}
    with pytest.raises(sb_config.ConfigError) as error:
        resolved(schema, {"model_width": [1, 16]}, cluster=cluster)
    message = str(error.value)
    assert "config key 'matrix.model_width': width 16 (124,119,169 parameters)" in message
    assert "more than a GPU's 1.5 GiB (cluster.device_memory_gb" in message and "width 1 " not in message
    # FSDP shares the state over its ranks: the same width fits on two of them
    resolved(schema, {"model_width": [16], "backends": ["fsdp"], "frameworks": ["torch"], "gpus": [2]}, cluster=cluster)
    # CPU ranks are not checked against a GPU's memory, nor is anything without the key
    resolved(schema, {"model_width": [16]}, {"device": "cpu"}, cluster=cluster)
    resolved(schema, {"model_width": [16]})


def test_a_record_from_before_model_width_reads_as_width_1(tmp_path):
    write_cell(tmp_path, training={"scaling": "weak"})  # a finished run.json without model_width
    write_cell(tmp_path, gpus=2, variant="width4", run_extra={"model_width": 4, "gradient_bytes": 31049860})
    settings = {"model": {"width": 4}, "training": {"scaling": "weak"}}
    entries = [
        cell(),
        cell(gpus=2, variant="width4", settings=settings),
        cell(gpus=4, variant="width4", settings=settings),
    ]
    runs = summary.collect_study(str(tmp_path), entries, 0.8, [], STUDY).runs.set_index(["variant", "gpus"])
    assert runs.loc[("", 1), "model_width"] == 1 and pd.isna(runs.loc[("", 1), "gradient_bytes"])
    assert runs.loc[("", 1), "collective_reason"] == "not recorded (the cell predates the collective benchmark)"
    assert runs.loc[("width4", 2), "model_width"] == 4 and runs.loc[("width4", 2), "gradient_bytes"] == 31049860
    assert runs.loc[("width4", 4), "model_width"] == 4 and runs.loc[("width4", 4), "status"] == "missing"


def test_steps_per_epoch_is_refused_beside_a_dataset_repeat(schema):
    with pytest.raises(sb_config.ConfigError, match="config key 'training.steps_per_epoch': set together with"):
        resolved(schema, training={"steps_per_epoch": 10, "dataset_repeat": 2})
    assert resolved(schema, training={"steps_per_epoch": 10})["training"]["steps_per_epoch"] == 10


def test_removed_precision_keys_say_what_replaced_them(schema):
    with pytest.raises(sb_config.ConfigError, match="'training.amp_dtype' was removed: training.precision names"):
        resolved(schema, training={"precision": "bf16", "amp_dtype": "bfloat16"})


def test_tables_key_on_the_variant_and_rerun_commands_name_its_folder(tmp_path):
    settings = {
        "training": {
            "scaling": "weak",
            "batch_per_gpu": 8,
            "precision": "bf16",
            "compression": "none",
            "horovod": {"backward_passes_per_step": 1},
        }
    }
    for gpus, times in ((1, (10.0, 8.0, 8.0)), (2, (6.0, 4.0, 4.0))):
        write_cell(tmp_path, gpus=gpus, variant="batch8_bf16", times=times)
        write_cell(tmp_path, gpus=gpus, times=(10.0, 10.0, 10.0))
    entries = [cell(gpus=g, variant=v, settings=settings if v else None) for g in (1, 2) for v in ("", "batch8_bf16")]
    entries.append(cell(gpus=4, variant="batch8_bf16", settings=settings))
    collected = summary.collect_study(str(tmp_path), entries, 0.8, [], STUDY)
    runs = collected.runs
    named = runs[runs["variant"] == "batch8_bf16"]
    assert list(named["batch_per_gpu"]) == [8, 8, 8] and list(named["precision"]) == ["bf16"] * 3
    assert list(named["global_batch"]) == [8, 16, 32]
    table = scaling(runs)
    two = table[table["gpus"] == 2].set_index("variant")
    assert two.loc["batch8_bf16", "speedup_epoch_time"] == pytest.approx(2.0)  # against its own 1-GPU base
    assert two.loc["", "speedup_epoch_time"] == pytest.approx(1.0)
    missing = collected.incomplete[collected.incomplete["item"] == "torch/native/batch8_bf16/g4/s1"]
    assert missing["rerun"].iloc[0].endswith("results/runs/torch/native/batch8_bf16/g4/s1/metrics.jsonl")


def test_figures_label_each_variant():
    frame = pd.DataFrame(
        {
            "source": "scalebench",
            "framework": "torch",
            "backend": ["native", "native", "horovod"],
            "variant": ["", "strong_global8", "bf16_weak"],
            "gpus": [1, 1, 2],
        }
    )
    assert list(tidy(frame)["backend"]) == ["native", "native strong_global8", "Horovod bf16_weak"]


def test_the_variant_and_settings_survive_the_csv_round_trip(tmp_path):
    from scalebench.analysis.summary_csv import read_epochs, read_runs

    settings = {"training": {"scaling": "weak", "batch_per_gpu": 4, "precision": "fp16", "compression": "none"}}
    write_cell(tmp_path, variant="fp16")
    write_cell(tmp_path)
    entries = [cell(variant="fp16", settings=settings), cell()]
    collected = summary.collect_study(str(tmp_path), entries, 0.8, [], STUDY)
    collected.runs.to_csv(tmp_path / "runs.csv", index=False)
    collected.epochs.to_csv(tmp_path / "epochs.csv", index=False)
    runs, epochs = read_runs(tmp_path / "runs.csv"), read_epochs(tmp_path / "epochs.csv")
    assert sorted(runs["variant"]) == ["", "fp16"] and sorted(set(epochs["variant"])) == ["", "fp16"]
    assert runs.set_index("variant").loc["fp16", "compression"] == "none"
    assert pd.isna(runs.set_index("variant").loc["", "precision"])  # not recorded: empty, not a guess
