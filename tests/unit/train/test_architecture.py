"""The UNet's numbers without a framework (scalebench/architecture.py): widths, the convolutions'
outputs a backward pass keeps, the memory floor that refuses a width, and the time a width asks for."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_config
from scalebench import architecture
from scalebench import config as sb_config
from scalebench.config.resources import runtime_minutes
from scalebench.train import flops
from scalebench.train.torch.model import UNet

ENVIRONMENT = "torch"


@pytest.mark.parametrize("width", [0, -1, 1.5, "2"])
def test_a_width_that_is_not_a_whole_number_of_at_least_one_is_refused(width):
    with pytest.raises(ValueError, match="model.width must be a whole number of at least 1"):
        architecture.channels(width)


@pytest.mark.parametrize("width", [1, 2])
def test_the_convolution_outputs_are_every_convolutions_output_in_a_real_forward(width):
    model = UNet(channels=architecture.channels(width))
    seen = []
    for module in model.modules():
        if isinstance(module, torch.nn.Conv2d | torch.nn.ConvTranspose2d):
            module.register_forward_hook(lambda _, __, output: seen.append(output[0].numel()))
    with torch.no_grad():
        model(torch.zeros(1, 1, 32, 48))
    assert sum(seen) == architecture.convolution_outputs(32, 48, width)


def test_the_memory_floor_is_the_training_state_and_the_batchs_convolution_outputs():
    params, outputs = architecture.parameter_count(4), architecture.convolution_outputs(64, 64, 4)
    assert architecture.memory_floor_bytes(4, 8, (64, 64), 2) == 16 * params + 8 * outputs * 2
    assert architecture.memory_floor_bytes(4, 8, (64, 64), 4, shards=4) == 16 * params // 4 + 8 * outputs * 4


def test_the_time_request_grows_with_the_models_flops_and_reads_steps_not_epochs_alone(schema):
    def minutes(matrix=None, training=None, time=None) -> int:
        config = tiny_config(training={"epochs": 10, **(training or {})}, cluster={"time": time or {}})
        config["matrix"].update(matrix or {})
        resolved = sb_config.validate(config, schema)
        return {c.path: runtime_minutes(resolved, c) for c in sb_config.cells(resolved)}

    plain = {"base_min": 10, "per_epoch_min": 2, "floor_min": 1}
    assert minutes(time=plain)["torch/native/g2/s1"] == 10 + 2 * 10 / 2  # today's formula, unchanged
    wide = minutes({"model_width": [1, 4]}, time=plain)
    assert wide["torch/native/width1/g2/s1"] == 20 and wide["torch/native/width4/g2/s1"] == 10 + 10 * 16
    # the width's factor is its model FLOPs over width 1's, within half a percent
    ratio = flops.train_flops_per_image(768, 1024, architecture.channels(4)) / flops.train_flops_per_image(768, 1024)
    assert ratio == pytest.approx(16, rel=0.005)
    # fixed steps: the same request at every GPU count, growing with the steps
    steps = {**plain, "per_step_min": 0.5}
    fixed = minutes(training={"steps_per_epoch": 6}, time=steps)
    assert fixed["torch/native/g1/s1"] == fixed["torch/native/g2/s1"] == 10 + 0.5 * 6 * 10
    assert minutes(training={"steps_per_epoch": 60}, time=steps)["torch/native/g2/s1"] == 10 + 0.5 * 60 * 10
    # Horovod's accumulated batches make a step longer
    passes = minutes(
        {"backends": ["horovod"]}, {"steps_per_epoch": 6, "horovod": {"backward_passes_per_step": 2}}, steps
    )
    assert passes["torch/horovod/g2/s1"] == 10 + 0.5 * 6 * 2 * 10
