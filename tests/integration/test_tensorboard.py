"""training.tensorboard: real cells of both frameworks write their epoch records as TensorBoard
curves, read back here with TensorBoard's own reader (in a framework's environment: conftest.read_curves).

The cells are two-rank cells other tests train anyway, with curves and validation each epoch, each
over an earlier run's event file, once per test run: PyTorch DDP's is test_resume.py's
uninterrupted reference, TensorFlow MultiWorkerMirrored's test_tf_training.py's first reference run.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import SCRIPTS, assert_curves_equal_records, framework_python, read_curves, read_records, tool_env
from paired_cells import two_rank_native_cell

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_rank_0_of_a_two_rank_cell_writes_one_curve_per_record_field(prepared_data, tmp_path_factory, framework):
    out = two_rank_native_cell(tmp_path_factory, prepared_data, framework)
    epochs, final, run = read_records(out)
    training = run["training"]
    assert (run["backend"], run["gpus"], run["processes"]) == ("native", 2, 2)
    assert run["settings"]["training"]["tensorboard"] is True and training["eval_every"] == 1
    assert final["status"] == "ok" and [e["epoch"] for e in epochs] == list(range(1, training["epochs"] + 1))
    event_files = list((out / "tensorboard").iterdir())
    # one file: the earlier run's, which the cell was trained over (a retrained cell starts fresh), is gone
    assert len(event_files) == 1 and event_files[0].name.startswith("events.out.tfevents."), event_files
    assert event_files[0].name != "events.out.tfevents.1.an-earlier-run"
    assert_curves_equal_records(out / "tensorboard", epochs)


def test_torch_s_curve_writer_never_imports_tensorflow(tmp_path):
    """A torch rank never imports TensorFlow (train/entry.py), curves on or off: TensorBoard's writer
    would import it, where it is installed beside torch (an environment of both, which config key
    environments.torch may name), only for its file I/O (train/torch/summaries.py). Torch's own
    environment has no TensorFlow: here TensorFlow's packages are put on its path, so the writer could."""
    tensorflow_packages = sorted(Path(framework_python("tensorflow")).parents[1].glob("lib/python3*/site-packages"))
    if not tensorflow_packages:
        pytest.skip("TensorFlow's environment is not installed (SCALEBENCH_FRAMEWORKS=torch,tensorflow ./install.sh)")
    code = f"""
import importlib.util, sys
assert importlib.util.find_spec("tensorflow"), "TensorFlow is installed: the writer could import it"
from scalebench.train.torch.summaries import TorchEpochWriter
writer = TorchEpochWriter({str(tmp_path)!r})
writer.write({{"loss/train": 0.5}}, 1)
writer.close()
print("tensorflow imported:", "tensorflow" in sys.modules)
"""
    path = os.pathsep.join([str(SCRIPTS), *map(str, tensorflow_packages)])  # after torch's own packages
    done = subprocess.run(
        [framework_python("torch"), "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env=tool_env(PYTHONPATH=path),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "tensorflow imported: False", done.stdout[-2000:]
    assert read_curves(tmp_path) == {"loss/train": [(1, 0.5)]}
