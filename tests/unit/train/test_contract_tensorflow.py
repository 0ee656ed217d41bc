"""TensorFlow's modules fill in the contract (test_contract.py's checks, imported here, in
TensorFlow's environment): its spec, its products, one Backend module per registry entry, no fact
restated."""

from __future__ import annotations

import pytest
from scalebench import backends
from test_contract import (
    PRODUCTS,
    assert_a_backend_module,
    assert_a_spec_of_every_builder,
    assert_builders_take_their_protocols_parameters,
    assert_no_backend_class_restates_a_fact,
    assert_the_product,
)

ENVIRONMENT = "tensorflow"
BACKENDS = list(backends.REGISTRY["tensorflow"])


def test_tensorflow_is_a_spec_of_every_builder():
    assert_a_spec_of_every_builder("tensorflow")


def test_each_tensorflow_builder_takes_its_protocols_parameters():
    assert_builders_take_their_protocols_parameters("tensorflow")


@pytest.mark.parametrize(("role", "name", "protocol"), PRODUCTS, ids=[name for _, name, _ in PRODUCTS])
def test_each_product_has_its_name_and_role_in_tensorflow_and_its_protocols_members(role, name, protocol):
    assert_the_product("tensorflow", role, name, protocol)


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_tensorflow_backend_module_creates_a_backend_that_overrides_what_it_must(backend):
    assert_a_backend_module("tensorflow", backend)


def test_no_tensorflow_backend_class_restates_a_fact_of_its_registry_entry():
    assert_no_backend_class_restates_a_fact("tensorflow", {"MirroredBackend"})
