"""The GPU stack check on a node whose nvidia-smi is the stand-in answering as a recorded node
(tests/fixtures/gpu-stack), with this machine's installed framework environments: a GPU cell's
real torch rank refuses a build the node cannot run before its first step, and
workflow/scripts/check_stack.py gives a verdict per framework and GPU and fails on a mismatch."""

from __future__ import annotations

import functools
import json
import os
import subprocess

import pytest
from conftest import PYTHON, REPO, SCRIPTS, assert_refused, cell_settings, launch_cell, tool_env
from scalebench import environments, gpu_stack

pytestmark = pytest.mark.integration

STAND_IN = REPO / "tests" / "fixtures" / "nvidia-smi"
CHECK = str(SCRIPTS / "check_stack.py")
V100 = "GPU 0 Tesla V100-SXM2-32GB (compute capability 7.0)"


def as_node(name: str) -> dict[str, str]:
    """The variables that make nvidia-smi answer as the recorded node `name`."""
    return {"PATH": f"{STAND_IN}{os.pathsep}{os.environ['PATH']}", "NVIDIA_SMI_RECORDING": name}


@functools.cache
def installed_build(framework: str) -> gpu_stack.Build:
    """`framework`'s build as its environment answers (check_stack.py --build-answers)."""
    build, why = gpu_stack.ask_build(environments.resolve(framework), CHECK)
    assert build is not None, why
    return build


def needs_cpu_torch() -> gpu_stack.Build:
    if "torch" not in environments.installed_frameworks():
        pytest.skip("torch's environment is not installed")
    build = installed_build("torch")
    if build.cuda is not None:
        pytest.skip(f"torch's environment holds a CUDA build ({build.version}): these tests fake a node for a CPU one")
    return build


def test_a_gpu_cell_of_a_cpu_build_on_the_v100_node_ends_refused_naming_gpu_driver_build_and_install(
    tmp_path, prepared_data
):
    torch = needs_cpu_torch()
    settings = cell_settings("torch", "native", 1, device="cuda", epochs=1, collectives={"budget_s": 0})
    out = tmp_path / "cell"
    env = as_node("v100-driver535") | {"SCALEBENCH_LOCAL_POOL": str(tmp_path / "pool")}
    result = launch_cell(settings, prepared_data, out, timeout=300, **env)
    said = f"{torch.label} is a CPU build, but this node has {V100} with driver 535.183.01 (CUDA 12.2)"
    assert_refused(result, out, said)  # status refused, the reason in run.json, no epoch
    reason = json.loads((out / "run.json").read_text())["reason"]
    assert "GpuStackMismatch: the GPU stack check refuses this cell before its first step" in reason
    assert "`SCALEBENCH_TORCH_CUDA=cu126 ./install.sh` (torch 2.13.0 built with CUDA 12.6" in reason
    # the stack check's message, not the "sees none" the rank said before it
    assert "sees none on this node" not in result.stdout + result.stderr


def test_a_tensorflow_gpu_cell_without_cudas_libraries_on_the_v100_node_ends_refused_naming_the_install(
    tmp_path, prepared_data
):
    """PyPI's TensorFlow is a CUDA 12 build whose CUDA libraries come with and-cuda: without them it
    sees no GPU, and the rank says why and what installs them, not "sees none"."""
    if "tensorflow" not in environments.installed_frameworks():
        pytest.skip("TensorFlow's environment is not installed")
    build = installed_build("tensorflow")
    if build.cuda_libraries:
        pytest.skip("TensorFlow's environment holds NVIDIA's CUDA libraries: it would see the faked node's GPU")
    settings = cell_settings("tensorflow", "native", 1, device="cuda", epochs=1, collectives={"budget_s": 0})
    out = tmp_path / "cell"
    env = as_node("v100-driver535") | {"SCALEBENCH_LOCAL_POOL": str(tmp_path / "pool")}
    result = launch_cell(settings, prepared_data, out, timeout=300, **env)
    said = f"{build.label} (CUDA {build.cuda}) sees none of this node's {V100} under driver 535.183.01 (CUDA 12.2)"
    assert_refused(result, out, said)
    reason = json.loads((out / "run.json").read_text())["reason"]
    assert "`SCALEBENCH_TF_CUDA=and-cuda ./install.sh`" in reason, reason
    assert "sees none on this node" not in result.stdout + result.stderr


def test_the_check_command_gives_a_verdict_per_framework_and_gpu_and_fails_on_a_mismatch():
    torch = needs_cpu_torch()
    done = subprocess.run(
        [PYTHON, CHECK], capture_output=True, text=True, timeout=600, env=tool_env(**as_node("v100-driver535"))
    )
    said, lines = done.stdout + done.stderr, done.stdout.splitlines()

    def verdict(label: str) -> str:
        found = [line for line in lines if line.startswith(f"{label} on {V100}: ")]
        assert len(found) == 1, said
        return found[0]

    assert done.returncode == 1, said
    assert lines[0] == f"node: driver 535.183.01 (CUDA 12.2), {V100}", said
    torch_verdict = verdict(f"{torch.label} (a CPU build)")
    assert f"MISMATCH: {torch.label} is a CPU build" in torch_verdict and "SCALEBENCH_TORCH_CUDA=cu126" in torch_verdict
    assert any(line.startswith(f"{torch.label}: Horovod") for line in lines), said
    if "tensorflow" in environments.installed_frameworks():
        tensorflow = installed_build("tensorflow")  # its environment's own answers, asked by the command too
        tensorflow_verdict = verdict(f"{tensorflow.label} (CUDA {tensorflow.cuda})")
        if not tensorflow.cuda_libraries:  # PyPI's CUDA 12 build without NVIDIA's libraries sees no GPU
            assert "MISMATCH" in tensorflow_verdict and "SCALEBENCH_TF_CUDA=and-cuda ./install.sh" in tensorflow_verdict
        assert any(line.startswith(f"{tensorflow.label}: Horovod") for line in lines), said


def test_the_check_command_on_a_node_without_gpus_says_there_is_nothing_to_check(tmp_path):
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")  # a driver that lists no GPU
    (tmp_path / "nvidia-smi").chmod(0o755)
    env = tool_env(PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run([PYTHON, CHECK], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.startswith("node: no GPU to check (nvidia-smi lists no GPU on this node)")
