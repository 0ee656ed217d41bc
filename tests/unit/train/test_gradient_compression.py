"""training.compression: which backends reduce gradients in fp16, and that those that do really do.

Two ranks reduce gradients chosen so that float16 rounding changes the mean: rank 0's
1 + 2**-12 is 1.0 in float16 (10 mantissa bits), rank 1's 3.0 is exact. The fp32 mean is
2 + 2**-13; through float16 it is exactly 2.0.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys

import pytest
import torch
import torch.multiprocessing as mp
from conftest import REPO, cell_settings, sb_config, training_settings
from scalebench import backends
from scalebench.launch import ports, rank_env
from scalebench.train.entry import create_framework
from scalebench.train.loop import check_compression
from scalebench.train.settings import RunSettings
from scalebench.train.torch import fsdp, native
from torch import nn

GRADIENTS = (1 + 2**-12, 3.0)
FP32_MEAN = sum(GRADIENTS) / 2
FP16_MEAN = (torch.tensor(GRADIENTS).half() / 2).sum().item()  # fp16_compress_hook divides before the sum
# the backends that reduce gradients in fp16; every other one refuses training.compression: fp16
COMPRESSING = {("torch", "native"), ("torch", "horovod"), ("torch", "fsdp"), ("tensorflow", "horovod")}
PAIRS = [(framework, backend) for framework, specs in backends.REGISTRY.items() for backend in specs]


def run_settings(framework: str, backend: str, compression: str, gpus: int = 2) -> RunSettings:
    """A cell's settings with `compression` set after validation (which refuses the pairs that cannot)."""
    settings = cell_settings(framework, "native", gpus)
    settings["cell"]["backend"] = backend
    settings["training"]["compression"] = compression
    return RunSettings.from_json(settings, "data", "out", env={})


def test_the_schema_offers_the_registrys_compressions_with_none_by_default():
    training = sb_config.load_schema(REPO / "config" / "schema.yaml")["properties"]["training"]["properties"]
    assert (
        training["compression"]["enum"] == list(backends.COMPRESSIONS) and training["compression"]["default"] == "none"
    )
    assert "fp16_compression" not in training["horovod"]["properties"]  # replaced by training.compression
    assert training_settings().compression == "none" and training_settings(compression="fp16").compression == "fp16"


def test_the_fp16_gradients_round_differently_from_fp32():
    assert FP16_MEAN == 2.0 and FP32_MEAN == 2 + 2**-13


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
    with pytest.raises(ValueError, match=rf"^training\.compression: compression fp16 is not available .* {backend}:"):
        create_framework(run_settings(framework, backend, "fp16"), rank_env.detect({}))


def test_a_backend_that_does_not_apply_the_asked_compression_fails_the_cell():
    backend = native.DDPBackend(rank_env.detect({}))  # built without the cell's compression
    check_compression(backend, "none")
    with pytest.raises(RuntimeError, match=r"training.compression: the cell asks for fp16, but backend native .* none"):
        check_compression(backend, "fp16")


@pytest.mark.parametrize("compression", ["none", "fp16"])
def test_the_backends_take_the_cells_compression(compression):
    place = rank_env.detect({})
    assert native.create(run_settings("torch", "native", compression), place).gradient_compression == compression
    assert fsdp.create(run_settings("torch", "fsdp", compression), place).gradient_compression == compression
    assert fsdp.reduce_policy(compression).reduce_dtype == (torch.float16 if compression == "fp16" else None)


def reduce_on_two_ranks(rank: int, port: int, results) -> None:
    """One of two Gloo ranks: each of DDP and FSDP, without and with fp16, reduces GRADIENTS."""
    env = {"RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    place = rank_env.detect(env)
    joined = None
    for kind, compression in itertools.product(("native", "fsdp"), ("none", "fp16")):
        run = run_settings("torch", kind, compression)
        backend = native.create(run, place) if kind == "native" else fsdp.create(run, place)
        if joined is None:
            backend.setup(run)  # one process group serves every backend of this rank
            joined = backend
        model = nn.Linear(2, 1, bias=False)
        wrapped, _ = backend.distribute(model, torch.optim.SGD(model.parameters(), lr=0.0))
        wrapped(torch.full((1, 2), GRADIENTS[rank])).sum().backward()
        grad = model.weight.grad
        values = (grad.full_tensor() if kind == "fsdp" else grad).flatten().tolist()
        hooks = len(wrapped._comm_hooks) if kind == "native" else None
        results.put((rank, kind, compression, values, hooks))
    joined.shutdown()


def test_ddp_and_fsdp_reduce_in_fp16_exactly_when_asked():
    context = mp.get_context("spawn")
    results = context.Queue()
    mp.start_processes(reduce_on_two_ranks, args=(ports.free_port(), results), nprocs=2, start_method="spawn")
    reduced = [results.get(timeout=60) for _ in range(8)]
    for rank, kind, compression, values, hooks in reduced:
        expected = FP16_MEAN if compression == "fp16" else FP32_MEAN
        assert values == [expected, expected], (rank, kind, compression)
        if kind == "native":
            assert hooks == (1 if compression == "fp16" else 0)


def horovod_rank() -> dict[str, list[float]]:
    """One Horovod rank (under horovod.run): the project's backend reduces GRADIENTS without and with fp16."""
    from scalebench.train.torch import horovod as torch_horovod

    reduced = {}
    for compression in ("none", "fp16"):
        run = run_settings("torch", "horovod", compression)
        backend = torch_horovod.create(run, rank_env.detect({}))
        backend.setup(run)  # hvd.init() once; a second call keeps it
        model = nn.Linear(2, 1, bias=False)
        model, optimizer = backend.distribute(model, torch.optim.SGD(model.parameters(), lr=0.0))
        model(torch.full((1, 2), GRADIENTS[backend.rank])).sum().backward()
        with backend.gradients_reduced(optimizer):
            reduced[compression] = model.weight.grad.flatten().tolist()
    backend.shutdown()
    return reduced


def test_horovod_reduces_in_fp16_exactly_when_asked(monkeypatch):
    horovod = pytest.importorskip("horovod", reason="Horovod is built by ./install.sh")
    # the ranks are new interpreters that import this module (and scalebench) by name
    monkeypatch.setenv("PYTHONPATH", ":".join(sys.path))
    reduced = horovod.run(horovod_rank, num_proc=2, use_gloo=True)
    assert reduced == [{"none": [FP32_MEAN] * 2, "fp16": [FP16_MEAN] * 2}] * 2


def test_tensorflow_horovod_compresses_with_hvd_fp16():
    hvd = pytest.importorskip("horovod.tensorflow", reason="Horovod is built with TensorFlow by ./install.sh")
    from scalebench.train.tf import horovod as tf_horovod

    for compression, expected in (("none", hvd.Compression.none), ("fp16", hvd.Compression.fp16)):
        backend = tf_horovod.create(run_settings("tensorflow", "horovod", compression), rank_env.detect({}))
        assert backend.compression is expected and backend.gradient_compression == compression


def test_run_json_records_the_compression_the_backend_applied():
    from scalebench.train import provenance

    run = run_settings("torch", "native", "fp16")
    backend = native.create(run, rank_env.detect({}))
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
