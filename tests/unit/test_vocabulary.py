"""One word for one thing in the code, as in the records (docs/records.md, 'Renamed since earlier
versions'): the device type is `cuda` (training.device's word), never `gpu`; what counts processes
is `processes` (`local_processes` on a node) and what counts model copies `replicas`, never the
`world_size` that meant the one on a Backend and the other in run.json (nor "world size" in prose,
comments and docstrings included); the hardware a rank ran on
is its `device_model`, never a `device_name` that also meant the device type.

The old spellings stay only where they are the compatibility reader's (a record field's `was` and
`old_words` in records/definitions.py, which records.read_run applies) or a library's own word
(a keyword argument of a library's function: torch's init_process_group(world_size=...);
TensorFlow's "/gpu:0" and "GPU" device kinds, SLURM's gres "gpu"). The checker reads the sources'
syntax trees, so the tests plant old spellings into real code in memory and assert they are found.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from conftest import REPO

# Where the code is: the package, the scripts beside it, the tools, the benchmarks and the tests
ROOTS = ("workflow/scripts", "tools", "benchmarks", "tests")
THIS = Path(__file__).resolve()
OLD_NAMES = ("world_size", "device_name")  # identifiers holding either are the old spellings
OLD_KEYS = ("world_size", "local_world_size")  # run.json's and the ranks' old keys, as strings
# the prose word for what `processes` or `replicas` count (or, in the analysis, a cell's GPUs), in
# comments and docstrings too: a library's WORLD_SIZE variable is not prose
OLD_PHRASE = re.compile(r"\bworld[ -]size", re.IGNORECASE)
# tests that feed old records to the compatibility reader, which must spell them the old way
COMPATIBILITY_TESTS = {"tests/unit/test_records.py"}
# keyword arguments whose strings are the compatibility reader's (records/fields.py Field)
COMPATIBILITY_KEYWORDS = ("was", "old_words")
# "gpu" strings in the package that are not a device type: each file and why it may say it
PACKAGE_GPU_WORDS = {
    "scalebench/launch/accounting.py": "SLURM's gres and TRES name (gres/gpu)",
    "scalebench/launch/local_pool.py": "the kind of lock a local cell holds per GPU id (locks.py)",
}


def names_device(node: ast.AST) -> bool:
    """Whether an expression names a device type (device_type, backend.device_type, device, ...)."""
    return any(
        "device" in (sub.id if isinstance(sub, ast.Name) else sub.attr if isinstance(sub, ast.Attribute) else "")
        for sub in ast.walk(node)
    )


def is_gpu(node: ast.AST | None) -> bool:
    """ "gpu" itself, or an if-expression that gives it."""
    if isinstance(node, ast.IfExp):
        return is_gpu(node.body) or is_gpu(node.orelse)
    return isinstance(node, ast.Constant) and node.value == "gpu"


def identifiers(node: ast.AST) -> list[str]:
    """The names a node introduces or reads (not a keyword argument: that is the called function's word)."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):  # a library's getter is its word (get_world_size, get_device_name)
        return [] if node.attr.startswith("get_") else [node.attr]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.alias):
        return [node.asname or node.name.rsplit(".", 1)[-1]]
    return []


def old_spellings(source: str, where: str, package_file: str = "") -> list[str]:
    """Each old spelling in `source` as 'where:line: what'. package_file: its path under
    workflow/scripts where it is a module of the package (which says "gpu" nowhere else)."""
    tree = ast.parse(source)
    compatibility = {
        id(constant)
        for node in ast.walk(tree)
        if isinstance(node, ast.keyword) and node.arg in COMPATIBILITY_KEYWORDS
        for constant in ast.walk(node.value)
    }
    found = []

    def say(node: ast.AST, what: str) -> None:
        found.append(f"{where}:{getattr(node, 'lineno', '?')}: {what}")

    for node in ast.walk(tree):
        for name in identifiers(node):
            if any(old in name for old in OLD_NAMES):
                say(node, f"the name {name}")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in compatibility:
            if node.value in OLD_KEYS and where not in COMPATIBILITY_TESTS:
                say(node, f"the string {node.value!r}")
            if node.value == "gpu" and package_file.startswith("scalebench/") and package_file not in PACKAGE_GPU_WORDS:
                say(node, "the device word 'gpu' (cuda)")
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(is_gpu(side) for side in sides) and any(names_device(side) for side in sides):
                say(node, "a device compared with 'gpu' (cuda)")
        targets = []
        if isinstance(node, ast.Assign):
            targets = [(target, node.value) for target in node.targets]
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [(node.target, node.value)]
        elif isinstance(node, ast.keyword) and node.arg and "device" in node.arg:
            targets = [(ast.Name(node.arg), node.value)]
        for target, value in targets:
            if is_gpu(value) and names_device(target):
                say(node, "a device set to 'gpu' (cuda)")
    return found


