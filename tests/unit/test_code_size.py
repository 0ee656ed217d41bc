"""A trainer built from a spec (docs/architecture.md, the package's train/ rows): no class under
train/ is longer than CLASS_LIMIT lines (TrainingLoop, the longest, included: run.json, the
collective benchmark, the profile window and the checks before the first step are components of
their own), no constructor longer than INIT_LIMIT lines, and every attribute of a class under
train/ is first assigned in its constructor (or a base's under train/, or as a dataclass field):
a reader sees in __init__ everything an object holds, and no attribute appears halfway through a
run. Nor does one object set another's attribute: a component's state changes through its methods.
And no function anywhere under workflow/scripts (methods and nested functions included) is longer
than FUNCTION_LIMIT lines unless its docstring says why it reads better whole (WHOLE): a long
function is split into named pieces a reader can take one at a time.

All three are measured with `ast` on the sources, so none can grow back unnoticed. A class or
function counts from its first line (its decorators, else its `class` or `def` line) to its last,
docstrings, comments and blank lines inside included: what a reader scrolls through. The tests
plant an oversized class and constructor and an attribute first set in a method in sources held
in memory and assert that each is found, named; and a function one line over its limit, with and
without the docstring that excuses it."""

from __future__ import annotations

import ast

import pytest
from conftest import REPO, SCRIPTS

TRAIN = REPO / "workflow" / "scripts" / "scalebench" / "train"
LOOP = "TrainingLoop"
LOOP_MODULE = "loop.py"  # train/loop.py
CLASS_LIMIT = 260
INIT_LIMIT = 60
FUNCTION_LIMIT = 60  # any function under workflow/scripts
WHOLE = "reads better whole"  # the words in a docstring that let a function stay longer, with the reason
# a library's own attribute that shares its name with one a class under train/ declares: (the
# object's name where it is set, the attribute) and why it is the library's
LIBRARY_ATTRIBUTES = {
    ("options", "deterministic"): "tf.data.Options: the pipeline's order (tf/data.py)",
}

Function = ast.FunctionDef | ast.AsyncFunctionDef


def span(node: ast.ClassDef | Function) -> int:
    """The lines a class or function takes, its decorators included."""
    first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
    return node.end_lineno - first + 1


def class_lines(source: str, name: str) -> int:
    """The lines of the top-level class `name` of a module's source (a renamed class fails here)."""
    found = [node for node in ast.parse(source).body if isinstance(node, ast.ClassDef) and node.name == name]
    assert found, f"class {name} is not defined at the top of the module"
    return span(found[0])


def classes(source: str) -> list[ast.ClassDef]:
    """Every class of a module's source, nested ones too (in a function or a class)."""
    return [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ClassDef)]


def methods(node: ast.ClassDef) -> list[Function]:
    return [member for member in node.body if isinstance(member, Function)]


def constructors(source: str) -> dict[str, int]:
    """Each class's __init__ in a module's source, nested classes too: 'Class.__init__' -> its lines."""
    return {
        f"{node.name}.__init__": span(member)
        for node in classes(source)
        for member in methods(node)
        if member.name == "__init__"
    }


def train_sources() -> dict[str, str]:
    """Every module under train/ by its path relative to train/ (both frameworks' folders too)."""
    return {str(path.relative_to(TRAIN)): path.read_text() for path in sorted(TRAIN.rglob("*.py"))}


def size_problems(sources: dict[str, str]) -> list[str]:
    """Every class over its limit and every constructor over its own, each named with its lines."""
    class_lines(sources[LOOP_MODULE], LOOP)  # the loop is where it is, so it is measured
    problems = []
    for module, source in sorted(sources.items()):
        for node in classes(source):
            if span(node) > CLASS_LIMIT:
                problems.append(
                    f"train/{module}: {node.name} is {span(node)} lines (at most {CLASS_LIMIT}): "
                    "build a component of its own"
                )
        for name, lines in constructors(source).items():
            if lines > INIT_LIMIT:
                problems.append(f"train/{module}: {name} is {lines} lines (at most {INIT_LIMIT})")
    return problems


