"""training.compression on real ranks: DDP, FSDP and Horovod reduce gradients in fp16 exactly
when asked.

Two ranks reduce gradients chosen so that float16 rounding changes the mean: rank 0's
1 + 2**-12 is 1.0 in float16 (10 mantissa bits), rank 1's 3.0 is exact. The fp32 mean is
2 + 2**-13; through float16 it is exactly 2.0.
"""

from __future__ import annotations

import itertools
import sys

import pytest
import torch
import torch.multiprocessing as mp
from conftest import backend_run_settings as run_settings
from scalebench.cluster import ports
from scalebench.train import rank_env
from scalebench.train.torch import fsdp, native
from torch import nn

ENVIRONMENT = "torch"

pytestmark = pytest.mark.integration

GRADIENTS = (1 + 2**-12, 3.0)
FP32_MEAN = sum(GRADIENTS) / 2
FP16_MEAN = (torch.tensor(GRADIENTS).half() / 2).sum().item()  # fp16_compress_hook divides before the sum


def test_the_fp16_gradients_round_differently_from_fp32():
    assert FP16_MEAN == 2.0 and FP32_MEAN == 2 + 2**-13


def reduce_on_two_ranks(rank: int, port: int, results) -> None:
    """One of two Gloo ranks: each of DDP and FSDP, without and with fp16, reduces GRADIENTS."""
    env = {"RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    place = rank_env.detect(env)
    joined = native.create(run_settings("torch", "native", "none"), place, "cpu", False)
    for kind, compression in itertools.product(("native", "fsdp"), ("none", "fp16")):
        # one process group serves every backend of this rank (the first one joined it)
        made = native.DDPBackend if kind == "native" else fsdp.FSDPBackend
        backend = made(place, "cpu", False, compression, joined.collective, joined.device)
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
        backend = torch_horovod.create(
            run, rank_env.detect({}), "cpu", False
        )  # hvd.init() once; a second call keeps it
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
