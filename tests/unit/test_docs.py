"""The README and docs: the README is a front page opening with the two commands, the
configuration reference (config/README.md) matches the schema, the commands are read by one
rule, programs, links and the paths of the repository named in inline code point at files that
exist inside the repository, and every page under docs/ can be reached from the front page."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from readme_commands import documents


def test_config_readme_holds_the_current_configuration_reference():
    table = subprocess.run(
        [sys.executable, str(REPO / "tools" / "config_reference.py")], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert table in (REPO / "config" / "README.md").read_text(), "run: python tools/config_reference.py --write"


def test_every_config_key_is_documented():
    sys.path.insert(0, str(REPO / "tools"))
    from config_reference import rows
    from scalebench.config import load_schema

    schema = load_schema(REPO / "config" / "schema.yaml")  # with the registry's launch templates
    undocumented = [key for key, _, _, meaning in rows(schema) if not meaning]
    assert not undocumented, f"add a description to config/schema.yaml for {undocumented}"


# --- the front page


FRONT_PAGE_COMMANDS = [
    "./install.sh && .venv/bin/snakemake --profile profiles/local && "
    ".venv/bin/snakemake --profile profiles/local --report results/report.html",
    "./install.sh && ./run_tests.sh",
]


def test_the_readme_opens_with_the_two_commands_that_ci_runs():
    """The first code block is the demo and the test suite, verbatim; CI runs the second."""
    from readme_commands import code_blocks

    assert code_blocks((REPO / "README.md").read_text())[0] == ("bash", FRONT_PAGE_COMMANDS)
    assert FRONT_PAGE_COMMANDS[1] in (REPO / ".ci" / "run").read_text().splitlines()


def test_the_readme_is_a_front_page_and_its_picture_is_committed():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200, "the README is a front page: move user-guide text to docs/"
    pictures = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", text)
    assert pictures and all((REPO / p).is_file() and p.endswith(".png") for p in pictures), pictures


def linked_pages(document: Path) -> set[Path]:
    """The Markdown files inside the repository that a document links to."""
    targets = {(document.parent / link.split("#")[0]).resolve() for link in relative_links(document.read_text())}
    return {path for path in targets if path.suffix == ".md" and path.is_file()}


def test_every_page_of_the_docs_is_reachable_from_the_readme():
    seen, todo = set(), [(REPO / "README.md").resolve()]
    while todo:
        page = todo.pop()
        if page not in seen:
            seen.add(page)
            todo.extend(linked_pages(page) - seen)
    unreachable = [p.name for p in sorted((REPO / "docs").glob("*.md")) if p.resolve() not in seen]
    assert not unreachable, f"link these from README.md or a page it links to: {unreachable}"
    assert (REPO / "config" / "README.md").resolve() in seen


# --- the commands and links of the README and the docs


def test_shell_commands_are_read_from_shell_blocks_by_one_rule():
    from readme_commands import shell_commands, snakemake_commands

    markdown = "\n".join(
        [
            "```bash",
            "# a comment line",
            "./install.sh && .venv/bin/snakemake --profile p   # what it does",
            "",
            "```",
            "```console",
            '$ snakemake --config \'x={"a": "#1"}\'',
            "output, not a command",
            "```",
            "```yaml",
            "snakemake: not a shell block",
            "```",
            "`snakemake inline` is prose",
        ]
    )
    assert shell_commands(markdown) == [
        "./install.sh",
        ".venv/bin/snakemake --profile p",
        'snakemake --config \'x={"a": "#1"}\'',
    ]
    assert snakemake_commands(markdown) == [".venv/bin/snakemake --profile p", 'snakemake --config \'x={"a": "#1"}\'']


def test_programs_the_docs_name_by_path_exist():
    """./install.sh and the like in the checkout; .venv/bin/... in the environment install.sh makes."""
    from readme_commands import documents, shell_commands

    missing = []
    for command in [c for document in documents(REPO) for c in shell_commands(document.read_text())]:
        # the program, after any NAME=value words that set its environment (PYTHON=... ./install.sh)
        program = next(word for word in command.split() if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", word))
        if program.startswith(".venv/"):
            path = Path(sys.prefix) / program.removeprefix(".venv/")
        elif "/" in program:
            path = REPO / program
        else:
            continue
        if not path.exists():
            missing.append(program)
    assert not missing


MARKDOWN_FILES = documents(REPO)
INLINE_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.MULTILINE)
PARENT_PATH_IN_CODE = re.compile(r"`(\.\./[^`\s]*)`")


def relative_links(markdown: str) -> list[str]:
    """Link targets that are paths (not URLs, not anchors in the same page), relative to the document."""
    targets = INLINE_LINK.findall(markdown) + REFERENCE_LINK.findall(markdown)
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:|#", t)]


def parent_paths_in_code(markdown: str) -> list[str]:
    """`../path` in inline code: a path a reader is told to use, from the repository root."""
    return PARENT_PATH_IN_CODE.findall(markdown)


def test_relative_links_and_parent_paths_are_found():
    markdown = "[a](docs/x.md#part) [b](https://example.org) [c](#local) [d]: ../no.md\n`../shared/tool`\n[e]: ../e.md"
    assert relative_links(markdown) == ["docs/x.md#part", "../e.md"]
    assert parent_paths_in_code(markdown) == ["../shared/tool"]


@pytest.mark.parametrize("document", MARKDOWN_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve_to_files_inside_the_repository(document):
    root = REPO.resolve()
    text = document.read_text()
    places = [(document.parent, link.split("#")[0]) for link in relative_links(text)]
    places += [(REPO, path) for path in parent_paths_in_code(text)]
    broken = []
    for base, target in places:
        path = (base / target).resolve()
        if not path.is_relative_to(root) or not path.exists():
            broken.append(target)
    assert not broken, f"{document.name}: links that leave the repository or lead nowhere: {broken}"


def heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated heading numbered (-1, -2)."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} +(.+?) *$", prose(markdown), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        if seen[slug]:
            seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


def test_heading_anchors_follow_githubs_rule():
    markdown = "# The step split's cost\n## Model FLOPs: `x/y.py`\n```\n# a comment\n```\n## Model FLOPs: `x/y.py`"
    assert heading_anchors(markdown) == {"the-step-splits-cost", "model-flops-xypy", "model-flops-xypy-1"}


@pytest.mark.parametrize("document", MARKDOWN_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_links_to_a_part_of_a_page_find_its_heading(document):
    text = document.read_text()
    targets = INLINE_LINK.findall(text) + REFERENCE_LINK.findall(text)
    broken = []
    for target in targets:
        page, _, fragment = target.partition("#")
        if not fragment or re.match(r"[a-z][a-z0-9+.-]*:", page):
            continue
        linked = (document.parent / page) if page else document
        if linked.suffix == ".md" and fragment not in heading_anchors(linked.read_text()):
            broken.append(target)
    assert not broken, f"{document.name}: links to headings that are not there: {broken}"


# --- docs/benchmarks.md is a reference, docs/benchmarks-log.md its history

BENCHMARKS = REPO / "docs" / "benchmarks.md"
BENCHMARKS_LOG = REPO / "docs" / "benchmarks-log.md"
# One current figure per subject: a little above the page's length when it became a reference
BENCHMARKS_LINES = 600


def test_the_benchmarks_page_is_a_reference_of_current_figures():
    lines = len(BENCHMARKS.read_text().splitlines())
    assert lines <= BENCHMARKS_LINES, (
        f"docs/benchmarks.md has {lines} lines, more than {BENCHMARKS_LINES}: it holds one current figure "
        "per subject. Replace a subject's figure with the new one instead of adding one beside it: older "
        "figures go to the history, docs/benchmarks-log.md up to 2026-11-29 and git's history of the page since"
    )


def test_the_benchmarks_page_links_its_subjects_to_headings_of_the_log():
    """Each subject says how its figure got there with a link into the log; every such link finds a
    heading of the log (GitHub's anchors), so moving or renaming a heading breaks no history link."""
    anchors = heading_anchors(BENCHMARKS_LOG.read_text())
    links = [target for target in relative_links(BENCHMARKS.read_text()) if target.startswith("benchmarks-log.md#")]
    assert len(links) >= 15, links
    assert [link for link in links if link.partition("#")[2] not in anchors] == []


# --- docs/architecture.md is the map and the recipes, docs/design.md the why

ARCHITECTURE = REPO / "docs" / "architecture.md"
DESIGN = REPO / "docs" / "design.md"
# The map and the recipes: a little above the page's length when its design notes moved to docs/design.md
ARCHITECTURE_LINES = 450
# The map's sections without a table: the recipes, and the tests' folders
RECIPES = ("Adding ", "Recipes", "Tests")


def test_the_architecture_page_is_the_map_and_the_recipes():
    """docs/architecture.md holds the map (sections with a table) and the recipes, and opens by
    linking docs/design.md; a note on why the code is built so is a section of docs/design.md,
    never of both pages."""
    text = ARCHITECTURE.read_text()
    assert "](design.md)" in text.split("\n\n", 2)[1], "the map's opening paragraph links docs/design.md"
    sections = re.split(r"(?m)^## ", prose(text))[1:]
    notes = [s.splitlines()[0] for s in sections if "\n| --- |" not in s and not s.startswith(RECIPES)]
    assert notes == [], f"design notes belong in docs/design.md: {notes}"
    lines = len(text.splitlines())
    assert lines <= ARCHITECTURE_LINES, (
        f"docs/architecture.md has {lines} lines, more than {ARCHITECTURE_LINES}: it is the map (a row per "
        "module) and the recipes; why the code is built so goes to docs/design.md"
    )
    assert heading_anchors(text) & heading_anchors(DESIGN.read_text()) == set()


# --- paths of the repository named in inline code (`launch/launcher.py`, `tests/unit/test_docs.py`)

PACKAGE = REPO / "workflow" / "scripts" / "scalebench"
# Where the docs write a path from: the repository's root (`rules/train.smk`), the package
# (`train/loop.py`) or the package's folder (`scalebench/cell.py`).
PATH_BASES = (REPO, PACKAGE, PACKAGE.parent)
# Made by running things, not part of the repository: a path into them names an output.
GENERATED = {".git", ".venv", ".snakemake", ".pytest_cache", ".ruff_cache", "__pycache__", "results", "resources"}
CODE_SPAN = re.compile(r"`([^`\s]+)`")
# Two parts at least; a template (`train/<framework>/<backend>.py`, `g{gpus}`) is not a path.
PATH_SHAPE = re.compile(r"[\w.*-]+(?:/[\w.*-]+)+/?")


def prose(markdown: str) -> str:
    """The text outside fenced code blocks (the commands in those are checked above)."""
    lines, fenced = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return "\n".join(lines)


def first_parts() -> set[str]:
    """The names a path of the repository starts with: what the root and the package hold."""
    names = {path.name for base in (REPO, PACKAGE) for path in base.iterdir()} | {PACKAGE.name}
    return names - GENERATED


def repository_paths(markdown: str, starts: set[str]) -> list[str]:
    """The inline code spans of the prose that name a file or folder of the repository: a path of
    two parts or more starting with one of `starts` (a test's `::name` cut off). A bare name
    (`loop.py`) is prose: it may be any project's file."""
    found = []
    for span in CODE_SPAN.findall(prose(markdown)):
        path = span.split("::")[0]
        if PATH_SHAPE.fullmatch(path) and path.split("/")[0] in starts:
            found.append(path)
    return found


def path_exists(path: str) -> bool:
    """Whether a path the docs name exists from one of PATH_BASES: a glob matches something, and
    `module.name` (`cluster/gpu_ids.gpus_taken`) counts as its module's file."""
    parts = path.rstrip("/").split("/")
    module = "/".join([*parts[:-1], parts[-1].split(".")[0] + ".py"])
    for base in PATH_BASES:
        if "*" in path:
            if any(base.glob(path)):
                return True
        elif (base / path).exists() or (base / module).is_file():
            return True
    return False


def test_repository_paths_in_inline_code_are_found_and_checked():
    markdown = "\n".join(
        [
            "See `launch/resources.py`, `config/resources.py` and `tests/unit/test_docs.py::test_x`;",
            "`cluster/gpu_ids.gpus_taken`, `rules/*.smk`, `scalebench/flops.py` and `envs/*.toml`.",
            "Not paths: `loop.py`, `results/runs/torch`, `train/<framework>/x.py`, `a b/c`, `torch/native/g2/s1`.",
            "```bash",
            "cat `launch/fenced.py`",
            "```",
        ]
    )
    found = repository_paths(markdown, first_parts())
    assert found == [
        "launch/resources.py",
        "config/resources.py",
        "tests/unit/test_docs.py",
        "cluster/gpu_ids.gpus_taken",
        "rules/*.smk",
        "scalebench/flops.py",
        "envs/*.toml",
    ]
    assert [path for path in found if not path_exists(path)] == [
        "launch/resources.py",
        "scalebench/flops.py",
        "envs/*.toml",
    ]


@pytest.mark.parametrize("document", MARKDOWN_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_repository_paths_in_inline_code_exist(document):
    starts = first_parts()
    missing = [path for path in repository_paths(document.read_text(), starts) if not path_exists(path)]
    assert not missing, f"{document.name} names paths the repository lacks (moved or removed?): {missing}"


def test_the_config_package_lists_each_of_its_modules():
    """config/ is the planner, where a reader of the rules starts: its docstring names every module
    (`- name.py: what it does`), so a new one is described there too."""
    docstring = ast.get_docstring(ast.parse((PACKAGE / "config" / "__init__.py").read_text()))
    modules = sorted(path.name for path in (PACKAGE / "config").glob("*.py") if path.name != "__init__.py")
    assert [name for name in modules if f"- {name}: " not in docstring] == []


def cell_files_table() -> str:
    """The first column of the user guide's table of a cell's files."""
    text = (REPO / "docs" / "user-guide.md").read_text()
    table = text.split("Each cell writes to", 1)[1].split("\n\n", 2)[1]
    return "\n".join(row.split("|")[1] for row in table.splitlines()[2:])


def listed_names(folder: Path) -> list[str]:
    """What a cell folder holds, as the table writes it (folders with a slash)."""
    return sorted(f"`{p.name}/`" if p.is_dir() else f"`{p.name}`" for p in folder.iterdir())


def test_cell_files_table_lists_the_train_rules_outputs():
    rule = (REPO / "rules" / "train.smk").read_text()
    table = cell_files_table()
    for name in ("metrics.jsonl", "run.json", "train.log", "benchmark.tsv"):
        assert f'/{name}"' in rule and f"`{name}`" in table


def test_the_step_split_guide_lists_every_field_of_the_record_and_every_column():
    """docs/step-split.md's table of the epoch record's fields is records.STEP_SPLIT_FIELDS, row for
    row, and it names every step-split column of runs.csv and every knob."""
    from scalebench.records import STEP_SPLIT_FIELDS
    from scalebench.records.tables import RUN_SPLIT

    guide = (REPO / "docs" / "step-split.md").read_text()
    table = guide.split("## The epoch record's fields", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip().strip("`") for line in table.splitlines() if line.startswith("| `")]
    assert rows == list(STEP_SPLIT_FIELDS)
    for column in [
        *(column.name for column in RUN_SPLIT),
        "training.step_split",
        "training.profile",
        "1% of the epoch plus 2 ms",
    ]:
        assert f"{column}" in guide, column
    assert "(docs/step-split.md)" in (REPO / "README.md").read_text()
    assert "benchmarks/step_split_overhead.py" in (REPO / "docs" / "user-guide.md").read_text()
