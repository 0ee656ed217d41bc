"""run.json's training record of TensorFlow's strategy backends, as the cell resolved it (test_provenance.py)."""

from __future__ import annotations

import dataclasses

from scalebench.settings import TrainingSettings
from scalebench.train import provenance, rank_env
from scalebench.train.tf.mirrored import MirroredBackend
from scalebench.train.tf.native import MultiWorkerBackend
from test_provenance import TWO_RANKS, record_of, settings

ENVIRONMENT = "tensorflow"


def strategy_backend(kind: type, place: rank_env.RankInfo, *more):
    """A TensorFlow strategy backend around the default strategy (its options need no workers)."""
    import tensorflow as tf

    implementation = "RING" if kind is MultiWorkerBackend else "local"
    return kind(place, "cpu", False, tf.distribute.get_strategy(), implementation, *more)


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


def test_every_setting_is_recorded_under_its_name_but_the_measurements_and_the_backends_sections():
    """The record is built from TrainingSettings' fields: a new setting is recorded without a
    second list to update; what joins them is what the rank resolved, and the backend's options."""
    backend = strategy_backend(MultiWorkerBackend, rank_env.detect({}))
    record = record_of(settings("tensorflow", "native", 1), backend)
    fields = {f.name for f in dataclasses.fields(TrainingSettings)}
    assert fields - set(record) == set(provenance.NOT_RECORDED) | set(provenance.BACKEND_SECTIONS)
    assert set(record) - fields == {"backward_passes_per_step", "scaled_lr", *backend.options()}
