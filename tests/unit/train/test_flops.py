"""Model FLOPs from the architecture agree with PyTorch's own counter."""

import pytest
import torch
from scalebench.train.flops import forward_flops, mfu, peak_fields, peak_tflops, precision_key, train_flops_per_image
from scalebench.train.torch.model import UNet
from torch.utils.flop_counter import FlopCounterMode

ENVIRONMENT = "torch"


@pytest.mark.parametrize("size", [(32, 48), (96, 128)])
def test_flops_match_torch_flop_counter(size):
    model = UNet()
    image = torch.zeros(1, 1, *size)
    with FlopCounterMode(display=False) as forward:
        model(image)
    with FlopCounterMode(display=False) as both:
        model(image).sum().backward()
    assert forward_flops(*size)[0] == forward.get_total_flops()
    assert train_flops_per_image(*size) == both.get_total_flops()


def test_mfu_uses_the_longest_matching_device_model():
    table = {"H100": {"fp32": 67, "bf16": 989}, "H100 PCIe": {"fp32": 51}}
    assert peak_tflops("NVIDIA H100 PCIe", "fp32", table) == 51
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16", table) == 989
    assert peak_tflops("cpu (x86_64)", "fp32", table) is None
    assert mfu(1000, 10**9, None, 1) is None


@pytest.mark.parametrize("gpus", [1, 2, 8])
def test_mfu_is_per_gpu_whatever_the_cell_size(gpus):
    # every GPU of the cell runs 1000 images/s at 1 GFLOP each on a 10 TFLOP/s device: 10%
    assert mfu(1000 * gpus, 10**9, 10, gpus) == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("autocast", "tf32", "key"),
    [(None, False, "fp32"), (None, True, "tf32"), ("bfloat16", True, "bf16"), ("float16", False, "fp16")],
)
def test_the_peak_is_the_precision_actually_used(autocast, tf32, key):
    assert precision_key(autocast, tf32) == key


def test_default_peaks_tell_h100_variants_apart_and_leave_unknowns_empty(schema, capsys):
    table = schema["properties"]["cluster"]["properties"]["peak_tflops"]["default"]
    assert peak_fields("NVIDIA H100 PCIe", True, "tf32", table) == {
        "peak_device": "H100 PCIe",
        "peak_precision": "tf32",
        "peak_tflops": 378,
    }
    assert peak_fields("NVIDIA H100 80GB HBM3", True, "bf16", table)["peak_tflops"] == 989.4
    assert peak_fields("NVIDIA H100 NVL", True, "fp32", table)["peak_device"] == "H100 NVL"
    assert peak_fields("NVIDIA A100-SXM4-80GB", True, "tf32", table)["peak_tflops"] == 156
    assert capsys.readouterr().out == ""
    assert peak_fields("Tesla V100-SXM2-32GB", True, "bf16", table)["peak_tflops"] is None  # V100 has no bf16
    assert "no bf16 peak for V100" in capsys.readouterr().out
    assert peak_fields("NVIDIA B200", True, "bf16", table)["peak_tflops"] is None
    assert "no entry matches 'NVIDIA B200'" in capsys.readouterr().out
    assert peak_fields("cpu (x86_64)", False, "fp32", table)["peak_tflops"] is None
    assert capsys.readouterr().out == ""  # a CPU has no peak here, and that is no surprise
