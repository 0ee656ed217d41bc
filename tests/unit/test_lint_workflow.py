"""tools/lint_workflow.py accepts the train rules' missing conda environment and nothing else."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO, tool_env

sys.path.insert(0, str(REPO / "tools"))
from lint_workflow import unexpected_lints  # noqa: E402

SOFTWARE = """Lints for rule {rule} (line 4, /x/rules/train.smk):
    * Specify a conda environment or container for each rule.:
      This way, the used software for each specific step is documented, and the
      workflow can be executed on any machine without prerequisites.
"""


def test_the_train_rules_may_lack_a_conda_environment():
    assert unexpected_lints(SOFTWARE.format(rule="train") + SOFTWARE.format(rule="train_variant")) == []


def test_any_other_rule_or_lint_is_reported():
    other_rule = SOFTWARE.format(rule="collect_runs")
    other_lint = """Lints for rule train (line 4, /x/rules/train.smk):
    * Migrate long run directives into scripts or notebooks.:
      Long run directives hamper workflow readability.
Lints for snakefile /x/Snakefile:
    * Absolute path "/tmp" in line 3:
      Do not define absolute paths inside of the workflow.
"""
    assert unexpected_lints(other_rule) == ["collect_runs: Specify a conda environment or container for each rule."]
    assert unexpected_lints(other_lint) == [
        "train: Migrate long run directives into scripts or notebooks.",
        'snakefile: Absolute path "/tmp" in line 3',
    ]


def test_the_workflow_lints_clean_but_for_the_accepted_lint():
    result = subprocess.run(
        [sys.executable, str(REPO / "tools/lint_workflow.py")], cwd=REPO, capture_output=True, text=True, env=tool_env()
    )
    assert result.returncode == 0, result.stderr[-2000:]
