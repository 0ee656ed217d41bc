"""A rank of one framework never imports the other: each cell trains with the other one unimportable.

The cells launched as the train rule launches them are test_resume.py's interrupted cells
(paired_cells.RESUMED_CELLS), both attempts (the first from the start to its checkpoint, the resumed
one to the end) with the other framework blocked, trained once per test run for every backend that
test resumes; TensorFlow's native rank, started as srun starts it, is test_tf_training.py's bf16
device cell.
"""

from __future__ import annotations

import pytest
from conftest import read_records
from paired_cells import RESUMED_CELLS, RESUMED_IDS, bf16_rank_without_torch, resumed_run

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("framework", "backend", "gpus", "extra"), RESUMED_CELLS, ids=RESUMED_IDS)
def test_cell_trains_with_the_other_framework_unimportable(
    prepared_data, tmp_path_factory, framework, backend, gpus, extra
):
    # torchrun and horovod_run.py (horovodrun without its probe of Horovod's extensions) import neither
    # framework's training code; the ranks inherit PYTHONPATH
    out = resumed_run(tmp_path_factory, prepared_data, (framework, backend, gpus, extra))
    for attempt in ("first-attempt.txt", "launch.txt"):
        assert "is blocked for this test" not in (out.parent / attempt).read_text(), attempt
    _, final, run = read_records(out)
    assert final["status"] == "ok" and run["status"] == "ok"


def test_tensorflow_native_rank_trains_without_torch(prepared_data, tmp_path_factory):
    # The local launcher of TensorFlow native cells is torchrun, which is torch itself: the one rank
    # started directly, as srun starts it, with torch unimportable (the device cell of
    # test_tf_training.py's bf16 test, trained once per run for both)
    out = bf16_rank_without_torch(tmp_path_factory, prepared_data, "device")
    assert "is blocked for this test" not in (out.parent / "output.txt").read_text()
    _, final, run = read_records(out)
    assert final["status"] == "ok" and run["status"] == "ok"
