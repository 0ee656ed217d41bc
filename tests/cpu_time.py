"""The CPU time each test used: its own process's and that of the subprocesses it waited for (the
ranks it trained, the Snakemake it ran), setup and teardown included. On this suite's machines every
core is busy for most of a run, so a test's wall time says as much about its neighbours as about
itself; its CPU time is its cost, whatever the load. A run that asks for --durations also gets the
25 tests that used the most CPU, and the total. A shared study (made_once) is charged to the test that
made it; SLURM's daemons and jobs are no test's subprocesses, so a cluster test's figure is its client
side only. tests/conftest.py imports the hooks."""

from __future__ import annotations

import resource

import pytest

PROPERTY = "cpu_s"  # the test's teardown report carries it (user_properties cross pytest-xdist's workers)
STARTED = pytest.StashKey[float]()
SHOWN = 25
_measured: dict[str, float] = {}  # the run's main process: node id -> CPU seconds


def cpu_seconds() -> float:
    """This process's CPU time and its waited-for descendants', user and system."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[STARTED] = cpu_seconds()  # before the test's fixtures are set up


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    if call.when == "teardown" and STARTED in item.stash:
        outcome.get_result().user_properties.append((PROPERTY, round(cpu_seconds() - item.stash[STARTED], 2)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "teardown":
        for name, value in report.user_properties:
            if name == PROPERTY:
                _measured[report.nodeid] = value


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or config.option.durations is None or not _measured:
        return
    total, shown = sum(_measured.values()), min(SHOWN, len(_measured))
    terminalreporter.write_sep("=", f"most CPU: {shown} of {len(_measured)} tests, {total:.0f} CPU-s in all")
    for nodeid, seconds in sorted(_measured.items(), key=lambda item: -item[1])[:shown]:
        terminalreporter.write_line(f"{seconds:8.1f} CPU-s  {nodeid}")
