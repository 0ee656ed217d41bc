"""Every Snakemake command printed in the README and the docs runs as printed (as a dry run).

The commands are those tests/readme_commands.py finds in the shell code blocks of the
README, config/README.md and every page under docs/ (a command moved from the front
page to the user guide stays tested). Each runs with bash, exactly as printed plus `-n`, in a copy of the
repository whose `.venv` points at this environment, so nothing is written into the
checkout. A dry run builds the whole DAG: the profile, the config (with --config
overrides) and its validation, every rule's params and resources and the targets
named on the command line. SLURM commands (`--executor slurm`, `--profile
profiles/slurm`) dry-run too: the executor plugin submits nothing and calls none of
SLURM's commands in a dry run, and the check before submission (config/slurm_check.py) finds
no SLURM (tests/conftest.py hides the cluster tests' one) and says it skipped.

`--report FILE` commands need a finished study, which takes minutes for the demo
matrix: they are dry-run with `--report FILE` left out (the same profile and other
flags, the same DAG) and FILE must be an HTML path. Building the report with
`--report` from a finished study is what test_workflow_local.py's
test_tiny_study_runs_to_the_report does.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, tool_env
from readme_commands import documents, snakemake_commands
from scalebench.records.tables import RUNS

pytestmark = pytest.mark.integration

COMMANDS = list(dict.fromkeys(c for document in documents(REPO) for c in snakemake_commands(document.read_text())))
NOT_COPIED = (".git", ".venv", "results", "resources", ".snakemake", "__pycache__", ".pytest_cache")


@pytest.fixture(scope="module")
def checkout_copy(tmp_path_factory) -> Path:
    """The repository without results, with `.venv` linked to this environment, the
    folders of the demo's Horovod cells (a README command lists them with `ls`), and an
    earlier study's summary tables beside it (the README's compare.baseline example)."""
    copy = tmp_path_factory.mktemp("readme") / "scalebench"
    shutil.copytree(REPO, copy, ignore=shutil.ignore_patterns(*NOT_COPIED), symlinks=True)
    (copy / ".venv").symlink_to(Path(sys.prefix))
    for framework in ("torch", "tensorflow"):
        for gpus in (1, 2):
            (copy / "results" / "runs" / framework / "horovod" / f"g{gpus}" / "s1").mkdir(parents=True)
    baseline = copy.parent / "before-upgrade" / "results" / "summary"
    baseline.mkdir(parents=True)
    (baseline / "runs.csv").write_text(",".join(RUNS.names) + "\n")
    return copy


def without_report(command: str) -> tuple[str, str | None]:
    """The command without `--report FILE`, and FILE (None when it has none)."""
    words = shlex.split(command)
    if "--report" not in words:
        return command, None
    at = words.index("--report")
    return shlex.join(words[:at] + words[at + 2 :]), words[at + 1]


def test_the_docs_print_snakemake_commands():
    assert len(COMMANDS) >= 8, COMMANDS
    assert any("--executor slurm" in c for c in COMMANDS) and any("--report" in c for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=[c.removeprefix(".venv/bin/snakemake ") for c in COMMANDS])
def test_readme_command_dry_runs_as_printed(checkout_copy, command):
    runnable, report = without_report(command)
    if report is not None:
        assert report.endswith(".html"), command
    result = subprocess.run(
        ["bash", "-c", f"{runnable} -n"],
        cwd=checkout_copy,
        capture_output=True,
        text=True,
        timeout=300,
        env=tool_env(),
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "This was a dry-run" in output, output[-3000:]
    # before any job, the study's bill in one line (config/bill.py), its rows beside the plan
    assert "\nbill: " in f"\n{output}" and (checkout_copy / "results" / "plan" / "bill.csv").is_file(), output[-3000:]
    assert not (checkout_copy / "results" / "data").exists(), "a dry run wrote results"
    if "compare=" in command:
        assert "compare_baseline" in output
    if "$(ls -d results/runs/*/horovod/*/*" in command:
        assert "results/runs/tensorflow/horovod/g2/s1/metrics.jsonl" in output
