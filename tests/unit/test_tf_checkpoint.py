"""tf.train checkpoints: round trip, atomic replacement, and refusal of foreign or broken ones."""

from __future__ import annotations

import numpy as np
import pytest
from scalebench import tf_model, tf_training

tf = tf_training.tf
keras = tf_training.keras


def objects(seed: int) -> dict:
    tf.keras.utils.set_random_seed(seed)
    model = tf_model.build_unet((16, 16))
    optimizer = keras.optimizers.Adam(1e-3, epsilon=1e-8)
    optimizer.build(model.trainable_variables)
    return {"model": model, "optimizer": optimizer}


def test_round_trip_restores_weights_and_meta(tmp_path):
    saved = objects(1)
    meta = {
        "epoch": 2,
        "records": [{"type": "epoch", "loss": 0.5}],
        "train_time_s": 1.5,
        "rng": tf_training.rng_state(),
    }
    writer = tf_training.Checkpoint(tmp_path, "hash-a", saved, enabled=True, participates=False)
    writer.save(meta, 2)
    writer.save({**meta, "epoch": 3, "records": meta["records"] * 2}, 3)  # one writer, reused every epoch
    assert sorted(p.name for p in (tmp_path / "checkpoint").glob("ckpt-*.index")) == ["ckpt-3.index"]
    restored = objects(2)
    loaded = tf_training.Checkpoint(tmp_path, "hash-a", restored, enabled=False, participates=False).load()
    assert loaded["epoch"] == 3 and loaded["records"] == meta["records"] * 2
    for a, b in zip(saved["model"].weights, restored["model"].weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_checkpoint_of_another_config_is_ignored_with_a_warning(tmp_path):
    saved = objects(1)
    tf_training.Checkpoint(tmp_path, "hash-a", saved, enabled=True, participates=False).save({"epoch": 1}, 1)
    with pytest.warns(UserWarning, match="written for config hash-a, this run is hash-b"):
        assert tf_training.Checkpoint(tmp_path, "hash-b", objects(2), enabled=True, participates=False).load() is None


def test_truncated_checkpoint_is_ignored_with_a_warning(tmp_path):
    saved = objects(1)
    tf_training.Checkpoint(tmp_path, "hash-a", saved, enabled=True, participates=False).save({"epoch": 1}, 1)
    data = next((tmp_path / "checkpoint").glob("ckpt-1.data-*"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    fresh = objects(2)
    before = [w.numpy() for w in fresh["model"].weights]
    with pytest.warns(UserWarning, match="ignoring unreadable checkpoint"):
        assert tf_training.Checkpoint(tmp_path, "hash-a", fresh, enabled=True, participates=False).load() is None
    for a, b in zip(before, fresh["model"].weights):
        np.testing.assert_array_equal(a, b.numpy())


def test_a_participating_rank_writes_nothing_that_stays(tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tf_training.tempfile, "tempdir", str(scratch))
    participant = tf_training.Checkpoint(tmp_path / "cell", "hash-a", objects(1), enabled=False, participates=True)
    participant.save({"epoch": 1}, 1)
    participant.save({"epoch": 2}, 2)
    assert not (tmp_path / "cell").exists() and list(scratch.iterdir()) == []


def test_fp16_on_cpu_is_refused_and_bf16_is_the_cpu_policy():
    training = {"precision": "amp", "amp_dtype": "float16"}
    with pytest.raises(ValueError, match="float16 autocast needs a GPU"):
        tf_training.amp_policy(training, "cpu")
    assert tf_training.amp_policy({**training, "amp_dtype": "bfloat16"}, "cpu") == "mixed_bfloat16"
    assert tf_training.amp_policy(training, "gpu") == "mixed_float16"
    assert tf_training.amp_policy({"precision": "fp32"}, "cpu") is None
