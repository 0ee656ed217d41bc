"""The GPU stack check's rules (scalebench/gpu_stack.py) on nodes' and builds' answers: a real H200
recording and composed V100, A100 and H100 nodes read through the nvidia-smi stand-in, with torch
2.13's and TensorFlow 2.21's builds (tests/fixtures/gpu-stack/README.md says which are real)."""

from __future__ import annotations

import json
import os
import sys

import pytest
from conftest import REPO
from scalebench import gpu_stack
from scalebench.cluster import nvidia_smi
from scalebench.gpu_stack import Build, Gpu, Node
from scalebench.records.definitions import GPU_STACK

ANSWERS = REPO / "tests" / "fixtures" / "gpu-stack"
STAND_IN = REPO / "tests" / "fixtures" / "nvidia-smi"
H200 = "h200-driver580-torch2.11cu130"


def node(name: str, monkeypatch: pytest.MonkeyPatch) -> Node:
    """The node `name` as read_node reads it, through the stand-in nvidia-smi first on PATH."""
    monkeypatch.setenv("PATH", f"{STAND_IN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NVIDIA_SMI_RECORDING", name)
    return nvidia_smi.read_node()


def build(name: str) -> Build:
    return Build.from_json(json.loads((ANSWERS / "builds" / f"{name}.json").read_text()))


def recorded_torch_2_11() -> Build:
    """The real H200 node's torch 2.11.0+cu130, from its recorded answers (torch-build.json)."""
    answers = json.loads((ANSWERS / H200 / "torch-build.json").read_text())
    return Build(
        "torch",
        answers["torch"],
        answers["cuda_build"],
        tuple(answers["arch_list"]),
        ".".join(map(str, answers["nccl"])),
        gpus_seen=1 if answers["available"] else 0,
    )


CU130, CU126, TF = "torch-2.13.0+cu130", "torch-2.13.0+cu126", "tensorflow-2.21.0"


def test_the_nodes_answers_are_read_from_nvidia_smi_through_the_stand_in(monkeypatch):
    h200 = node(H200, monkeypatch)  # the real recording's -q header
    assert (h200.driver, h200.cuda, h200.gpus) == ("580.159.04", "13.0", (Gpu(0, "NVIDIA H200", (9, 0)),))
    v100 = node("v100-driver535", monkeypatch)
    assert (v100.driver, v100.cuda) == ("535.183.01", "12.2")
    assert v100.gpus == (Gpu(0, "Tesla V100-SXM2-32GB", (7, 0)),)
    assert [gpu.capability for gpu in node("a100-driver550", monkeypatch).gpus] == [(8, 0), (8, 0)]
    assert len(node("h100-driver580", monkeypatch).gpus) == 4
    # a driver that answers no compute_cap query still lists its GPUs, their capability unknown
    old = node("4xh100", monkeypatch)
    assert [(gpu.index, gpu.capability) for gpu in old.gpus] == [(0, None), (1, None), (2, None), (3, None)]
    assert old.driver is None and "no recording of: -q" in old.reason
    monkeypatch.setenv("PATH", str(REPO / "tests" / "no-such-folder"))
    missing = nvidia_smi.read_node()
    assert missing.gpus == () and "not on this node's PATH" in missing.reason


def test_the_header_of_nvidia_smi_q_gives_the_driver_and_the_cuda_it_runs():
    text = (ANSWERS / H200 / "nvidia-smi-q.txt").read_text()
    assert nvidia_smi.parse_versions(text) == ("580.159.04", "13.0")
    assert nvidia_smi.parse_versions("Driver Version : 470.256.02\nCUDA Version : N/A\n") == ("470.256.02", None)
    assert nvidia_smi.parse_capabilities("0, NVIDIA H200, 9.0\n1, Tesla K80, [N/A]\n") == [
        Gpu(0, "NVIDIA H200", (9, 0)),
        Gpu(1, "Tesla K80", None),
    ]


