"""A rank of one framework never imports the other: each cell's launcher and ranks run with its
framework's own Python (scalebench/environments.py), whose environment has no package of the other.

The cells, launched as the train rule launches them, are test_resume.py's interrupted cells
(paired_cells.RESUMED_CELLS), both attempts (the first from the start to its checkpoint, the resumed
one to the end), trained once per test run for every backend that test resumes; TensorFlow's native
workers are test_tf_training.py's MultiWorkerMirrored reference run, started by local_ranks.py (not
torchrun, which is torch itself). Each attempt's launch line names the framework's Python for the
launcher and for the ranks, and that environment is asked, as the planner asks it (environments.probe,
which imports nothing), whether it holds the other framework.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from conftest import framework_python, read_records
from paired_cells import RESUMED_CELLS, RESUMED_IDS, multiworker_reference, resumed_run
from scalebench import environments

pytestmark = pytest.mark.integration

OTHER = {"torch": "tensorflow", "tensorflow": "torch"}


def launched_pythons(output: str) -> set[str]:
    """The Pythons named in the command launch.py started the ranks with (its first line)."""
    line = next(line for line in output.splitlines() if line.startswith("launch (local): "))
    return {word for word in shlex.split(line.split(": ", 1)[1]) if Path(word).name.startswith("python")}


def assert_ran_in_its_own_environment(framework: str, outputs: dict[str, str]) -> None:
    """Every launch (`outputs`: what each attempt printed) started its launcher and ranks with
    `framework`'s Python, and that environment has the framework and not the other one."""
    python = framework_python(framework)
    for attempt, output in outputs.items():
        assert launched_pythons(output) == {python}, f"{attempt}: {output[:2000]}"
    own = environments.probe(environments.Environment(framework, python))
    other = environments.probe(environments.Environment(OTHER[framework], python))
    assert own.framework and not own.problem, own
    assert not other.framework and not other.problem, f"{OTHER[framework]} is installed in {framework}'s environment"


@pytest.mark.parametrize(("framework", "backend", "gpus", "extra"), RESUMED_CELLS, ids=RESUMED_IDS)
def test_cell_trains_in_its_framework_s_environment_without_the_other(
    prepared_data, tmp_path_factory, framework, backend, gpus, extra
):
    # torchrun, horovod_run.py (horovodrun without its probe of Horovod's extensions) and the ranks
    out = resumed_run(tmp_path_factory, prepared_data, (framework, backend, gpus, extra))
    attempts = {attempt: (out.parent / attempt).read_text() for attempt in ("first-attempt.txt", "launch.txt")}
    assert_ran_in_its_own_environment(framework, attempts)
    _, final, run = read_records(out)
    assert final["status"] == "ok" and run["status"] == "ok"


def test_tensorflow_native_workers_train_without_torch(prepared_data, tmp_path_factory):
    # local_ranks.py and both workers, in TensorFlow's environment (the reference run of test_tf_training.py)
    out = multiworker_reference(tmp_path_factory, prepared_data)
    assert_ran_in_its_own_environment("tensorflow", {"output.txt": (out.parent / "output.txt").read_text()})
    assert "local_ranks.py" in (out.parent / "output.txt").read_text()
    _, final, run = read_records(out)
    assert final["status"] == "ok" and run["status"] == "ok" and run["processes"] == 2
