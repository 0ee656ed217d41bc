"""PyTorch's modules fill in the contract (test_contract.py's checks, imported here, in torch's
environment): its spec, its products, one Backend module per registry entry, no fact restated; and
the rank imports the module an entry names."""

from __future__ import annotations

import dataclasses
import importlib

import pytest
from scalebench import backends
from scalebench.train import entry
from test_contract import (
    PRODUCTS,
    assert_a_backend_module,
    assert_a_spec_of_every_builder,
    assert_builders_take_their_protocols_parameters,
    assert_no_backend_class_restates_a_fact,
    assert_the_product,
)

ENVIRONMENT = "torch"
BACKENDS = list(backends.REGISTRY["torch"])


def test_pytorch_is_a_spec_of_every_builder():
    assert_a_spec_of_every_builder("torch")


def test_each_pytorch_builder_takes_its_protocols_parameters():
    assert_builders_take_their_protocols_parameters("torch")


@pytest.mark.parametrize(("role", "name", "protocol"), PRODUCTS, ids=[name for _, name, _ in PRODUCTS])
def test_each_product_has_its_name_and_role_in_pytorch_and_its_protocols_members(role, name, protocol):
    assert_the_product("torch", role, name, protocol)


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_pytorch_backend_module_creates_a_backend_that_overrides_what_it_must(backend):
    assert_a_backend_module("torch", backend)


def test_no_pytorch_backend_class_restates_a_fact_of_its_registry_entry():
    assert_no_backend_class_restates_a_fact("torch", {"DDPBackend", "FSDPBackend", "DataParallelBackend"})


def test_the_rank_imports_the_module_the_entry_names_whatever_the_backend_is_called(monkeypatch):
    """A backend named like a role file (model) whose entry names DDP's module gets DDP's module,
    not train/torch/model.py: the rank never builds a module's name from the backend's."""
    native = importlib.import_module("scalebench.train.torch.native")
    assert entry.backend_module("torch", "native") is native
    model = dataclasses.replace(backends.NATIVE_TORCH, name="model", label="model", colour="#000000")
    monkeypatch.setitem(backends.REGISTRY["torch"], "model", model)
    assert entry.backend_module("torch", "model") is native
    moved = dataclasses.replace(backends.NATIVE_TORCH, modules={"torch": "scalebench.train.torch.dp"})
    monkeypatch.setitem(backends.REGISTRY["torch"], "native", moved)
    assert entry.backend_module("torch", "native") is importlib.import_module("scalebench.train.torch.dp")


def test_a_backend_reads_its_facts_from_its_entry(monkeypatch):
    from scalebench.train import rank_env
    from scalebench.train.torch.fsdp import FSDPBackend

    backend = FSDPBackend(rank_env.detect({}))
    assert backend.spec is backends.FSDP and backend.spec.shards_state
    monkeypatch.setitem(backends.REGISTRY["torch"], "fsdp", dataclasses.replace(backends.FSDP, shards_state=False))
    assert not backend.spec.shards_state  # the entry, changed: the class follows with no other edit


def test_whether_horovod_accumulates_is_the_registry_s_fact(monkeypatch):
    pytest.importorskip("horovod.torch", reason="Horovod is built by ./install.sh")
    from conftest import training_settings
    from scalebench.train import rank_env
    from scalebench.train.torch.horovod import HorovodTorchBackend

    settings = training_settings(horovod={"backward_passes_per_step": 3}).horovod
    assert HorovodTorchBackend(rank_env.detect({}), settings).backward_passes_per_step == 3
    # the entry, flipped: the backend follows it with no other change
    plain = dataclasses.replace(backends.HOROVOD, accumulates=False)
    monkeypatch.setitem(backends.REGISTRY["torch"], "horovod", plain)
    assert HorovodTorchBackend(rank_env.detect({}), settings).backward_passes_per_step == 1
