"""TensorFlow's GPU cells run on their GPUs or fail saying why, as torch's do (tests/unit/train/
test_devices_torch.py): checked with faked device queries in a fresh process of TensorFlow's
environment, since TensorFlow's devices can be set only before its runtime starts. One process
checks every case (a cold TensorFlow import costs seconds)."""

from __future__ import annotations

import json
import subprocess

from conftest import SCRIPTS, cell_settings, framework_python, tool_env

SLURM_JOB = {"SCALEBENCH_EXECUTOR": "slurm"}  # launch.py sets it for the ranks of a SLURM cell

PROBE = """
import json, sys
from scalebench.train.devices import DeviceError
from scalebench.settings import ProcessFacts, RunSettings
from scalebench.train.tf import runtime
tf = runtime.tf
tf.config.experimental.set_memory_growth = lambda gpu, grow: None
tf.config.set_visible_devices = lambda chosen, kind: print(f"configured: {len(chosen)} GPU(s) visible, {', '.join(chosen)}")
for count, ranks, env, settings in json.loads(sys.argv[1]):
    tf.config.list_physical_devices = (
        lambda kind=None, count=count: [f"/physical_device:GPU:{i}" for i in range(count)] if kind == "GPU" else []
    )
    try:
        run = RunSettings.from_json(settings, "d", "o")
        runtime.configure(run, ProcessFacts.of_rank(run, env), ranks - 1, ranks)
    except DeviceError as error:
        print("refused:", error)
    print("--- next case", flush=True)
"""

CASES = [  # (GPUs the process sees, ranks on the node, environment, what it says)
    (0, 1, SLURM_JOB, "refused: this cell is meant for GPUs"),
    (2, 4, {}, "refused: 4 rank(s) on this node need 4 GPUs"),
    (1, 4, {"binding": "node"}, "refused: 4 rank(s) on this node need 4 GPUs"),
    (1, 4, {"binding": "task"}, "configured: 1 GPU(s) visible, /physical_device:GPU:0"),
    (2, 4, {"binding": "task"}, "refused: this task sees 2 GPU(s) under cluster.gpu_binding: task"),
]


def case_input(gpus: int, ranks: int, env: dict) -> list:
    settings = cell_settings("tensorflow", "native", 2)
    settings["gpus_per_node"] = 4
    env = dict(env)
    if env.pop("binding", "node") == "task":
        settings["gpu_binding"] = "task"
        env.update(SLURM_JOB)
    return [gpus, ranks, env, settings]


def test_tensorflow_refuses_like_torch():
    cases = json.dumps([case_input(gpus, ranks, env) for gpus, ranks, env, _ in CASES])
    result = subprocess.run(
        [framework_python("tensorflow"), "-c", PROBE, cases],
        capture_output=True,
        text=True,
        env=tool_env(PYTHONPATH=str(SCRIPTS)),
        timeout=300,
    )
    said = result.stdout.split("--- next case\n")
    assert len(said) == len(CASES) + 1, result.stdout + result.stderr[-2000:]
    for (gpus, ranks, env, expected), output in zip(CASES, said):
        assert expected in output, (gpus, ranks, env, output)
