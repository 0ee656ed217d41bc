"""Both frameworks fill in the same contract: the same shared roles, a spec whose builders return
the products the loop holds (train/interfaces.py: the same class names in the same files, with the
methods of their protocols), and one Backend module per entry of the backend registry
(scalebench/backends.py), named there by its dotted path and imported as named; every fact of an
entry is read from it, restated by no class. What each framework's modules are, imported:
test_contract_torch.py, test_contract_tensorflow.py (each in its framework's environment), through
the checks here."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import textwrap
import typing
from collections.abc import Callable

import pytest
from conftest import SCRIPTS
from scalebench import backends
from scalebench.train import interfaces
from scalebench.train.entry import FRAMEWORK_PACKAGES
from scalebench.train.interfaces import Backend, FrameworkSpec

TRAIN = SCRIPTS / "scalebench" / "train"
FOLDERS = {"torch": "torch", "tensorflow": "tf"}
# what every framework has, file for file
SHARED_ROLES = {
    "__init__.py",
    "spec.py",
    "steps.py",
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
# the facts of a registry entry (its name aside, which with `framework` says which entry a class is),
# and the names classes restated them under before they read them from the entry
FACTS = {f.name for f in dataclasses.fields(backends.BackendSpec)} - {"name"}
FORMER_RESTATEMENTS = {"shards_parameters"}


def files_of(framework: str) -> set[str]:
    return {p.name for p in (TRAIN / FOLDERS[framework]).glob("*.py")}


def named_files(framework: str) -> set[str]:
    """The files of the framework's folder that its registry entries name as their modules."""
    package = FRAMEWORK_PACKAGES[framework] + "."
    return {
        backends.module(framework, name).removeprefix(package) + ".py"
        for name in backends.REGISTRY[framework]
        if backends.module(framework, name).startswith(package)
    }


@pytest.mark.parametrize("framework", sorted(FRAMEWORK_PACKAGES))
def test_each_framework_has_every_shared_role_and_only_the_backend_modules_its_entries_name(framework):
    files = files_of(framework)
    assert SHARED_ROLES <= files, f"{framework} lacks {sorted(SHARED_ROLES - files)}"
    modules = files - SHARED_ROLES - HELPERS[framework]
    assert modules == named_files(framework), (
        f"{FOLDERS[framework]}/ holds backend modules {sorted(modules)}; the registry's entries name "
        f"{sorted(named_files(framework))} (BackendSpec.modules)"
    )
    for name in backends.REGISTRY[framework]:  # in the framework's package, and none of its roles
        path = backends.module(framework, name)
        assert path.startswith(FRAMEWORK_PACKAGES[framework] + "."), f"{framework}/{name}: {path}"
        assert path.rsplit(".", 1)[1] + ".py" not in SHARED_ROLES | HELPERS[framework], f"{framework}/{name}: {path}"


def test_every_entry_names_a_module_for_each_framework_that_has_it_and_no_other():
    for backend in backends.BACKENDS:
        having = set(backends.frameworks_of(backend))
        for framework in having:
            assert set(backends.spec(framework, backend).modules) <= having, f"{framework}/{backend}"
            assert framework in backends.spec(framework, backend).modules, f"{framework}/{backend} names no module"


def test_the_entry_point_knows_the_registrys_frameworks():
    assert set(FRAMEWORK_PACKAGES) == set(backends.FRAMEWORKS) == set(FOLDERS)


# each product of a spec's builders: the module of its role, the class there, and its protocol
PRODUCTS = [
    ("runtime", "Device", interfaces.Device),
    ("runtime", "Numerics", interfaces.Numerics),
    ("model", "Model", interfaces.Model),
    ("model", "Distributed", interfaces.Distributed),
    ("data", "ReplicaShards", interfaces.SampleOrder),
    ("data", "Batches", interfaces.Batches),
    ("steps", "Steps", interfaces.Steps),
    ("checkpoint", "Checkpointer", interfaces.Checkpointer),
    ("profiler", "Trace", interfaces.Trace),
]


