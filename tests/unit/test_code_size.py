"""A trainer that delegates (docs/architecture.md, the package's train/ rows): TrainingLoop keeps
the epochs, evaluation, checkpoints and stopping in at most LOOP_LIMIT lines, and no constructor
under train/ is longer than INIT_LIMIT lines; run.json, the collective benchmark, the profile
window and the checks before the first step are components of their own.

Both are measured with `ast` on the sources, so neither limit can grow back unnoticed. A class or
function counts from its first line (its decorators, else its `class` or `def` line) to its last,
docstrings, comments and blank lines inside included: what a reader scrolls through. The tests
plant an oversized class and constructor in sources held in memory and assert that each is found,
named."""

from __future__ import annotations

import ast

import pytest
from conftest import REPO

TRAIN = REPO / "workflow" / "scripts" / "scalebench" / "train"
LOOP = "TrainingLoop"
LOOP_MODULE = "loop.py"  # train/loop.py
LOOP_LIMIT = 300
INIT_LIMIT = 60


def span(node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The lines a class or function takes, its decorators included."""
    first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
    return node.end_lineno - first + 1


def class_lines(source: str, name: str) -> int:
    """The lines of the top-level class `name` of a module's source (a renamed class fails here)."""
    found = [node for node in ast.parse(source).body if isinstance(node, ast.ClassDef) and node.name == name]
    assert found, f"class {name} is not defined at the top of the module"
    return span(found[0])


def constructors(source: str) -> dict[str, int]:
    """Each class's __init__ in a module's source, nested classes too: 'Class.__init__' -> its lines."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) and member.name == "__init__":
                    found[f"{node.name}.__init__"] = span(member)
    return found


def train_sources() -> dict[str, str]:
    """Every module under train/ by its path relative to train/ (both frameworks' folders too)."""
    return {str(path.relative_to(TRAIN)): path.read_text() for path in sorted(TRAIN.rglob("*.py"))}


def size_problems(sources: dict[str, str]) -> list[str]:
    """The loop over its limit and every constructor over its own, each named with its lines."""
    problems = []
    loop = class_lines(sources[LOOP_MODULE], LOOP)
    if loop > LOOP_LIMIT:
        problems.append(f"train/{LOOP_MODULE}: {LOOP} is {loop} lines (at most {LOOP_LIMIT}): delegate to a component")
    for module, source in sorted(sources.items()):
        for name, lines in constructors(source).items():
            if lines > INIT_LIMIT:
                problems.append(f"train/{module}: {name} is {lines} lines (at most {INIT_LIMIT})")
    return problems


def test_the_loop_and_every_constructor_in_train_are_within_their_limits():
    sources = train_sources()
    assert size_problems(sources) == []
    assert any(constructors(source) for source in sources.values())  # the walk finds the constructors at all
    assert class_lines(sources[LOOP_MODULE], LOOP) > 100  # and measures the real loop, not a stub


def test_a_decorated_function_counts_from_its_decorator():
    source = "class A:\n    @staticmethod\n    @other\n    def __init__():\n        pass\n"
    assert constructors(source) == {"A.__init__": 4}


def oversized_loop(sources: dict[str, str]) -> dict[str, str]:
    """The real loop module with a method (and its blank line) that takes TrainingLoop one line past its limit."""
    lines = class_lines(sources[LOOP_MODULE], LOOP)
    method = "    def planted(self) -> None:\n" + "        self.x = 1\n" * (LOOP_LIMIT - lines - 1)
    anchor = "    @property\n    def is_root"
    assert anchor in sources[LOOP_MODULE]
    return {**sources, LOOP_MODULE: sources[LOOP_MODULE].replace(anchor, method + "\n" + anchor, 1)}


def oversized_constructor(sources: dict[str, str]) -> dict[str, str]:
    """tf/steps.py with a 61-line constructor in a class nested in a function."""
    body = "".join(f"            self.a{index} = {index}\n" for index in range(INIT_LIMIT))
    planted = f"def make():\n    class Inner:\n        def __init__(self):\n{body}    return Inner\n"
    return {**sources, "tf/steps.py": sources["tf/steps.py"] + "\n\n" + planted}


@pytest.mark.parametrize(
    ("plant", "message"),
    [
        (oversized_loop, f"train/loop.py: TrainingLoop is {LOOP_LIMIT + 1} lines (at most {LOOP_LIMIT})"),
        (
            oversized_constructor,
            f"train/tf/steps.py: Inner.__init__ is {INIT_LIMIT + 1} lines (at most {INIT_LIMIT})",
        ),
    ],
    ids=["loop", "constructor"],
)
def test_a_planted_oversize_fails_naming_the_class_and_its_lines(plant, message):
    problems = size_problems(plant(train_sources()))
    assert len(problems) == 1 and problems[0].startswith(message), problems


def test_a_renamed_loop_fails_instead_of_passing_unmeasured():
    sources = train_sources()
    renamed = {**sources, LOOP_MODULE: sources[LOOP_MODULE].replace(f"class {LOOP}:", "class Trainer:")}
    with pytest.raises(AssertionError, match="class TrainingLoop is not defined"):
        size_problems(renamed)
