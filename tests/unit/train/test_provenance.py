"""run.json's training record: every setting a cell trained with, as the cell resolved it."""

from __future__ import annotations

import dataclasses

from conftest import SCRIPTS, cell_settings, repository_head
from scalebench.settings import ProcessFacts, RunSettings, TrainingSettings
from scalebench.train import provenance, rank_env
from scalebench.train.tf.mirrored import MirroredBackend
from scalebench.train.tf.native import MultiWorkerBackend
from scalebench.train.torch.horovod import HorovodTorchBackend

TWO_RANKS = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}


def strategy_backend(kind: type, place: rank_env.RankInfo, *more):
    """A TensorFlow strategy backend around the default strategy (its options need no workers)."""
    import tensorflow as tf

    implementation = "RING" if kind is MultiWorkerBackend else "local"
    return kind(place, "cpu", False, tf.distribute.get_strategy(), implementation, *more)


def settings(framework: str, backend: str, replicas: int, **training) -> RunSettings:
    return RunSettings.from_json(cell_settings(framework, backend, replicas, **training), "data", "out")


def record_of(run: RunSettings, backend) -> dict:
    framework, replicas = run.cell.framework, run.cell.gpus
    return provenance.training_record(
        run.training,
        framework=framework,
        device_type="cpu",
        replicas=replicas,
        threads=ProcessFacts.of_rank(run, {}).threads,
        deterministic=True,
        passes=backend.backward_passes_per_step,
        compression=backend.gradient_compression,
        backend_options=backend.options(),
    )


def test_a_horovod_cell_records_its_batch_rate_precision_and_options_as_resolved():
    run = settings(
        "torch",
        "horovod",
        2,
        horovod={"backward_passes_per_step": 3},
        base_lr=0.002,
        lr_scaling="sqrt",
        precision="bf16",
    )
    record = record_of(run, HorovodTorchBackend(rank_env.detect(TWO_RANKS), run.training.horovod))
    assert (record["batch_per_gpu"], record["backward_passes_per_step"], record["global_batch"]) == (4, 3, 24)
    assert record["lr_scaling"] == "sqrt" and record["scaled_lr"] == 0.002 * 2**0.5
    assert record["precision"] == "bf16" and record["deterministic"] is True
    assert record["collective_timeout_s"] == 30 and record["threads_per_rank"] == 1 and record["device"] == "cpu"
    assert record["horovod"] == {
        "backward_passes_per_step": 3,
        "allow_cpu_reductions": False,
    }
    assert record["loader"]["workers"] == 0 and "tf_strategy" not in record


def test_tensorflow_cells_record_their_strategy_their_placement_and_no_horovod_or_dataloader():
    native = record_of(
        settings("tensorflow", "native", 2), strategy_backend(MultiWorkerBackend, rank_env.detect(TWO_RANKS))
    )
    mirrored_backend = strategy_backend(MirroredBackend, rank_env.detect({}), "logical CPU")
    mirrored = record_of(settings("tensorflow", "mirrored", 2), mirrored_backend)
    assert native["tf_strategy"] == "MultiWorkerMirroredStrategy" and "tf_replica_devices" not in native
    assert mirrored["tf_strategy"] == "MirroredStrategy" and "tf_replica_devices" in mirrored
    assert mirrored["backward_passes_per_step"] == 1 and mirrored["global_batch"] == 8
    assert "horovod" not in set(native) | set(mirrored)
    # where the samples live is both frameworks' setting; the DataLoader's workers are PyTorch's
    assert native["loader"] == mirrored["loader"] == {"placement": "auto", "device_memory_share": 0.25}


def test_a_one_process_backend_gets_the_threads_of_every_device_it_drives():
    # threads_per_rank is 1 in tiny_config: the mirrored process drives 2 replicas
    assert ProcessFacts.of_rank(settings("tensorflow", "mirrored", 2), {}).threads == 2
    assert ProcessFacts.of_rank(settings("tensorflow", "native", 2), {}).threads == 1
    slurm = RunSettings.from_json(cell_settings("tensorflow", "mirrored", 2, threads_per_rank=None), "d", "o")
    # the task's CPUs: config/resources.py gave it those of both devices
    assert ProcessFacts.of_rank(slurm, {"SLURM_CPUS_PER_TASK": "6"}).threads == 6


def test_every_setting_is_recorded_under_its_name_but_the_measurements_and_the_backends_sections():
    """The record is built from TrainingSettings' fields: a new setting is recorded without a
    second list to update; what joins them is what the rank resolved, and the backend's options."""
    backend = strategy_backend(MultiWorkerBackend, rank_env.detect({}))
    record = record_of(settings("tensorflow", "native", 1), backend)
    fields = {f.name for f in dataclasses.fields(TrainingSettings)}
    assert fields - set(record) == set(provenance.NOT_RECORDED) | set(provenance.BACKEND_SECTIONS)
    assert set(record) - fields == {"backward_passes_per_step", "scaled_lr", *backend.options()}


def test_the_resolved_values_replace_the_settings_of_the_same_name():
    run = settings("torch", "native", 2, scaling="strong", global_batch=16, deterministic=None, threads_per_rank=None)
    backend = HorovodTorchBackend(rank_env.detect(TWO_RANKS), run.training.horovod)
    record = record_of(run, backend)
    # the images per step as trained, the rank's threads, the determinism and device it resolved
    assert (record["global_batch"], record["batch_per_gpu"]) == (16, 8)
    assert record["threads_per_rank"] == 1 and record["deterministic"] is True and record["device"] == "cpu"
    assert record["target_iou"] is None  # the report's target: it ends no training here
    stopping = settings("torch", "native", 2, stop_at_target=True, target_iou=0.6, eval_every=1)
    assert record_of(stopping, backend)["target_iou"] == 0.6


def test_the_commit_is_the_checkouts_head_and_a_dirty_tree_says_so():
    assert provenance.git_commit(SCRIPTS / "scalebench") == (repository_head(), None)


def test_outside_a_checkout_or_without_git_the_commit_is_empty_with_the_reason(tmp_path, monkeypatch):
    commit, reason = provenance.git_commit(tmp_path)
    assert commit is None and reason.startswith(f"not a git checkout: {tmp_path} (git rev-parse: fatal:")
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on this node's PATH
    assert provenance.git_commit(tmp_path) == (None, "git is not installed where the rank ran")