def stored(target: ast.AST) -> list[ast.Attribute]:
    """The attributes an assignment target stores into (unpacked tuples and starred names too)."""
    if isinstance(target, ast.Tuple | ast.List):
        return [found for element in target.elts for found in stored(element)]
    if isinstance(target, ast.Starred):
        return stored(target.value)
    return [target] if isinstance(target, ast.Attribute) else []


def assignments(body: list[ast.stmt]) -> list[ast.Attribute]:
    """The attributes `body` assigns, outside the functions and classes defined in it (they run
    later: a closure made in __init__ that sets self.x sets it after the constructor)."""
    found, todo = [], list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, Function | ast.ClassDef | ast.Lambda):
            continue
        if isinstance(node, ast.Assign):
            found += [attribute for target in node.targets for attribute in stored(target)]
        elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.For | ast.AsyncFor):
            found += stored(node.target)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            found += stored(node.optional_vars)
        todo.extend(ast.iter_child_nodes(node))
    return found


def on_self(attributes: list[ast.Attribute]) -> list[ast.Attribute]:
    return [a for a in attributes if isinstance(a.value, ast.Name) and a.value.id == "self"]


def later_code(node: ast.ClassDef) -> list[tuple[str, list[ast.stmt]]]:
    """(where, body) of the code of a class that runs after its constructor: each method but
    __init__, and each function defined inside any method (__init__'s closures too)."""
    found = []
    for method in methods(node):
        if method.name != "__init__":
            found.append((method.name, method.body))
        nested = [inner for inner in ast.walk(method) if isinstance(inner, Function) and inner is not method]
        found += [(f"{method.name}.{inner.name}", inner.body) for inner in nested]
    return found


def is_dataclass(node: ast.ClassDef) -> bool:
    def name(decorator: ast.expr) -> str:
        called = decorator.func if isinstance(decorator, ast.Call) else decorator
        return called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")

    return any(name(decorator) == "dataclass" for decorator in node.decorator_list)


def class_attributes(node: ast.ClassDef) -> set[str]:
    """The attributes a class body assigns or annotates (its constants, its defaults)."""
    targets = [
        target
        for member in node.body
        if isinstance(member, ast.Assign | ast.AnnAssign)
        for target in (member.targets if isinstance(member, ast.Assign) else [member.target])
    ]
    return {name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)}


def declared(node: ast.ClassDef) -> set[str]:
    """What a class itself assigns when it is built: its constructor's self.x, its dataclass fields."""
    names = set()
    for method in methods(node):
        if method.name == "__init__":
            names |= {attribute.attr for attribute in on_self(assignments(method.body))}
    if is_dataclass(node):
        names |= {member.target.id for member in node.body if isinstance(member, ast.AnnAssign)}
    return names


def base_names(node: ast.ClassDef) -> list[str]:
    return [
        base.id if isinstance(base, ast.Name) else base.attr
        for base in node.bases
        if isinstance(base, ast.Name | ast.Attribute)
    ]


