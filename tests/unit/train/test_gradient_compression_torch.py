"""training.compression as PyTorch's backends apply it (which backends may: test_gradient_compression.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import backend_run_settings as run_settings
from scalebench.train import rank_env
from scalebench.train.preflight import check_compression
from scalebench.train.torch import fsdp, native

ENVIRONMENT = "torch"


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
