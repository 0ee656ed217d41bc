"""Both frameworks fill in the same contract: the same shared roles, the Framework methods, and one
Backend module per entry of the backend registry (scalebench/backends.py), nothing else."""

from __future__ import annotations

import dataclasses
import importlib
import inspect

import pytest
from conftest import SCRIPTS
from scalebench import backends
from scalebench.train.entry import FRAMEWORK_PACKAGES
from scalebench.train.interfaces import Backend, Framework

TRAIN = SCRIPTS / "scalebench" / "train"
FOLDERS = {"torch": "torch", "tensorflow": "tf"}
# what every framework has, file for file
SHARED_ROLES = {
    "__init__.py",
    "framework.py",
    "model.py",
    "data.py",
    "runtime.py",
    "checkpoint.py",
    "summaries.py",
    "compiled.py",
    "collectives.py",
    "step_timing.py",
    "profiler.py",
}
# a framework's own helpers beside its backends: TensorFlow's two strategies share strategy.py
HELPERS = {"torch": set(), "tensorflow": {"strategy.py"}}
PAIRS = [(framework, backend) for framework, names in backends.REGISTRY.items() for backend in names]


def files_of(framework: str) -> set[str]:
    return {p.name for p in (TRAIN / FOLDERS[framework]).glob("*.py")}


@pytest.mark.parametrize("framework", sorted(FRAMEWORK_PACKAGES))
def test_each_framework_has_every_shared_role_and_one_module_per_registered_backend(framework):
    files = files_of(framework)
    assert SHARED_ROLES <= files, f"{framework} lacks {sorted(SHARED_ROLES - files)}"
    modules = files - SHARED_ROLES - HELPERS[framework]
    assert modules == {f"{name}.py" for name in backends.REGISTRY[framework]}, (
        f"{FOLDERS[framework]}/ holds backend modules {sorted(modules)}; scalebench/backends.py registers "
        f"{sorted(backends.REGISTRY[framework])}"
    )


def test_the_entry_point_knows_the_registrys_frameworks():
    assert set(FRAMEWORK_PACKAGES) == set(backends.FRAMEWORKS) == set(FOLDERS)


@pytest.mark.parametrize("framework", sorted(FRAMEWORK_PACKAGES))
def test_each_framework_implements_every_method_of_the_interface(framework):
    module = importlib.import_module(f"{FRAMEWORK_PACKAGES[framework]}.framework")
    classes = [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == module.__name__]
    implementation = next(c for c in classes if getattr(c, "name", None) == framework)
    wanted = {name for name, value in vars(Framework).items() if callable(value) and not name.startswith("_")}
    missing = sorted(name for name in wanted if not callable(getattr(implementation, name, None)))
    assert not missing, f"{implementation.__name__} lacks {missing}"


@pytest.mark.parametrize(("framework", "backend"), PAIRS, ids=[f"{f}-{b}" for f, b in PAIRS])
def test_each_backend_module_creates_a_backend_that_overrides_what_it_must(framework, backend):
    module = importlib.import_module(f"{FRAMEWORK_PACKAGES[framework]}.{backend}")
    classes = [
        c
        for _, c in inspect.getmembers(module, inspect.isclass)
        if issubclass(c, Backend) and c.__module__ == module.__name__
    ]
    assert len(classes) == 1, f"{module.__name__} defines {classes}"
    backend_class = classes[0]
    # collective_bench: every backend's collectives are measured through its own library
    overridden = ("setup", "distribute", "broadcast_from_root", "allreduce_sum", "allreduce_max", "allgather_text")
    for name in (*overridden, "collective_bench"):
        assert getattr(backend_class, name) is not getattr(Backend, name), f"{backend_class.__name__}.{name}"
    assert (backend_class.framework, backend_class.name) == (framework, backend)  # its registry entry
    # how many processes it needs is the registry's fact (BackendSpec.one_process), stated nowhere else
    assert backend_class.processes is Backend.processes, f"{backend_class.__name__} overrides processes"
    assert callable(module.create)


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
