"""TensorFlow's cell on a real GPU, started through launch.py exactly as the train rule does (PyTorch's:
test_gpu_cells.py). Skipped where TensorFlow sees no GPU; not run where TensorFlow's environment is
not installed (run_tests.sh runs each environment's session it finds)."""

from __future__ import annotations

import json

import pytest
import tensorflow as tf
from conftest import cell_settings, launch_cell

ENVIRONMENT = "tensorflow"

pytestmark = pytest.mark.gpu


def test_tensorflow_trains_on_the_gpu_with_batches_prefetched_to_it(prepared_data, tmp_path):
    if not tf.config.list_physical_devices("GPU"):
        pytest.skip("TensorFlow sees no GPU (its CUDA build or libraries are missing)")
    settings = cell_settings("tensorflow", "native", 1, device="cuda")
    result = launch_cell(settings, prepared_data, tmp_path / "tf", timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    run = json.loads((tmp_path / "tf" / "run.json").read_text())
    assert (
        run["device"] == run["training"]["device"] == "cuda"
        and run["status"] == "ok"
        and run["compute_dtype"] == "float32"
    )
