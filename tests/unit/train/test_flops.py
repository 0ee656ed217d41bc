"""Model FLOPs from the architecture agree with PyTorch's own counter."""

import pytest
import torch
from scalebench.train.flops import forward_flops, mfu, peak_tflops, train_flops_per_image
from scalebench.train.torch.model import UNet
from torch.utils.flop_counter import FlopCounterMode


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


def test_mfu_uses_the_longest_matching_device_name():
    table = {"H100": {"fp32": 67, "bf16": 989}, "H100 PCIe": {"fp32": 51}}
    assert peak_tflops("NVIDIA H100 PCIe", "fp32", table) == 51
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16", table) == 989
    assert peak_tflops("cpu (x86_64)", "fp32", table) is None
    assert mfu(1000, 10**9, None, 1) is None


@pytest.mark.parametrize("gpus", [1, 2, 8])
def test_mfu_is_per_gpu_whatever_the_cell_size(gpus):
    # every GPU of the cell runs 1000 images/s at 1 GFLOP each on a 10 TFLOP/s device: 10%
    assert mfu(1000 * gpus, 10**9, 10, gpus) == pytest.approx(0.1)