def test_a_v100_on_torch_cu130_is_refused_naming_sm_70_the_driver_and_the_cu126_install(monkeypatch):
    v100 = node("v100-driver535", monkeypatch)
    found = gpu_stack.problems(v100, build(CU130))
    assert len(found) == 2, found  # the driver runs CUDA 12.2, and no kernel of the build runs on sm_70
    driver, kernels = found
    assert "driver 535.183.01 (CUDA 12.2) runs CUDA up to 12.2" in driver and "580.65.06" in driver
    assert "GPU 0 Tesla V100-SXM2-32GB (compute capability 7.0) has no kernel in torch 2.13.0+cu130" in kernels
    assert "(no sm_70, no PTX at or below compute_70)" in kernels and "no kernel image is available" in kernels
    for sentence in found:
        assert "535.183.01" in sentence and "SCALEBENCH_TORCH_CUDA=cu126 ./install.sh" in sentence, sentence
    assert gpu_stack.fitting_install("torch", v100).command == "SCALEBENCH_TORCH_CUDA=cu126 ./install.sh"
    assert gpu_stack.problems(v100, build(CU126)) == []  # the install it names runs there


def test_an_a100_on_driver_550_is_refused_torch_cu130_and_named_cu126_which_runs_under_minor_compatibility(
    monkeypatch,
):
    a100 = node("a100-driver550", monkeypatch)
    (found,) = gpu_stack.problems(a100, build(CU130))  # sm_80 is in it: only the driver is wrong
    assert "driver 550.54.15 (CUDA 12.4) runs CUDA up to 12.4, but torch 2.13.0+cu130 was built with CUDA 13.0" in found
    assert "GPUs 0,1 NVIDIA A100-SXM4-80GB (compute capability 8.0)" in found
    assert "SCALEBENCH_TORCH_CUDA=cu126 ./install.sh" in found and "under CUDA minor-version compatibility" in found
    cu126 = gpu_stack.fitting_install("torch", a100)
    assert (cu126.cuda, gpu_stack.cuda_fit(cu126.cuda, a100)) == ("12.6", gpu_stack.MINOR)
    # it runs there under minor-version compatibility: a note, not a refusal
    assert gpu_stack.problems(a100, build(CU126)) == []
    (note,) = gpu_stack.notes(a100, build(CU126))
    assert "torch 2.13.0+cu126 (CUDA 12.6) runs on driver 550.54.15 (CUDA 12.4) under CUDA minor-version" in note


def test_an_h100_on_driver_580_runs_torch_cu130_and_the_recorded_h200_its_torch_2_11(monkeypatch):
    h100 = node("h100-driver580", monkeypatch)
    assert gpu_stack.problems(h100, build(CU130)) == [] and gpu_stack.notes(h100, build(CU130)) == []
    assert gpu_stack.fitting_install("torch", h100).command == "./install.sh"  # PyPI's default
    h200, torch_2_11 = node(H200, monkeypatch), recorded_torch_2_11()
    assert torch_2_11.architectures == ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")
    assert gpu_stack.problems(h200, torch_2_11) == [] and gpu_stack.notes(h200, torch_2_11) == []
    # the same build on the V100 of the recording's note: Volta has no kernel in it
    assert "no sm_70" in " ".join(gpu_stack.problems(node("v100-driver535", monkeypatch), torch_2_11))


@pytest.mark.parametrize(
    ("name", "note"),
    [
        ("v100-driver535", "runs on driver 535.183.01 (CUDA 12.2) under CUDA minor-version compatibility"),
        ("a100-driver550", "runs on driver 550.54.15 (CUDA 12.4) under CUDA minor-version compatibility"),
        ("h100-driver580", "runs TensorFlow 2.21.0's compute_90 PTX, compiled by the driver at the first run"),
        (H200, "GPU 0 NVIDIA H200 (compute capability 9.0) runs TensorFlow 2.21.0's compute_90 PTX"),
    ],
)
def test_tensorflow_2_21_runs_on_each_node_with_what_fits_only_in_part_noted(monkeypatch, name, note):
    here = node(name, monkeypatch)
    assert gpu_stack.problems(here, build(TF)) == []
    assert note in " ".join(gpu_stack.notes(here, build(TF)))
    assert gpu_stack.fitting_install("tensorflow", here).command == "SCALEBENCH_TF_CUDA=and-cuda ./install.sh"


