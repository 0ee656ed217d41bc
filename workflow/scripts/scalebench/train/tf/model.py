"""The UNet in Keras (tf_keras), the same network as torch/model.py (scalebench/architecture.py).

Encoder channels 8-16-32-64-128 (times model.width: architecture.channels), each level two 3x3 convolutions (no bias,
batch norm, ReLU), 2x2 max-pooling between levels; decoder of 2x2 stride-2
transposed convolutions with bias, skip connections by concatenation, the same
double convolution, and a 1x1 head with one output channel (logits).

Differences from PyTorch that do not change the network: tensors are
channels-last (N, H, W, 1) and Keras momentum 0.9 is PyTorch momentum 0.1.
Weights are initialised like PyTorch's defaults (uniform within
1/sqrt(fan_in)), so both frameworks start from the same distribution.

Two products (train/interfaces.py): the Model (build: the UNet and its Adam in the backend's
scope, before a checkpoint restores into them) and the Distributed model (distribute).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import tf_keras as keras

from scalebench import architecture
from scalebench.architecture import BN_EPS, BN_MOMENTUM, CHANNELS
from scalebench.settings import RunSettings
from scalebench.train.faults import EpochDelays
from scalebench.train.interfaces import Backend
from scalebench.train.tf.runtime import Device, Numerics


def _torch_like(fan_in: int) -> dict:
    """Kernel and bias initialisers of PyTorch's Conv2d/ConvTranspose2d: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1 / math.sqrt(fan_in)
    return {
        "kernel_initializer": keras.initializers.VarianceScaling(1 / 3, "fan_in", "uniform"),
        "bias_initializer": keras.initializers.RandomUniform(-bound, bound),
    }


def _double_conv(x, in_channels: int, width: int, batch_norm: bool, name: str):
    for index, channels_in in enumerate((in_channels, width), start=1):
        x = keras.layers.Conv2D(
            width,
            3,
            padding="same",
            use_bias=not batch_norm,
            name=f"{name}_conv{index}",
            **_torch_like(channels_in * 9),
        )(x)
        if batch_norm:
            x = keras.layers.BatchNormalization(epsilon=BN_EPS, momentum=1 - BN_MOMENTUM, name=f"{name}_bn{index}")(x)
        x = keras.layers.ReLU(name=f"{name}_relu{index}")(x)
    return x


def build_unet(image_size: tuple[int, int], batch_norm: bool = True, channels: tuple[int, ...] = CHANNELS):
    """A Keras functional UNet for (height, width, 1) inputs; returns logits (height, width, 1)."""
    height, width = image_size
    inputs = keras.Input((height, width, 1), name="image")
    x, previous, skips = inputs, 1, []
    for level, width_out in enumerate(channels):
        x = _double_conv(x, previous, width_out, batch_norm, f"down{level}")
        previous = width_out
        if level < len(channels) - 1:
            skips.append(x)
            x = keras.layers.MaxPool2D(2, name=f"pool{level}")(x)
    for level, width_out in enumerate(reversed(channels[:-1])):
        # PyTorch takes a transposed convolution's fan-in from its output channels.
        up = keras.layers.Conv2DTranspose(width_out, 2, strides=2, name=f"up{level}", **_torch_like(width_out * 4))(x)
        x = keras.layers.Concatenate(name=f"concat{level}")([up, skips.pop()])
        x = _double_conv(x, 2 * width_out, width_out, batch_norm, f"merge{level}")
        previous = width_out
    logits = keras.layers.Conv2D(1, 1, name="head", **_torch_like(previous))(x)
    return keras.Model(inputs, logits, name="unet")


def parameter_count(model) -> int:
    return int(sum(int(v.shape.num_elements()) for v in model.trainable_variables))


def gradient_bytes(model) -> int:
    """Bytes of the gradients a step reduces: each trainable variable's, in its own type (float32
    under mixed precision too: Keras keeps the variables in float32)."""
    return int(sum(int(v.shape.num_elements()) * v.dtype.size for v in model.trainable_variables))


@dataclass(frozen=True)
class Model:
    """The UNet and its optimizer as built (its slots too), and whether float16 steps scale the loss."""

    network: keras.Model
    optimizer: keras.optimizers.Optimizer
    loss_scaled: bool

    def fields(self) -> dict[str, int]:
        return {"parameters": parameter_count(self.network), "gradient_bytes": gradient_bytes(self.network)}


def build(run: RunSettings, device: Device, numerics: Numerics, backend: Backend) -> Model:
    """The UNet at model.width and its Adam (the loop sets each epoch's rate) in the backend's scope,
    under the Keras policy of training.precision."""
    if numerics.policy:
        keras.mixed_precision.set_global_policy(numerics.policy)
    with backend.scope():
        network = build_unet(run.image_size, run.training.batch_norm, architecture.channels(run.model_width))
        optimizer = keras.optimizers.Adam(learning_rate=run.training.base_lr, epsilon=1e-8)
        loss_scaled = numerics.policy == "mixed_float16"
        if loss_scaled:
            optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
        optimizer.build(network.trainable_variables)  # slots exist before a restore or a broadcast
    return Model(network, optimizer, loss_scaled)


@dataclass(frozen=True)
class Distributed:
    """The model as the backend distributed it (the same objects: a strategy created every variable
    with rank 0's value, Horovod broadcast them)."""

    network: keras.Model
    optimizer: keras.optimizers.Optimizer
    loss_scaled: bool

    @property
    def wrapped(self) -> keras.Model:
        """The model as the backend returned it (the collective benchmark's), the one that trains."""
        return self.network


def distribute(run: RunSettings, model: Model, backend: Backend, marks, delays: EpochDelays) -> Distributed:
    """The model handed to the backend, after a restore (so rank 0's state is shared). The marks and
    the test faults' delays live in the steps' graph (steps.py), not here."""
    network, optimizer = backend.distribute(model.network, model.optimizer, marks)
    return Distributed(network, optimizer, model.loss_scaled)
