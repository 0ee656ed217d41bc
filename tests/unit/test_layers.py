"""The package's imports go one way, in the order the data flows (docs/architecture.md): one
ordered table of which package may import which, checked on the transitive import graph (any
path, any form of import), and no cycle of modules of any length. An import by name
(`importlib.import_module`, `__import__`) is invisible to that graph, so only the rank's entry
point may make one: it loads the framework and backend a cell names.

The checker is a function of the modules' sources, so the tests plant a wrong import into the
real sources in memory and assert that it is found, naming both packages."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import REPO

PACKAGE = REPO / "workflow" / "scripts" / "scalebench"
ROOT = "scalebench"
BASE = "base"  # the top-level modules (settings, records, cell, backends, measures, ...)
BASE_PACKAGES = ("records",)  # subpackages that are base too: the records both sides write and read

# Each package and what it may reach, directly or through others: the order the data flows, so
# each lists only packages above it, and a package may reach what those it lists reach.
LAYERS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (BASE, (), "what both sides read and write: a cell, its settings, the backends, records, files"),
    ("cluster", (BASE,), "the allocation and the machine, read by the planner, launch.py and the ranks"),
    ("data", (BASE,), "the dataset; its split's sizes are what the planner checks"),
    (
        "timing",
        (BASE,),
        "a cell's time from its records and the scaling model: the planner's bill and the analysis read both",
    ),
    ("config", (BASE, "cluster", "data", "timing"), "the planner: everything before a job (the rules import it)"),
    ("launch", (BASE, "cluster"), "the job's launcher: starting the ranks, accounting"),
    ("train", (BASE, "cluster", "data"), "one rank: the training loop, frameworks, backends"),
    ("analysis", (BASE, "cluster", "data", "timing", "config"), "records to tables; the planner's left-out cells"),
    ("report", (BASE, "cluster", "data", "timing", "config", "analysis"), "figures and tables of the report"),
)
ALLOWED = {name: {name, *below} for name, below, _ in LAYERS}
# The one module that imports by name (the framework and backend the cell names), and the names
# of the functions that do it.
IMPORTS_BY_NAME_ALLOWED = ("scalebench.train.entry",)
IMPORT_BY_NAME = ("import_module", "__import__")


def module_names(package: Path = PACKAGE) -> dict[str, Path]:
    """Each module of the package by its dotted name (a package by its __init__.py)."""
    found = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def real_sources() -> dict[str, str]:
    return {name: path.read_text() for name, path in module_names().items()}


def packages_of(modules: set[str]) -> set[str]:
    return {name for name in modules if any(other.startswith(name + ".") for other in modules)}


def known_prefix(name: str, modules: set[str]) -> str | None:
    """The longest module of the package that `name` is or lies in (a function's name, say)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def targets(module: str, node: ast.AST, modules: set[str], packages: set[str]) -> set[str]:
    """The modules of the package an import statement loads: `import scalebench.x.y`, `from
    scalebench.x import y` (y a module, else x itself), relative imports, `from scalebench import x`."""
    if isinstance(node, ast.Import):
        return {found for alias in node.names if (found := known_prefix(alias.name, modules))}
    if not isinstance(node, ast.ImportFrom):
        return set()
    if node.level:
        base = module.split(".") if module in packages else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        origin = ".".join(base + ([node.module] if node.module else []))
    else:
        origin = node.module or ""
    loaded = set()
    for alias in node.names:
        submodule = f"{origin}.{alias.name}"
        found = submodule if submodule in modules else known_prefix(origin, modules)
        if found:
            loaded.add(found)
    return loaded


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Each module and the modules of the package it imports (at any depth of its code). Loading
    `p.q` from outside `p` runs `p/__init__.py` too, so that counts as imported as well."""
    modules = set(sources)
    packages = packages_of(modules)
    graph: dict[str, set[str]] = {}
    for module, source in sources.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(source)):
            for target in targets(module, node, modules, packages):
                parts = target.split(".")
                parents = {".".join(parts[:end]) for end in range(1, len(parts))}
                edges |= {target} | {p for p in parents if p in modules and not module.startswith(p + ".")}
        graph[module] = edges - {module}
    return graph


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in BASE_PACKAGES:
        return BASE
    if len(parts) > 2 or (len(parts) == 2 and parts[1] in ALLOWED):
        return parts[1]
    return BASE


def shortest_path(graph: dict[str, set[str]], start: str, goal: str) -> list[str]:
    previous, frontier = {start: start}, [start]
    while frontier:
        following = []
        for node in frontier:
            for name in sorted(graph.get(node, ())):
                if name not in previous:
                    previous[name] = node
                    following.append(name)
        frontier = following
        if goal in previous:
            break
    path = [goal]
    while path[-1] != start:
        path.append(previous[path[-1]])
    return path[::-1]


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a package its own may not import, then each package reached through modules
    that may each import the next (one path per pair of packages): both packages named."""
    problems = [
        f"{layer(module)} may not import {layer(name)}: {module} imports {name}"
        for module in sorted(graph)
        for name in sorted(graph[module])
        if layer(name) not in ALLOWED.get(layer(module), {layer(module)})
    ]
    reached: dict[tuple[str, str], str] = {}
    for module in sorted(graph):
        own, seen, frontier = layer(module), set(), [module]
        while frontier:
            for name in graph.get(frontier.pop(), ()):
                if name not in seen:
                    seen.add(name)
                    frontier.append(name)
        for name in sorted(seen - graph[module]):
            pair = (own, layer(name))
            if pair[1] not in ALLOWED.get(own, {own}) and pair not in reached:
                reached[pair] = " -> ".join(shortest_path(graph, module, name))
    problems += [f"{own} may not import {other} (through others): {path}" for (own, other), path in reached.items()]
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each group of modules that import each other (Tarjan's components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for name in sorted(graph.get(node, ())):
            if name not in index:
                visit(name)
                low[node] = min(low[node], low[name])
            elif name in on_stack:
                low[node] = min(low[node], index[name])
        if low[node] == index[node]:
            component = []
            while True:
                name = stack.pop()
                on_stack.discard(name)
                component.append(name)
                if name == node:
                    break
            if len(component) > 1:
                inside = {name: graph[name] & set(component) for name in component}
                start = min(component)
                back = [name for name in sorted(component) if start in inside[name]][0]
                found.append(shortest_path(inside, start, back) + [start])

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def named_import_function(node: ast.AST) -> str | None:
    """The import-by-name function a node names: called or not (`importlib.import_module(x)`,
    `il.import_module`, `__import__(x)`, `builtins.__import__`), imported (`from importlib import
    import_module`), or spelled as a string (`getattr(importlib, "import_module")`)."""
    if isinstance(node, ast.Name):
        name = node.id
    elif isinstance(node, ast.Attribute):
        name = node.attr
    elif isinstance(node, ast.alias):
        name = node.name
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        name = node.value
    else:
        return None
    return name if name in IMPORT_BY_NAME else None


def imports_by_name(sources: dict[str, str]) -> list[str]:
    """Each use of an import-by-name function outside IMPORTS_BY_NAME_ALLOWED, with its line."""
    return [
        f"{module} imports by name ({found}, line {node.lineno}): only {', '.join(IMPORTS_BY_NAME_ALLOWED)} may"
        for module, source in sorted(sources.items())
        if module not in IMPORTS_BY_NAME_ALLOWED
        for node in ast.walk(ast.parse(source))
        if (found := named_import_function(node))
    ]


def import_problems(sources: dict[str, str]) -> list[str]:
    """Every layer violation, every cycle and every import by name outside the entry point in the
    package whose modules have these sources."""
    graph = import_graph(sources)
    unknown = sorted({layer(module) for module in graph} - set(ALLOWED))
    problems = [f"package {name} is not in the layer table (tests/unit/test_layers.py)" for name in unknown]
    problems += layer_violations(graph)
    problems += [f"import cycle: {' -> '.join(cycle)}" for cycle in cycles(graph)]
    problems += imports_by_name(sources)
    return problems


def layer_table() -> str:
    """The table docs/architecture.md shows, from LAYERS."""
    rows = ["| package | may import | what |", "| --- | --- | --- |"]
    for name, below, what in LAYERS:
        shown = "base" if name == BASE else f"{name}/"
        rows.append(f"| {shown} | {', '.join(below) or 'nothing'} | {what} |")
    return "\n".join(rows)


def test_the_package_imports_follow_the_layer_table_and_have_no_cycle():
    assert import_problems(real_sources()) == []


def test_the_module_allowed_to_import_by_name_exists_and_does():
    """The allowance names a real module that uses it: a renamed entry point does not leave a stale
    allowance (and its import by name is the only one)."""
    sources = real_sources()
    for module in IMPORTS_BY_NAME_ALLOWED:
        assert imports_by_name({f"{module}.copy": sources[module]}), module


def test_the_table_is_ordered_and_closed():
    """Each package lists only packages above it (so no two can import each other), and what it
    lists may reach only what it lists too (the check is transitive)."""
    order = [name for name, _, _ in LAYERS]
    for position, (name, below, _) in enumerate(LAYERS):
        assert set(below) <= set(order[:position]), name
        for other in below:
            assert ALLOWED[other] <= ALLOWED[name], (name, other)


def test_the_architecture_page_shows_the_table():
    assert layer_table() in (REPO / "docs" / "architecture.md").read_text()


# (module, the line planted at its top, the packages the message names): each alone must fail
PLANTED = [
    ("scalebench.train.loop", "import scalebench.config", "train may not import config"),
    ("scalebench.train.loop", "from scalebench.analysis import collect", "train may not import analysis"),
    ("scalebench.train.loop", "from scalebench.report.figures import FIGURES", "train may not import report"),
    ("scalebench.analysis.collect", "from scalebench.train import provenance", "analysis may not import train"),
    ("scalebench.data.preprocess", "from scalebench.train.energy import GpuMeter", "data may not import train"),
    (
        "scalebench.launch.launcher",
        "from scalebench.analysis.collect import read_cell",
        "launch may not import analysis",
    ),
    ("scalebench.config.checks", "from ..launch import launcher", "config may not import launch"),
    ("scalebench.train.entry", "from scalebench import launch", "train may not import launch"),
    ("scalebench.settings", "from .train import loop", "base may not import train"),
    ("scalebench.cluster.slurm", "from scalebench.config import resources", "cluster may not import config"),
    ("scalebench.launch.binding", "from scalebench.train import devices", "launch may not import train"),
    # through a module that may import it: analysis/ reaching launch/ through config/
    ("scalebench.config.matrix", "from scalebench.launch import binding", "analysis may not import launch"),
    # imports by name, which the graph cannot follow: every spelling, anywhere but train/entry.py
    ("scalebench.train.loop", "import importlib; importlib.import_module('x')", "train.loop imports by name"),
    ("scalebench.report.figures", "from importlib import import_module", "figures imports by name (import_module"),
    ("scalebench.analysis.collect", "f = lambda: __import__('x')", "collect imports by name (__import__"),
    ("scalebench.settings", "import builtins as b\nload = b.__import__", "settings imports by name"),
    ("scalebench.train.tf.steps", "import importlib as il\nload = il.import_module", "steps imports by name"),
    ("scalebench.config.checks", "load = getattr(importlib, 'import_module')", "checks imports by name"),
    # a cycle of three modules of one package, each import allowed alone
    (
        "scalebench.train.flops",
        "from scalebench.train import summaries",
        "import cycle: scalebench.train.flops -> scalebench.train.summaries -> scalebench.train.metrics -> "
        "scalebench.train.flops",
    ),
]


@pytest.mark.parametrize(("module", "line", "message"), PLANTED, ids=[f"{m}:{line}" for m, line, _ in PLANTED])
def test_a_planted_import_fails_naming_both_packages(module, line, message):
    sources = real_sources()
    sources[module] = f"{line}\n{sources[module]}"
    problems = import_problems(sources)
    assert any(message in problem for problem in problems), problems


def test_every_form_of_import_is_seen():
    sources = {
        "scalebench": "",
        "scalebench.a": "",
        "scalebench.a.x": "from . import y\nfrom .y import f\n",
        "scalebench.a.y": "def f(): from ..b import z\n",
        "scalebench.b": "from scalebench import a\n",
        "scalebench.b.z": "import scalebench.a.x as alias\n",
    }
    graph = import_graph(sources)
    assert graph["scalebench.a.x"] == {"scalebench.a.y"}
    assert graph["scalebench.a.y"] == {"scalebench.b.z", "scalebench.b"}  # loading b.z runs b/__init__
    assert graph["scalebench.b"] == {"scalebench.a"}
    assert graph["scalebench.b.z"] == {"scalebench.a.x", "scalebench.a"}
    assert cycles(graph) == [["scalebench.a.x", "scalebench.a.y", "scalebench.b.z", "scalebench.a.x"]]


def test_the_architecture_page_maps_each_module_once():
    """The map's tables name a module in their first column; a module named twice says two things
    of it, one of which the next change will leave stale."""
    rows = [line for line in (REPO / "docs" / "architecture.md").read_text().splitlines() if line.startswith("| `")]
    named = [row.split("|")[1].strip() for row in rows]
    assert sorted({name for name in named if named.count(name) > 1}) == []