def protocol_members(protocol: type) -> set[str]:
    """The methods and attributes a protocol of train/interfaces.py declares."""
    declared = {name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")}
    return declared | set(getattr(protocol, "__annotations__", {}))


def assert_a_spec_of_every_builder(framework: str) -> None:
    """The framework's spec (train/<framework>/spec.py) fills in every builder of FrameworkSpec."""
    spec = importlib.import_module(f"{FRAMEWORK_PACKAGES[framework]}.spec").SPEC
    assert isinstance(spec, FrameworkSpec) and spec.name == framework
    for known in dataclasses.fields(FrameworkSpec):
        value = getattr(spec, known.name)
        assert known.name == "name" or callable(value), f"{framework}: {known.name} is not a builder"


def builder_protocols() -> dict[str, type]:
    """Each builder of FrameworkSpec and the protocol its field is typed with (train/interfaces.py)."""
    return {name: hint for name, hint in typing.get_type_hints(FrameworkSpec).items() if name != "name"}


def parameters(builder: Callable) -> list[tuple[str, str]]:
    """(name, kind) of each parameter a builder takes (a class: its constructor's)."""
    return [(p.name, p.kind.name) for p in inspect.signature(builder).parameters.values()]


def builder_problems(spec: FrameworkSpec) -> list[str]:
    """Each builder of `spec` whose parameters are not its protocol's __call__'s, name for name and
    kind for kind: the loop passes them positionally, so a renamed, missing or extra one is a fault."""
    problems = []
    for field, protocol in builder_protocols().items():
        wanted = parameters(protocol.__call__)[1:]  # less self
        found = parameters(getattr(spec, field))
        if found != wanted:
            problems.append(f"{spec.name}: {field} takes {found}; {protocol.__name__} wants {wanted}")
    return problems


def assert_builders_take_their_protocols_parameters(framework: str) -> None:
    spec = importlib.import_module(f"{FRAMEWORK_PACKAGES[framework]}.spec").SPEC
    assert builder_problems(spec) == []


def assert_the_product(framework: str, role: str, name: str, protocol: type) -> None:
    """The framework's product `name` is a class in its module of `role`, with its protocol's members:
    the same name and role in both frameworks."""
    module = importlib.import_module(f"{FRAMEWORK_PACKAGES[framework]}.{role}")
    product = getattr(module, name, None)
    assert inspect.isclass(product), f"{FOLDERS[framework]}/{role}.py defines no class {name}"
    missing = sorted(protocol_members(protocol) - set(dir(product)) - instance_attributes(product))
    assert not missing, f"{FOLDERS[framework]}/{role}.py {name} lacks {missing} ({protocol.__name__})"


def instance_attributes(kind: type) -> set[str]:
    """What `kind`'s constructor assigns to self (a dataclass: its fields)."""
    if dataclasses.is_dataclass(kind):
        return {known.name for known in dataclasses.fields(kind)}
    tree = ast.parse(textwrap.dedent(inspect.getsource(kind.__init__)))
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    }


def assert_a_backend_module(framework: str, backend: str) -> None:
    """The entry's module defines one Backend, which overrides what it must and says which entry it is."""
    module = importlib.import_module(backends.module(framework, backend))
    classes = [
        c
        for _, c in inspect.getmembers(module, inspect.isclass)
        if issubclass(c, Backend) and c.__module__ == module.__name__
    ]
    assert len(classes) == 1, f"{module.__name__} defines {classes}"
    backend_class = classes[0]
    # collective_bench: every backend's collectives are measured through its own library
    overridden = ("distribute", "broadcast_from_root", "allreduce_sum", "allreduce_max", "allgather_text")
    for name in (*overridden, "collective_bench"):
        assert getattr(backend_class, name) is not getattr(Backend, name), f"{backend_class.__name__}.{name}"
    assert (backend_class.framework, backend_class.name) == (framework, backend)  # its registry entry
    assert callable(module.create)
    assert inspect.signature(module.create).return_annotation in (backend_class.__name__, backend_class)


def restated_facts(kind: type) -> list[str]:
    """The registry facts `kind` states itself (a class attribute or property of its own), or its own `spec`."""
    return sorted(set(vars(kind)) & (FACTS | FORMER_RESTATEMENTS | {"spec"}))


def backend_classes(framework: str) -> list[type]:
    """Every Backend subclass of the framework's registered modules (and the classes they build on),
    after importing them."""
    for backend in backends.REGISTRY[framework]:
        importlib.import_module(backends.module(framework, backend))
    found, todo = [], [Backend]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("scalebench.") and sub not in found:
                found.append(sub)
                todo.append(sub)
    return found


def assert_no_backend_class_restates_a_fact(framework: str, names: set[str]) -> None:
    """No Backend class of the framework (among them those `names`) states a fact of its registry entry."""
    classes = backend_classes(framework)
    assert {c.__name__ for c in classes} >= names
    for kind in classes:
        assert not restated_facts(kind), f"{kind.__name__} restates {restated_facts(kind)}: read them from self.spec"

    class Restating(classes[0]):  # the check finds a class that states a fact itself
        shards_state = True
        shards_parameters = True

    assert restated_facts(Restating) == ["shards_parameters", "shards_state"]


def conforming(protocol: type) -> Callable:
    """A builder whose parameters are `protocol`'s, as a spec that follows it would hold."""

    def builder(*args, **kwargs) -> None: ...

    wanted = list(inspect.signature(protocol.__call__).parameters.values())[1:]
    builder.__signature__ = inspect.Signature(wanted)
    return builder


def test_every_builder_is_typed_with_a_protocol_of_its_call():
    protocols = builder_protocols()
    assert {f.name for f in dataclasses.fields(FrameworkSpec)} - {"name"} == set(protocols)
    for field, protocol in protocols.items():
        assert getattr(protocol, "_is_protocol", False) and "__call__" in vars(protocol), f"{field}: {protocol}"


def test_a_builder_whose_parameters_differ_from_its_protocol_is_named():
    """The check the frameworks' specs pass (test_contract_torch.py, test_contract_tensorflow.py)
    fails a builder with a parameter renamed, missing, extra or keyword-only."""
    right = FrameworkSpec("fake", **{field: conforming(protocol) for field, protocol in builder_protocols().items()})
    assert builder_problems(right) == []

    def build_numerics(run, device): ...  # the test faults not taken

    def build_data(run, device, backend, sampler, where, eval_shards): ...  # order renamed

    def restore(model, directory, config_hash, strict=True): ...

    def start_trace(folder, device, *, backend): ...

    wrong = dataclasses.replace(
        right, build_numerics=build_numerics, build_data=build_data, restore=restore, start_trace=start_trace
    )
    named = [problem.split(" takes ")[0] for problem in builder_problems(wrong)]
    assert named == ["fake: build_numerics", "fake: restore", "fake: build_data", "fake: start_trace"]
