"""A rank of one framework never imports the other: each cell trains with the other one unimportable.

The cells launched as the train rule launches them are test_resume.py's interrupted cells
(paired_cells.RESUMED_CELLS), both attempts (the first from the start to its checkpoint, the resumed one to the end) with the other
framework blocked, trained once per test run for every backend that test resumes.
"""

from __future__ import annotations

import subprocess

import pytest
from conftest import cell_settings, rank_command, read_records, tool_env
from paired_cells import RESUMED_CELLS, RESUMED_IDS, blocked_path, resumed_run

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("framework", "backend", "gpus", "extra"), RESUMED_CELLS, ids=RESUMED_IDS)
def test_cell_trains_with_the_other_framework_unimportable(
    prepared_data, tmp_path_factory, framework, backend, gpus, extra
):
    # torchrun and horovodrun import neither framework's training code; the ranks inherit PYTHONPATH
    out = resumed_run(tmp_path_factory, prepared_data, (framework, backend, gpus, extra))
    for attempt in ("first-attempt.txt", "launch.txt"):
        assert "is blocked for this test" not in (out.parent / attempt).read_text(), attempt
    _, final, run = read_records(out)
    assert final["status"] == "ok" and run["status"] == "ok"


def test_tensorflow_native_rank_trains_without_torch(prepared_data, tmp_path):
    # The local launcher of TensorFlow native cells is torchrun, which is torch itself: start the
    # one rank directly, as srun starts it on a cluster.
    settings = cell_settings("tensorflow", "native", 1, epochs=1)
    out = tmp_path / "cell"
    env = tool_env(PYTHONPATH=blocked_path(tmp_path / "blocked", "tensorflow"))
    result = subprocess.run(
        rank_command(settings, prepared_data, out), capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    _, final, run = read_records(out)
    assert final["status"] == "ok" and run["status"] == "ok"
