"""tools/mutants.py's planted faults still plant in this checkout: a refactor that moves a mutant's
code fails here, in the fast tier, instead of leaving the suite's power table to a mutant that no
longer plants (the mutants' test runs are slow and run only when the suite's structure changes)."""

from __future__ import annotations

import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "tools"))
from mutants import MUTANTS, Mutant, Site, planting, problems  # noqa: E402


def test_every_mutant_plants_here_and_names_tests_that_exist():
    assert problems(REPO) == []


def test_mutant_names_are_distinct():
    names = [mutant.name for mutant in MUTANTS]
    assert len(set(names)) == len(names)


def mutant(*sites: Site, tests: tuple[str, ...] = ("tests",)) -> Mutant:
    return Mutant("m", "a fault", sites, tests)


def test_the_first_site_found_once_applies(tmp_path):
    (tmp_path / "old.py").write_text("x = 1\n")
    (tmp_path / "new.py").write_text("y = 1\ny = 1\n")  # twice: ambiguous, passed over
    sites = (Site("gone.py", "x = 1", "x = 2"), Site("new.py", "y = 1", "y = 2"), Site("old.py", "x = 1", "x = 2"))
    assert planting(tmp_path, mutant(*sites)) == ("old.py", "x = 2\n")


def test_a_mutant_no_site_holds_is_a_problem_naming_each_site(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "tests").mkdir()
    found = problems(tmp_path, (mutant(Site("a.py", "x = 3", "x = 2"), Site("b.py", "x = 1", "x = 2")),))
    assert len(found) == 1 and "a.py holds it 0 times" in found[0] and "no b.py" in found[0]


@pytest.mark.parametrize(
    ("new", "tests", "problem"),
    [("x = (", ("tests",), "unparsable"), ("x = 2", ("tests", "tests/test_gone.py"), "test_gone.py")],
)
def test_an_unparsable_plant_or_a_missing_test_is_a_problem(tmp_path, new, tests, problem):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "tests").mkdir()
    found = problems(tmp_path, (mutant(Site("a.py", "x = 1", new), tests=tests),))
    assert len(found) == 1 and problem in found[0]
