"""The package's imports go one way (docs/architecture.md): the shared modules and cluster/ import
no side; launch/ (the launcher) and train/ (the ranks) do not import each other; no two modules
import each other."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "workflow" / "scripts" / "scalebench"
SIDES = ("launch", "train", "data", "analysis", "report")
# config/ validates the study for the rules: it reads the SLURM resources and the split, as the rules do
RULES_LAYER = "scalebench.config"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Each module of the package and the scalebench modules it imports (at any depth of its code)."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("scalebench"):
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names if alias.name.startswith("scalebench"))
        found[module_name(path)] = names
    return {module: {n for n in names if n in found} for module, names in found.items()}


def side(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in SIDES else None


def test_shared_modules_import_no_side():
    wrong = {
        (module, name)
        for module, names in imports().items()
        if side(module) is None and not module.startswith(RULES_LAYER)
        for name in names
        if side(name) is not None
    }
    assert not wrong, sorted(wrong)


def test_the_launcher_and_the_ranks_do_not_import_each_other():
    wrong = {
        (module, name)
        for module, names in imports().items()
        for name in names
        if {side(module), side(name)} == {"launch", "train"}
    }
    assert not wrong, sorted(wrong)


def test_no_two_modules_import_each_other():
    graph = imports()
    pairs = {tuple(sorted((a, b))) for a, names in graph.items() for b in names if a in graph.get(b, set()) and a != b}
    assert not pairs, sorted(pairs)
