"""The UNet that both frameworks build (torch/model.py, tf/model.py): the shared numbers.

Encoder widths 8-16-32-64-128 times model.width, each level two 3x3 convolutions (no
bias with batch norm), batch norm, ReLU, 2x2 max-pooling between levels; a decoder of
2x2 stride-2 transposed convolutions, skip connections by concatenation, the same
double convolution, and a 1x1 head with one output channel (logits).

The counts here are the architecture's, without a framework: the config check and the
ranks' memory check use them before any model exists, and a test holds both frameworks'
models to them.
"""

from __future__ import annotations

CHANNELS = (8, 16, 32, 64, 128)
BN_EPS = 1e-5
BN_MOMENTUM = 0.1  # PyTorch's convention: the new batch's weight (Keras' momentum is 1 - this)
GRADIENT_ITEMSIZE = 4  # gradients are float32 like the weights (amp computes in 16 bits, keeps fp32 weights)
# bytes of training state per parameter: the weight, its gradient and Adam's two moments, float32 each
STATE_BYTES_PER_PARAMETER = 16
# bytes of an activation at each training.precision: autocast (and Keras' mixed policies) compute
# bf16 and fp16 in two bytes, fp32 in four
ACTIVATION_ITEMSIZE = {"fp32": 4, "bf16": 2, "fp16": 2}


def channels(width: int = 1) -> tuple[int, ...]:
    """The encoder widths at model.width `width`: 8-16-32-64-128 times it."""
    if not isinstance(width, int) or width < 1:
        raise ValueError(f"model.width must be a whole number of at least 1, not {width!r}")
    return tuple(width * base for base in CHANNELS)


def _double_conv_parameters(in_channels: int, out_channels: int, batch_norm: bool) -> int:
    # two 3x3 convolutions; batch norm's scale and shift per channel, else each convolution's bias
    per_channel = 4 if batch_norm else 2
    return 9 * in_channels * out_channels + 9 * out_channels * out_channels + per_channel * out_channels


def parameter_count(width: int = 1, batch_norm: bool = True) -> int:
    """Trainable parameters of the UNet at `width` (486,409 at width 1 with batch norm)."""
    widths = channels(width)
    total, previous = 0, 1
    for out in widths:
        total += _double_conv_parameters(previous, out, batch_norm)
        previous = out
    for out in reversed(widths[:-1]):
        total += 4 * previous * out + out  # 2x2 transposed convolution with bias
        total += _double_conv_parameters(2 * out, out, batch_norm)
        previous = out
    return total + previous + 1  # the 1x1 head with bias


def gradient_bytes(width: int = 1, batch_norm: bool = True) -> int:
    """Bytes of the gradients a step reduces (float32, before any compression)."""
    return GRADIENT_ITEMSIZE * parameter_count(width, batch_norm)


def convolution_outputs(height: int, width_px: int, width: int = 1) -> int:
    """Elements of every convolution's output for one image: what the backward pass at least keeps."""
    widths = channels(width)
    total, h, w = 0, height, width_px
    for level, out in enumerate(widths):
        if level:
            h, w = h // 2, w // 2
        total += 2 * out * h * w
    for out in reversed(widths[:-1]):
        h, w = h * 2, w * 2
        total += 3 * out * h * w  # the transposed convolution and the two convolutions after it
    return total + h * w  # the head


def activation_itemsize(precision: str) -> int:
    """Bytes of one activation element at training.precision (the planner's and the ranks' memory check)."""
    return ACTIVATION_ITEMSIZE[precision]


def memory_floor_bytes(
    width: int, batch: int, image_size: tuple[int, int], activation_itemsize: int, shards: int = 1
) -> int:
    """The least memory one device needs to train the UNet at `width` on `batch` images: weights,
    gradients and Adam's moments (shared by `shards` ranks where the backend shards them, FSDP)
    and every convolution's output of the batch in the compute type. A lower bound, so that only
    what certainly cannot fit is refused: the framework's workspaces, other activations and the
    collectives' buffers come on top."""
    state = STATE_BYTES_PER_PARAMETER * parameter_count(width) // max(shards, 1)
    return state + batch * convolution_outputs(*image_size, width) * activation_itemsize
