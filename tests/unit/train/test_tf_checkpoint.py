"""tf.train checkpoints: round trip, atomic replacement, and refusal of foreign or broken ones."""

from __future__ import annotations

import numpy as np
import pytest
from scalebench.train import resume
from scalebench.train.tf import checkpoint as tf_checkpoint
from scalebench.train.tf import model as tf_model
from scalebench.train.tf import runtime
from scalebench.train.tf.checkpoint import Checkpoint

ENVIRONMENT = "tensorflow"

tf = runtime.tf
keras = tf_model.keras


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
        "rng": resume.host_rng_state(),
    }
    writer = Checkpoint(tmp_path, "hash-a", saved, writes=True, participates=False)
    writer.save(meta, 2)
    writer.save({**meta, "epoch": 3, "records": meta["records"] * 2}, 3)  # one writer, reused every epoch
    assert sorted(p.name for p in (tmp_path / "checkpoint").glob("ckpt-*.index")) == ["ckpt-3.index"]
    restored = objects(2)
    loaded = Checkpoint(tmp_path, "hash-a", restored, writes=False, participates=False).load()
    assert loaded["epoch"] == 3 and loaded["records"] == meta["records"] * 2
    for a, b in zip(saved["model"].weights, restored["model"].weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_checkpoint_of_another_config_is_ignored_with_a_warning(tmp_path):
    saved = objects(1)
    Checkpoint(tmp_path, "hash-a", saved, writes=True, participates=False).save({"epoch": 1}, 1)
    with pytest.warns(UserWarning, match="written for config hash-a, this run is hash-b"):
        assert Checkpoint(tmp_path, "hash-b", objects(2), writes=True, participates=False).load() is None


def test_truncated_checkpoint_is_ignored_with_a_warning(tmp_path):
    saved = objects(1)
    Checkpoint(tmp_path, "hash-a", saved, writes=True, participates=False).save({"epoch": 1}, 1)
    data = next((tmp_path / "checkpoint").glob("ckpt-1.data-*"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    fresh = objects(2)
    before = [w.numpy() for w in fresh["model"].weights]
    with pytest.warns(UserWarning, match="ignoring unreadable checkpoint"):
        assert Checkpoint(tmp_path, "hash-a", fresh, writes=True, participates=False).load() is None
    for a, b in zip(before, fresh["model"].weights):
        np.testing.assert_array_equal(a, b.numpy())


def test_a_participating_rank_writes_nothing_that_stays(tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tf_checkpoint.tempfile, "tempdir", str(scratch))
    participant = Checkpoint(tmp_path / "cell", "hash-a", objects(1), writes=False, participates=True)
    participant.save({"epoch": 1}, 1)
    participant.save({"epoch": 2}, 2)
    assert not (tmp_path / "cell").exists() and list(scratch.iterdir()) == []


def test_fp16_on_cpu_is_refused_and_bf16_is_the_cpu_policy():
    with pytest.raises(ValueError, match="fp16 needs a GPU"):
        runtime.keras_policy("float16", "cpu")
    assert runtime.keras_policy("bfloat16", "cpu") == "mixed_bfloat16"
    assert runtime.keras_policy("float16", "cuda") == "mixed_float16"
    assert runtime.keras_policy(None, "cpu") is None
