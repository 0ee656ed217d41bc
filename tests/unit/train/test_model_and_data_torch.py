"""The PyTorch UNet is the architecture's (scalebench/architecture.py), as the Keras one is
(test_model_and_data_tensorflow.py, which holds it tensor for tensor to this one)."""

from __future__ import annotations

import pytest
import torch
from conftest import configured_image_size
from scalebench import architecture
from scalebench.train.torch import model as torch_model

ENVIRONMENT = "torch"


@pytest.mark.parametrize("batch_norm", [True, False])
def test_pytorch_unet_has_the_architecture_s_parameter_count_and_output_shape(batch_norm):
    height, width = configured_image_size()
    torch_unet = torch_model.UNet(batch_norm=batch_norm)
    assert torch_model.parameter_count(torch_unet) == architecture.parameter_count(1, batch_norm)
    if batch_norm:
        assert torch_model.parameter_count(torch_unet) == 486409
    # channels first (Keras', channels last: (2, height, width, 1))
    assert tuple(torch_unet(torch.zeros(2, 1, height, width)).shape) == (2, 1, height, width)


@pytest.mark.parametrize(("width", "millions"), [(1, 0.49), (4, 7.8), (16, 124)])
def test_pytorch_builds_the_architecture_s_unet_at_every_model_width(width, millions):
    torch_unet = torch_model.UNet(channels=architecture.channels(width))
    count = architecture.parameter_count(width)
    assert torch_model.parameter_count(torch_unet) == count
    assert count == pytest.approx(millions * 1e6, rel=0.02)
    assert torch_model.gradient_bytes(torch_unet) == architecture.gradient_bytes(width) == 4 * count


def test_batch_norm_layers_update_their_statistics_as_the_architecture_says():
    # PyTorch weighs the new batch's value by momentum (Keras the old running value: 1 - this)
    torch_bn = [m for m in torch_model.UNet().modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(torch_bn) == 18
    assert {(m.momentum, m.eps) for m in torch_bn} == {(0.1, 1e-5)} == {(architecture.BN_MOMENTUM, architecture.BN_EPS)}
