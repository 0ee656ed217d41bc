"""A rank of one framework never imports the other: each cell trains with the other one unimportable."""

from __future__ import annotations

import subprocess

import pytest
from conftest import cell_settings, launch_cell, rank_command, read_records, tool_env

pytestmark = pytest.mark.integration

OTHER = {"torch": ["tensorflow", "tf_keras"], "tensorflow": ["torch"]}


def blocked_path(tmp_path, framework: str) -> str:
    """A folder that shadows the other framework's packages with ones that refuse to import."""
    folder = tmp_path / "blocked"
    for package in OTHER[framework]:
        (folder / package).mkdir(parents=True)
        (folder / package / "__init__.py").write_text(f"raise ImportError('{package} is blocked for this test')\n")
    return str(folder)


@pytest.mark.parametrize(
    ("framework", "backend"), [("torch", "native"), ("torch", "horovod"), ("tensorflow", "horovod")]
)
def test_cell_trains_with_the_other_framework_unimportable(prepared_data, tmp_path, framework, backend):
    # torchrun and horovodrun import neither framework's training code; the ranks inherit PYTHONPATH
    settings = cell_settings(framework, backend, 2, epochs=1)
    out = tmp_path / "cell"
    result = launch_cell(settings, prepared_data, out, PYTHONPATH=blocked_path(tmp_path, framework))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    _, final, run = read_records(out)
    assert final["status"] == "ok" and run["status"] == "ok"


def test_tensorflow_native_rank_trains_without_torch(prepared_data, tmp_path):
    # The local launcher of TensorFlow native cells is torchrun, which is torch itself: start the
    # one rank directly, as srun starts it on a cluster.
    settings = cell_settings("tensorflow", "native", 1, epochs=1)
    out = tmp_path / "cell"
    env = tool_env(PYTHONPATH=blocked_path(tmp_path, "tensorflow"))
    result = subprocess.run(
        rank_command(settings, prepared_data, out), capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    _, final, run = read_records(out)
    assert final["status"] == "ok" and run["status"] == "ok"
