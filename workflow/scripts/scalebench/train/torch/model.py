"""The UNet in PyTorch (scalebench/architecture.py); tf/model.py builds the same network in Keras.

Encoder channels 8-16-32-64-128 (times model.width: architecture.channels), each level two 3x3 convolutions (no bias,
batch norm, ReLU), 2x2 max-pooling between levels; decoder of 2x2 stride-2
transposed convolutions, skip connections by concatenation, the same double
convolution, and a 1x1 head with one output channel (logits).
"""

from __future__ import annotations

import torch
from torch import nn

from scalebench.architecture import BN_EPS, BN_MOMENTUM, CHANNELS


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
