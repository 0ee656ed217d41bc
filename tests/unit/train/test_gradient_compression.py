"""training.compression: which backends reduce gradients in fp16, and the refusal of the others.
What each backend applies: test_gradient_compression_torch.py, test_gradient_compression_tensorflow.py
(tests/integration/test_gradient_reduction.py reduces on real ranks)."""

from __future__ import annotations

import pytest
from conftest import REPO, sb_config, training_settings
from conftest import backend_run_settings as run_settings
from scalebench import backends
from scalebench.train.entry import check_settings

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
