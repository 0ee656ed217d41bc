"""training.compression: which backends reduce gradients in fp16, and what each applies.
(tests/integration/test_gradient_reduction.py reduces on real ranks.)"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import REPO, sb_config, training_settings
from conftest import backend_run_settings as run_settings
from scalebench import backends
from scalebench.train import rank_env
from scalebench.train.entry import check_settings
from scalebench.train.preflight import check_compression
from scalebench.train.torch import fsdp, native

# the backends that reduce gradients in fp16; every other one refuses training.compression: fp16
COMPRESSING = {("torch", "native"), ("torch", "horovod"), ("torch", "fsdp"), ("tensorflow", "horovod")}
PAIRS = [(framework, backend) for framework, specs in backends.REGISTRY.items() for backend in specs]


def test_the_schema_offers_the_registrys_compressions_with_none_by_default():
    training = sb_config.load_schema(REPO / "config" / "schema.yaml")["properties"]["training"]["properties"]
    assert (
        training["compression"]["enum"] == list(backends.COMPRESSIONS) and training["compression"]["default"] == "none"
    )
    assert "fp16_compression" not in training["horovod"]["properties"]  # replaced by training.compression
    assert training_settings().compression == "none" and training_settings(compression="fp16").compression == "fp16"


@pytest.mark.parametrize(("framework", "backend"), PAIRS)
def test_compression_problem_names_the_backends_that_cannot_reduce_in_fp16(framework, backend):
    assert backends.compression_problem(framework, backend, "none") is None
    problem = backends.compression_problem(framework, backend, "fp16")
    if (framework, backend) in COMPRESSING:
        assert problem is None and not backends.spec(framework, backend).compression_reason
    else:
        name = backends.FRAMEWORK_NAMES[framework]
        assert problem.startswith(f"compression fp16 is not available for {name} backend {backend}: ")
    if framework == "tensorflow" and problem:
        assert "CommunicationOptions" in problem and "no compression option" in problem
    if backend == "dp":
        assert "no allreduce" in problem


def test_an_unknown_compression_is_a_problem_everywhere():
    assert "one of none, fp16" in backends.compression_problem("torch", "native", "int8")


@pytest.mark.parametrize(("framework", "backend"), sorted(set(PAIRS) - COMPRESSING))
def test_a_rank_asked_for_a_compression_its_backend_lacks_stops_before_it_starts(framework, backend):
    run = run_settings(framework, backend, "fp16")
    with pytest.raises(ValueError, match=rf"^training\.compression: compression fp16 is not available .* {backend}:"):
        check_settings(run)


def test_a_backend_that_does_not_apply_the_asked_compression_fails_the_cell():
    backend = native.DDPBackend(rank_env.detect({}))  # built without the cell's compression
    check_compression(backend, "none")
    with pytest.raises(RuntimeError, match=r"training.compression: the cell asks for fp16, but backend native .* none"):
        check_compression(backend, "fp16")


@pytest.mark.parametrize("compression", ["none", "fp16"])
def test_the_backends_take_the_cells_compression(compression, monkeypatch):
    place = rank_env.detect({})
    monkeypatch.setattr(native, "join", lambda *args: ("gloo", None))  # the process group: not here
    assert native.create(run_settings("torch", "native", compression), place, "cpu", False).gradient_compression == (
        compression
    )
    assert fsdp.create(run_settings("torch", "fsdp", compression), place, "cpu", False).gradient_compression == (
        compression
    )
    assert fsdp.reduce_policy(compression).reduce_dtype == (torch.float16 if compression == "fp16" else None)


def test_tensorflow_horovod_compresses_with_hvd_fp16(monkeypatch):
    hvd = pytest.importorskip("horovod.tensorflow", reason="Horovod is built with TensorFlow by ./install.sh")
    from scalebench.train import horovod_common
    from scalebench.train.tf import horovod as tf_horovod

    monkeypatch.setattr(horovod_common, "join", lambda hvd, run, place, device_type: place)  # hvd.init(): not here
    for compression, expected in (("none", hvd.Compression.none), ("fp16", hvd.Compression.fp16)):
        run = run_settings("tensorflow", "horovod", compression)
        backend = tf_horovod.create(run, rank_env.detect({}), "cpu", False)
        assert backend.compression is expected and backend.gradient_compression == compression


def test_run_json_records_the_compression_the_backend_applied():
    from scalebench.train import provenance

    run = run_settings("torch", "native", "fp16")
    backend = native.DDPBackend(rank_env.detect({}), compression=run.training.compression)
    record = provenance.training_record(
        dataclasses.replace(run.training, compression="none"),  # the record follows the backend
        framework="torch",
        device_type="cpu",
        replicas=2,
        threads=1,
        deterministic=True,
        passes=1,
        compression=backend.gradient_compression,
        backend_options=backend.options(),
    )
    assert record["compression"] == "fp16"