def test_tensorflow_on_a_driver_it_cannot_use_is_refused_saying_plainly_that_no_build_fits(monkeypatch):
    v100 = node("v100-driver535", monkeypatch)
    old = Node("470.256.02", "11.4", v100.gpus)
    (found,) = gpu_stack.problems(old, build(TF))
    assert (
        "driver 470.256.02 (CUDA 11.4) runs CUDA up to 11.4, but TensorFlow 2.21.0 was built with CUDA 12.5.1" in found
    )
    assert "no TensorFlow 2.21.0 build this project installs runs on driver 470.256.02" in found
    assert "needs driver 525.60.13 or newer" in found and gpu_stack.fitting_install("tensorflow", old) is None
    # an H100 under a CUDA 12.2 driver would JIT-compile CUDA 12.5's compute_90 PTX: minor compatibility cannot
    h100 = Node("535.183.01", "12.2", node("h100-driver580", monkeypatch).gpus[:1])
    (found,) = gpu_stack.problems(h100, build(TF))
    assert "only by JIT-compiling its compute_90 PTX of CUDA 12.5.1" in found and "535.183.01" in found


@pytest.mark.parametrize(
    ("name", "install"),
    [("v100-driver535", "SCALEBENCH_TORCH_CUDA=cu126 ./install.sh"), ("h100-driver580", "`./install.sh`")],
)
def test_a_cpu_build_on_a_gpu_node_is_refused_naming_the_install_that_fits(monkeypatch, name, install):
    here = node(name, monkeypatch)
    (found,) = gpu_stack.problems(here, Build("torch", "2.13.0+cpu", None))
    assert found.startswith("torch 2.13.0+cpu is a CPU build, but this node has GPU")
    assert here.driver in found and install in found
    assert gpu_stack.problems(Node(reason="no nvidia-smi"), Build("torch", "2.13.0+cpu", None)) == []


def test_a_fitting_build_that_sees_no_gpu_and_two_nccl_libraries_in_one_process_are_named(monkeypatch):
    h100 = node("h100-driver580", monkeypatch)
    unseen = Build("tensorflow", "2.21.0", "12.5.1", build(TF).architectures, gpus_seen=0)
    (found,) = gpu_stack.problems(h100, unseen)
    assert "sees none of this node's GPUs 0,1,2,3 NVIDIA H100 80GB HBM3" in found
    assert "SCALEBENCH_TF_CUDA=and-cuda ./install.sh" in found
    libraries = ("/env/nvidia/nccl/lib/libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libnccl.so.2")
    doubled = Build("torch", "2.13.0+cu130", "13.0", build(CU130).architectures, nccl_files=libraries)
    (found,) = gpu_stack.problems(h100, doubled)
    assert "2 NCCL libraries are loaded in one torch 2.13.0+cu130 process" in found and libraries[1] in found
    once = Build("torch", "2.13.0+cu130", "13.0", build(CU130).architectures, nccl_files=libraries[:1] * 2)
    assert gpu_stack.problems(h100, once) == []


@pytest.mark.parametrize(
    ("architectures", "capability", "runs"),
    [
        (("sm_80",), (8, 6), "sm_80"),  # SASS of the same major, an older minor
        (("sm_86",), (8, 0), None),  # not a newer minor
        (("sm_80", "sm_90"), (10, 0), None),  # nor another major
        (("sm_80", "compute_80"), (9, 0), "compute_80"),  # PTX, compiled for any newer GPU
        (("sm_90a",), (9, 0), "sm_90a"),  # family-specific: exactly its own
        (("sm_90a", "sm_80"), (9, 1), None),
        (("sm_75", "sm_80", "sm_86"), (8, 9), "sm_86"),  # the nearest
    ],
)
def test_a_gpu_runs_sass_of_its_major_at_or_below_its_minor_or_ptx_below_it(architectures, capability, runs):
    assert gpu_stack.kernel_for(architectures, capability) == runs


def test_a_driver_runs_older_cuda_natively_and_newer_minors_of_its_major_under_minor_compatibility():
    driver = Node("550.54.15", "12.4")
    assert gpu_stack.cuda_fit("12.4", driver) == gpu_stack.cuda_fit("11.8", driver) == gpu_stack.NATIVE
    assert gpu_stack.cuda_fit("12.8", driver) == gpu_stack.MINOR
    assert gpu_stack.cuda_fit("13.0", driver) == gpu_stack.TOO_OLD
    assert gpu_stack.cuda_fit("12.8", Node("520.61.05", "12.0")) == gpu_stack.TOO_OLD  # below 525.60.13
    assert gpu_stack.cuda_fit("12.8", Node("560.35.03")) == gpu_stack.UNKNOWN


