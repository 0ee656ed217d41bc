"""The UNet in PyTorch (scalebench/architecture.py); tf/model.py builds the same network in Keras.
Two products (train/interfaces.py): the Model (build: the UNet and its Adam, before a checkpoint
restores into them) and the Distributed model (distribute: as the backend wrapped it).

Encoder channels 8-16-32-64-128 (times model.width: architecture.channels), each level two 3x3 convolutions (no bias,
batch norm, ReLU), 2x2 max-pooling between levels; decoder of 2x2 stride-2
transposed convolutions, skip connections by concatenation, the same double
convolution, and a 1x1 head with one output channel (logits).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from scalebench import architecture
from scalebench.architecture import BN_EPS, BN_MOMENTUM, CHANNELS
from scalebench.settings import RunSettings
from scalebench.train.faults import EpochDelays
from scalebench.train.interfaces import Backend
from scalebench.train.torch import compiled, step_timing
from scalebench.train.torch.runtime import LAYOUT, Device, Numerics


class DoubleConv(nn.Sequential):
    def __init__(self, in_channels: int, out_channels: int, batch_norm: bool):
        layers: list[nn.Module] = []
        for channels_in in (in_channels, out_channels):
            layers.append(nn.Conv2d(channels_in, out_channels, 3, padding=1, bias=not batch_norm))
            if batch_norm:
                layers.append(nn.BatchNorm2d(out_channels, eps=BN_EPS, momentum=BN_MOMENTUM))
            layers.append(nn.ReLU(inplace=True))
        super().__init__(*layers)


class UNet(nn.Module):
    def __init__(self, batch_norm: bool = True, channels: tuple[int, ...] = CHANNELS):
        super().__init__()
        self.down = nn.ModuleList()
        previous = 1
        for width in channels:
            self.down.append(DoubleConv(previous, width, batch_norm))
            previous = width
        self.pool = nn.MaxPool2d(2)
        self.up = nn.ModuleList()
        self.merge = nn.ModuleList()
        for width in reversed(channels[:-1]):
            self.up.append(nn.ConvTranspose2d(previous, width, 2, stride=2))
            self.merge.append(DoubleConv(2 * width, width, batch_norm))
            previous = width
        self.head = nn.Conv2d(previous, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for index, block in enumerate(self.down):
            x = block(x)
            if index < len(self.down) - 1:
                skips.append(x)
                x = self.pool(x)
        for up, merge, skip in zip(self.up, self.merge, reversed(skips)):
            x = merge(torch.cat([up(x), skip], dim=1))
        return self.head(x)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def gradient_bytes(model: nn.Module) -> int:
    """Bytes of the gradients a step reduces: each trainable parameter's, in its own type."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


@dataclass(frozen=True)
class Model:
    """The UNet and its optimizer as built, and the loss scaler of float16 steps."""

    network: UNet
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler

    def fields(self) -> dict[str, int]:
        return {"parameters": parameter_count(self.network), "gradient_bytes": gradient_bytes(self.network)}


def build(run: RunSettings, device: Device, numerics: Numerics, backend: Backend) -> Model:
    """The UNet at model.width on the device and its Adam (the loop sets each epoch's rate)."""
    with backend.scope():
        channels = architecture.channels(run.model_width)
        network = UNet(run.training.batch_norm, channels).to(device.device, memory_format=LAYOUT)
        optimizer = torch.optim.Adam(network.parameters(), lr=run.training.base_lr, eps=1e-8)
    scaler = torch.amp.GradScaler(device.type, enabled=numerics.autocast == torch.float16)
    return Model(network, optimizer, scaler)


@dataclass(frozen=True)
class Distributed:
    """The model as the backend distributed it: `wrapped` is the backend's own (DDP, FSDP,
    DataParallel, or the plain module for Horovod), `network` what the steps call (compiled where
    training.compile), `raw` the plain UNet underneath (its buffers, whole state and predictions)."""

    network: nn.Module
    wrapped: nn.Module
    raw: UNet
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler


def distribute(
    run: RunSettings, model: Model, backend: Backend, marks: step_timing.StepMarks | None, delays: EpochDelays
) -> Distributed:
    """The model handed to the backend (after a restore, so rank 0's state is shared), then compiled
    where training.compile asks (the backend's wrapper included: DDP's buckets shape the graphs).
    slow_reduce (faults.py) delays the pass's last gradient before the backend's hooks see it."""
    if delays.plan.injects("slow_reduce") and not backend.spec.shards_state:
        step_timing.delay_reduction(model.network, lambda: delays.now.reduce_s)
    wrapped, optimizer = backend.distribute(model.network, model.optimizer, marks)
    network = compiled.compile_model(wrapped) if run.training.compile else wrapped
    return Distributed(network, wrapped, model.network, optimizer, model.scaler)