def sources(root: Path = REPO) -> dict[str, tuple[str, str]]:
    """Every Python file of the code under `root`: its path from root -> (source, package path)."""
    found = {}
    for folder in ROOTS:
        for path in sorted((root / folder).rglob("*.py")):
            if path.resolve() == THIS or ".venv" in path.parts:
                continue
            relative = path.relative_to(root)
            package = str(path.relative_to(root / "workflow" / "scripts")) if folder == "workflow/scripts" else ""
            found[str(relative)] = (path.read_text(), package)
    return found


def old_phrases(source: str, where: str) -> list[str]:
    """Each 'world size' in the text of `source`, comments and docstrings included, as 'where:line: what'."""
    return [
        f"{where}:{number}: the phrase {found.group(0)!r} (processes, replicas or GPUs)"
        for number, line in enumerate(source.splitlines(), start=1)
        for found in OLD_PHRASE.finditer(line)
    ]


def all_old_spellings(root: Path = REPO) -> list[str]:
    return [hit for where, (text, package) in sources(root).items() for hit in old_spellings(text, where, package)]


def test_the_code_says_cuda_processes_replicas_and_device_model_only():
    found = all_old_spellings()
    assert not found, "old spellings (see this test's docstring for today's):\n" + "\n".join(found)


def test_the_code_says_processes_replicas_or_gpus_where_it_once_said_world_size():
    found = [hit for where, (text, _) in sources().items() for hit in old_phrases(text, where)]
    assert not found, "\n".join(found)
    planted = (REPO / PACKAGE_MODULE).read_text() + "\n# each bucket divided by the world size\n"
    assert old_phrases(planted, PACKAGE_MODULE)[0].startswith(f"{PACKAGE_MODULE}:")
    assert old_phrases('os.environ["WORLD_SIZE"]\n', "x.py") == []  # torchrun's variable is its own word


def test_the_checker_reads_every_part_of_the_code():
    found = sources()
    assert "workflow/scripts/scalebench/train/interfaces.py" in found and "tools/records_reference.py" in found
    assert any(name.startswith("benchmarks/") for name in found) and any(name.startswith("tests/") for name in found)


PACKAGE_MODULE = "workflow/scripts/scalebench/train/torch/native.py"


@pytest.mark.parametrize(
    ("planted", "what"),
    [
        ('if self.device_type == "gpu":\n    pass\n', "a device compared with 'gpu'"),
        ('kind = "GPU" if backend.device_type != "gpu" else "CPU"\n', "a device compared with 'gpu'"),
        ('backend.device_type = "gpu" if cuda else "cpu"\n', "a device set to 'gpu'"),
        ('meter = meter_for(device_type="gpu")\n', "a device set to 'gpu'"),
        ('collective = "nccl" if kind == "gpu" else "gloo"\n', "the device word 'gpu'"),
        ("self.world_size = place.world_size\n", "the name world_size"),
        ("def check(local_world_size: int) -> None: ...\n", "the name local_world_size"),
        ('replicas = run["world_size"]\n', "the string 'world_size'"),
        ("name = framework.device_name()\n", "the name device_name"),
        ("from scalebench.records import device_name\n", "the name device_name"),
    ],
)
def test_a_planted_old_spelling_is_found_naming_the_file_and_line(planted, what):
    source = (REPO / PACKAGE_MODULE).read_text() + "\n" + planted
    found = old_spellings(source, PACKAGE_MODULE, "scalebench/train/torch/native.py")
    assert any(what in hit and hit.startswith(f"{PACKAGE_MODULE}:") for hit in found), found


def test_the_compatibility_reader_and_the_libraries_keep_their_words():
    kept = (
        'Field("replicas", "int", "", "the model copies", was="world_size")\n'
        'Field("device", "str", "", "cuda or cpu", old_words=(("gpu", "cuda"),))\n'
        "dist.init_process_group('gloo', rank=0, world_size=self.processes)\n"
        'device = "/gpu:0" if device_type == "cuda" else "/cpu:0"\n'
        'kind = "GPU" if device_type == "cuda" else "CPU"\n'
        'names = [details.get("device_name", gpu.name) for details, gpu in found]\n'
    )
    assert old_spellings(kept, "x.py", "scalebench/records/definitions.py") == []
    # SLURM's gres word where the package reads SLURM's answers, and nowhere else in it
    assert old_spellings('if parts[0] != "gpu": pass\n', "a.py", "scalebench/launch/accounting.py") == []
    assert old_spellings('if parts[0] != "gpu": pass\n', "a.py", "scalebench/train/energy.py") != []