def test_the_table_of_installs_describes_the_pinned_versions():
    sys.path.insert(0, str(REPO / "tools"))
    from pins import pins_for

    for install in gpu_stack.INSTALLS:
        pinned = pins_for([str(REPO / "envs" / f"{install.framework}.yaml")], "3.11")[install.framework]
        assert install.version == pinned, install


def test_the_report_gives_a_verdict_per_framework_and_gpu_and_fails_on_a_mismatch(monkeypatch):
    h200, a100 = node(H200, monkeypatch), node("a100-driver550", monkeypatch)
    horovod = gpu_stack.Horovod("0.28.1", nccl_built=True, cuda_built=True)
    passing = gpu_stack.report(h200, [recorded_torch_2_11(), Build.from_json(build(TF).to_json())])
    assert not passing.mismatch, passing.lines
    assert passing.lines[0] == "node: driver 580.159.04 (CUDA 13.0), GPU 0 NVIDIA H200 (compute capability 9.0)"
    assert passing.lines[1] == "torch 2.11.0+cu130 (CUDA 13.0) on GPU 0 NVIDIA H200 (compute capability 9.0): ok"
    with_horovod = Build("torch", "2.13.0+cu130", "13.0", build(CU130).architectures, "2.27.7", horovod=horovod)
    failing = gpu_stack.report(a100, [with_horovod])
    assert failing.mismatch
    verdicts = [line for line in failing.lines if " on GPU " in line]
    assert [line.split(": MISMATCH")[0] for line in verdicts] == [
        "torch 2.13.0+cu130 (CUDA 13.0) on GPU 0 NVIDIA A100-SXM4-80GB (compute capability 8.0)",
        "torch 2.13.0+cu130 (CUDA 13.0) on GPU 1 NVIDIA A100-SXM4-80GB (compute capability 8.0)",
    ]
    assert "torch 2.13.0+cu130: Horovod 0.28.1: GPU operations NCCL yes, CUDA yes" in failing.lines
    refused = Build("torch", "2.13.0+cu130", "13.0", ("sm_90",), horovod=gpu_stack.Horovod("0.28.1", refusal="no NCCL"))
    assert gpu_stack.report(h200, [refused]).mismatch  # Horovod without NCCL: its GPU cells are refused
    assert gpu_stack.report(h200, [], {"torch": "it did not run"}).mismatch
    assert gpu_stack.report(h200, []).mismatch  # no framework installed
    nothing = gpu_stack.report(Node(reason="nvidia-smi is not on this node's PATH"), [])
    assert nothing.lines[0].startswith("node: no GPU to check (nvidia-smi is not on this node's PATH)")


def test_a_process_checks_the_gpus_it_sees_and_the_answers_travel_as_json(monkeypatch):
    h100 = node("h100-driver580", monkeypatch)
    assert [gpu.index for gpu in h100.restricted(["2"]).gpus] == [2]
    assert h100.restricted(["GPU-4f1c2a3b"]) == h100 == h100.restricted(None)
    answers = Build("torch", "2.13.0+cu130", "13.0", ("sm_90",), "2.27.7", ("/x/libnccl.so.2",), 4, (), None)
    assert Build.from_json(json.loads(json.dumps(answers.to_json()))) == answers
    with_horovod = Build("tensorflow", "2.21.0", "12.5.1", horovod=gpu_stack.Horovod("0.28.1", True, True))
    assert Build.from_json(json.loads(json.dumps(with_horovod.to_json()))) == with_horovod


def test_run_json_s_gpu_stack_holds_the_defined_fields(monkeypatch):
    h100 = node("h100-driver580", monkeypatch)
    checked = gpu_stack.record(h100, build(TF))
    assert set(checked) == set(GPU_STACK.names) and checked["reason"] is None
    assert checked["capabilities"] == {"0": "9.0", "1": "9.0", "2": "9.0", "3": "9.0"}
    assert checked["driver_cuda"] == "13.0" and checked["architectures"][-1] == "compute_90"
    unchecked = gpu_stack.record(Node(), None, "training.device is cpu")
    assert set(unchecked) == set(GPU_STACK.names) and unchecked["reason"] == "training.device is cpu"
