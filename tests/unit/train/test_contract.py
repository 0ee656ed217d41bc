"""Both frameworks fill in the same contract: the same files, the Framework methods, one Backend per module."""

from __future__ import annotations

import importlib
import inspect

import pytest
from conftest import SCRIPTS
from scalebench.config import BACKENDS
from scalebench.train.entry import FRAMEWORK_PACKAGES
from scalebench.train.interfaces import Backend, Framework

TRAIN = SCRIPTS / "scalebench" / "train"


def test_the_framework_folders_mirror_each_other_file_for_file():
    names = {folder: sorted(p.name for p in (TRAIN / folder).glob("*.py")) for folder in ("torch", "tf")}
    assert names["torch"] == names["tf"]
    assert {f"{backend}.py" for backend in BACKENDS} <= set(names["torch"])


@pytest.mark.parametrize("framework", sorted(FRAMEWORK_PACKAGES))
def test_each_framework_implements_every_method_of_the_interface(framework):
    module = importlib.import_module(f"{FRAMEWORK_PACKAGES[framework]}.framework")
    classes = [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == module.__name__]
    implementation = next(c for c in classes if getattr(c, "name", None) == framework)
    wanted = {name for name, value in vars(Framework).items() if callable(value) and not name.startswith("_")}
    missing = sorted(name for name in wanted if not callable(getattr(implementation, name, None)))
    assert not missing, f"{implementation.__name__} lacks {missing}"


@pytest.mark.parametrize("framework", sorted(FRAMEWORK_PACKAGES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_each_backend_module_creates_a_backend_that_overrides_what_it_must(framework, backend):
    module = importlib.import_module(f"{FRAMEWORK_PACKAGES[framework]}.{backend}")
    classes = [
        c
        for _, c in inspect.getmembers(module, inspect.isclass)
        if issubclass(c, Backend) and c.__module__ == module.__name__
    ]
    assert len(classes) == 1, f"{module.__name__} defines {classes}"
    backend_class = classes[0]
    for name in ("setup", "distribute", "broadcast_from_root", "allreduce_sum", "allreduce_max", "allgather_text"):
        assert getattr(backend_class, name) is not getattr(Backend, name), f"{backend_class.__name__}.{name}"
    assert backend_class.name == backend
