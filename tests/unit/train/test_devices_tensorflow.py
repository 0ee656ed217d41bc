"""TensorFlow's input pipeline on a GPU cell's device (its device refusals, in a fresh process:
tests/integration/test_tf_device_refusals.py)."""

from __future__ import annotations

from conftest import cell_settings
from scalebench.settings import ProcessFacts, RunSettings
from scalebench.train import rank_env
from scalebench.train.interfaces import Backend
from scalebench.train.placement import DataPlacement
from scalebench.train.tf import data as tf_data
from scalebench.train.tf import runtime as tf_runtime

ENVIRONMENT = "tensorflow"


def test_tensorflow_prefetches_to_the_gpu_of_a_one_replica_process(monkeypatch):
    assert tf_runtime.input_device("cuda", 1) == "/gpu:0"  # configure() left only this rank's GPU visible
    assert tf_runtime.input_device("cuda", 2) is None  # MirroredStrategy copies host batches to each replica
    assert tf_runtime.input_device("cpu", 1) is None
    monkeypatch.setattr(tf_runtime, "configure", lambda *args: [0])  # a faked GPU: its index
    settings = cell_settings("tensorflow", "native", 1)
    run = RunSettings.from_json(settings, "d", "o")
    device = tf_runtime.build_device(run, ProcessFacts.of_rank(run, {}), rank_env.detect({}))
    backend = Backend(rank_env.detect({}))  # only its place and counts are used here
    asked = []
    monkeypatch.setattr(tf_data, "train_dataset", lambda *args: asked.append(args[-1]))
    monkeypatch.setattr(tf_data, "eval_dataset", lambda *args: asked.append(args[-1]) or [])
    order = tf_data.build_order(run, backend, [0, 1], 1)
    batches = tf_data.build_data(run, device, backend, order, DataPlacement("host", 0, "host"), [])
    batches.epoch(0)
    batches.eval_batches([0])
    assert device.type == "cuda" and asked == ["/gpu:0", "/gpu:0"]
