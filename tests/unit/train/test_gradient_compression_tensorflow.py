"""training.compression as TensorFlow's Horovod backend applies it (which backends may:
test_gradient_compression.py)."""

from __future__ import annotations

import pytest
from conftest import backend_run_settings as run_settings
from scalebench.train import rank_env

ENVIRONMENT = "tensorflow"


def test_tensorflow_horovod_compresses_with_hvd_fp16(monkeypatch):
    hvd = pytest.importorskip("horovod.tensorflow", reason="Horovod is built with TensorFlow by ./install.sh")
    from scalebench.train import horovod_common
    from scalebench.train.tf import horovod as tf_horovod

    monkeypatch.setattr(horovod_common, "join", lambda hvd, run, place, device_type: place)  # hvd.init(): not here
    for compression, expected in (("none", hvd.Compression.none), ("fp16", hvd.Compression.fp16)):
        run = run_settings("tensorflow", "horovod", compression)
        backend = tf_horovod.create(run, rank_env.detect({}), "cpu", False)
        assert backend.compression is expected and backend.gradient_compression == compression
