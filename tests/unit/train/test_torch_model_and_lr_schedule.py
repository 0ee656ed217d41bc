"""The PyTorch UNet's shape contract and the shared learning-rate rule."""

import pytest
import torch
from conftest import training_settings
from scalebench.train.lr_schedule import learning_rate, scaled_lr
from scalebench.train.torch.model import UNet, parameter_count

ENVIRONMENT = "torch"

TRAINING = {"base_lr": 0.001, "lr_scaling": "linear", "warmup_epochs": 0, "decay_every": 0, "decay_factor": 0.5}


def test_unet_keeps_the_image_size_and_has_one_logit_channel():
    model = UNet()
    assert model(torch.zeros(2, 1, 96, 128)).shape == (2, 1, 96, 128)


def test_unet_parameter_count_is_fixed_by_the_architecture():
    # 8-16-32-64-128 encoder, bias-free convs with batch norm, transposed-conv decoder, 1x1 head.
    assert parameter_count(UNet()) == 486409
    # Without batch norm the convs get their bias back (used by the backend-parity test).
    assert parameter_count(UNet(batch_norm=False)) == 486409 - 2 * sum(
        2 * c for c in (8, 16, 32, 64, 128, 8, 16, 32, 64)
    ) + 2 * sum(c for c in (8, 16, 32, 64, 128, 8, 16, 32, 64))


@pytest.mark.parametrize(("rule", "expected"), [("linear", 0.008), ("sqrt", 0.001 * 8**0.5), ("none", 0.001)])
def test_lr_scales_with_the_replicas(rule, expected):
    assert scaled_lr(training_settings(**{**TRAINING, "lr_scaling": rule}), 8) == pytest.approx(expected)


def test_warmup_then_step_decay():
    training = training_settings(**{**TRAINING, "warmup_epochs": 2, "decay_every": 3, "decay_factor": 0.1})
    rates = [learning_rate(epoch, training, 4) for epoch in range(8)]
    assert rates[:2] == pytest.approx([0.0025, 0.004])
    assert rates[2:5] == pytest.approx([0.004] * 3)
    assert rates[5:8] == pytest.approx([0.0004] * 3)