def attribute_problems(sources: dict[str, str]) -> list[str]:
    """Each attribute a class under train/ first assigns after its constructor (a self.x that no
    __init__ of the class or of its bases under train/ assigns), and each attribute of a class under
    train/ that code sets on another object (x.attr = ..., where attr is one such a class declares),
    each named with its module and line."""
    found = {module: classes(source) for module, source in sources.items()}
    by_name: dict[str, list[ast.ClassDef]] = {}
    for nodes in found.values():
        for node in nodes:
            by_name.setdefault(node.name, []).append(node)

    def inherited(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        """What the class `name` and its bases under train/ declare (a name two modules use: both)."""
        names = set()
        for node in by_name.get(name, []):
            names |= declared(node)
            for base in base_names(node):
                if base not in seen:
                    names |= inherited(base, seen | {name})
        return names

    declared_anywhere = {
        name for nodes in by_name.values() for node in nodes for name in declared(node) | class_attributes(node)
    }
    problems = []
    for module, nodes in sorted(found.items()):
        for node in nodes:
            allowed = inherited(node.name)
            for where, body in later_code(node):
                problems += [
                    f"train/{module}:{attribute.lineno}: {node.name}.{where} first sets self.{attribute.attr} "
                    "(assign it in __init__)"
                    for attribute in on_self(assignments(body))
                    if attribute.attr not in allowed
                ]
        tree = ast.parse(sources[module])
        bodies = [tree.body] + [function.body for function in ast.walk(tree) if isinstance(function, Function)]
        for attribute in (attribute for body in bodies for attribute in assignments(body)):
            owner = ast.unparse(attribute.value)  # another object: a name, or one an object holds (self.backend)
            if owner in ("self", "cls") or not isinstance(attribute.value, ast.Name | ast.Attribute):
                continue
            if attribute.attr in declared_anywhere and (owner, attribute.attr) not in LIBRARY_ATTRIBUTES:
                problems.append(
                    f"train/{module}:{attribute.lineno}: sets {owner}.{attribute.attr} from outside its object "
                    "(let its constructor or a method of its own set it)"
                )
    return sorted(set(problems))


def test_every_class_and_constructor_in_train_is_within_its_limit():
    sources = train_sources()
    assert size_problems(sources) == []
    assert any(constructors(source) for source in sources.values())  # the walk finds the constructors at all
    assert class_lines(sources[LOOP_MODULE], LOOP) > 100  # and measures the real loop, not a stub


def test_every_attribute_in_train_is_first_assigned_in_its_constructor():
    assert attribute_problems(train_sources()) == []


def test_a_decorated_function_counts_from_its_decorator():
    source = "class A:\n    @staticmethod\n    @other\n    def __init__():\n        pass\n"
    assert constructors(source) == {"A.__init__": 4}


def oversized_loop(sources: dict[str, str]) -> dict[str, str]:
    """The real loop module with a method (and its blank line) that takes TrainingLoop one line past the limit."""
    lines = class_lines(sources[LOOP_MODULE], LOOP)
    method = "    def planted(self) -> None:\n" + "        self.stopped_at_target = True\n" * (CLASS_LIMIT - lines - 1)
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
        (oversized_loop, f"train/loop.py: TrainingLoop is {CLASS_LIMIT + 1} lines (at most {CLASS_LIMIT})"),
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


PLANTED_ATTRIBUTES = [
    # the loop learning what it holds halfway through a run (as it once did its metrics writer)
    (
        LOOP_MODULE,
        "    @property\n    def is_root",
        "    def open_metrics(self) -> None:\n        self.writer, self.epoch_times = None, []\n\n",
        "TrainingLoop.open_metrics first sets self.writer (assign it in __init__)",
    ),
    # a closure made in a constructor sets its attribute only when it runs
    (
        "torch/steps.py",
        "        self.replica_batches = 0\n        self.output_dtype",
        "        def later():\n            self.seen = True\n\n",
        "Steps.__init__.later first sets self.seen (assign it in __init__)",
    ),
    # one component setting another's attribute (as the frameworks once set the backend's device type)
    (
        "tf/steps.py",
        "        self.replica_batches = 0\n\n    def start_epoch",
        "        backend.device_type = 'cuda'\n",
        "sets backend.device_type from outside its object (let its constructor or a method of its own set it)",
    ),
]


@pytest.mark.parametrize(
    ("module", "anchor", "planted", "message"), PLANTED_ATTRIBUTES, ids=["method", "closure", "other"]
)
def test_a_planted_attribute_set_after_the_constructor_fails_naming_it(module, anchor, planted, message):
    sources = train_sources()
    assert sources[module].count(anchor) == 1
    at = sources[module].index(anchor)
    changed = {**sources, module: sources[module][:at] + planted + sources[module][at:]}
    assigning = next(index for index, text in enumerate(planted.split("\n")) if "=" in text)
    line = sources[module][:at].count("\n") + 1 + assigning
    assert attribute_problems(changed) == [f"train/{module}:{line}: {message}"]


def test_what_a_base_class_or_a_dataclass_declares_counts_as_declared():
    sources = {
        "loop.py": f"class {LOOP}:\n    pass\n",
        "a.py": (
            "class Base:\n    def __init__(self):\n        self.rank = 0\n\n"
            "class Child(Base):\n    def join(self):\n        self.rank = 1\n\n"
            "@dataclass\nclass Held:\n    count: int = 0\n\n    def add(self):\n        self.count += 1\n"
        ),
    }
    assert attribute_problems(sources) == []
    orphan = {**sources, "a.py": sources["a.py"].replace("class Child(Base):", "class Child:")}
    assert attribute_problems(orphan) == ["train/a.py:7: Child.join first sets self.rank (assign it in __init__)"]


def script_sources() -> dict[str, str]:
    """Every module under workflow/scripts by its path relative to it (the package and the rules' scripts)."""
    return {str(path.relative_to(SCRIPTS)): path.read_text() for path in sorted(SCRIPTS.rglob("*.py"))}


def functions(source: str) -> list[tuple[str, Function]]:
    """Every function of a module's source with its qualified name ('Class.method', 'outer.inner')."""
    found, todo = [], [("", node) for node in ast.parse(source).body]
    while todo:
        prefix, node = todo.pop()
        if isinstance(node, Function | ast.ClassDef):
            name = f"{prefix}{node.name}"
            if isinstance(node, Function):
                found.append((name, node))
            todo += [(f"{name}.", child) for child in ast.iter_child_nodes(node)]
        else:
            todo += [(prefix, child) for child in ast.iter_child_nodes(node)]
    return sorted(found, key=lambda named: named[1].lineno)


def function_problems(sources: dict[str, str]) -> list[str]:
    """Every function over FUNCTION_LIMIT lines whose docstring does not say why it reads better whole,
    each named with its module, line and lines."""
    return [
        f"{module}:{node.lineno}: {name} is {span(node)} lines (at most {FUNCTION_LIMIT}): split it, "
        f"or say in its docstring why it {WHOLE}"
        for module, source in sorted(sources.items())
        for name, node in functions(source)
        if span(node) > FUNCTION_LIMIT and WHOLE not in (ast.get_docstring(node) or "")
    ]


def test_every_function_under_workflow_scripts_is_within_its_limit():
    sources = script_sources()
    assert function_problems(sources) == []
    assert {"scalebench/train/loop.py", "download_dataset.py"} <= set(sources)  # the package and the rules' scripts
    assert max(span(node) for source in sources.values() for _, node in functions(source)) > 40  # measured, not empty


def planted_function(lines: int, docstring: str = "Planted.") -> str:
    """A method of `lines` lines, its decorator and docstring included, of a class nested in a class."""
    body = "".join(f"            a{index} = {index}\n" for index in range(lines - 3))
    head = "class Outer:\n    class Inner:\n        @staticmethod\n        def planted():\n"
    return f'{head}            """{docstring}"""\n{body}'


@pytest.mark.parametrize(
    ("lines", "docstring", "problems"),
    [
        (
            FUNCTION_LIMIT + 1,
            "Planted.",
            [
                f"scalebench/planted.py:4: Outer.Inner.planted is {FUNCTION_LIMIT + 1} lines (at most {FUNCTION_LIMIT}): "
                f"split it, or say in its docstring why it {WHOLE}"
            ],
        ),
        (FUNCTION_LIMIT, "Planted.", []),
        (FUNCTION_LIMIT + 1, f"Planted: it {WHOLE}, one table from top to bottom.", []),
    ],
    ids=["over", "at-the-limit", "excused"],
)
def test_a_planted_long_function_fails_naming_it_unless_its_docstring_excuses_it(lines, docstring, problems):
    planted = planted_function(lines, docstring)
    assert span(dict(functions(planted))["Outer.Inner.planted"]) == lines
    assert function_problems({"scalebench/planted.py": planted}) == problems
