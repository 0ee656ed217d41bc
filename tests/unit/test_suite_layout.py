"""The suite collects as one session: pytest's default import mode imports each test module by its
basename, so two test files of one name in different folders stop the whole run with an import
file mismatch (the unit tier alone does not see a clash with an integration test)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def test_no_two_test_modules_share_a_name():
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
