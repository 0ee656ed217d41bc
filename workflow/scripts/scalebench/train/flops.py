"""Model FLOPs of the UNet, counted from its architecture (both frameworks build the same network).

Only convolutions count (as in torch.utils.flop_counter): 2 FLOPs per multiply-add.
The backward pass costs twice the forward (gradients of inputs and of weights),
except the first convolution, whose input (the image) needs no gradient.
"""

from __future__ import annotations

from scalebench.architecture import CHANNELS
from scalebench.settings import PRECISION_OF


def forward_flops(height: int, width: int, channels: tuple[int, ...] = CHANNELS) -> tuple[int, int]:
    """(forward FLOPs per image, FLOPs of the first convolution)."""
    total, h, w, previous = 0, height, width, 1
    first = 2 * 1 * channels[0] * 9 * height * width
    for level, width_out in enumerate(channels):
        if level:
            h, w = h // 2, w // 2
        total += 2 * 9 * h * w * (previous * width_out + width_out * width_out)
        previous = width_out
    for width_out in reversed(channels[:-1]):
        total += 2 * 4 * h * w * previous * width_out  # 2x2 stride-2 transposed conv, per input pixel
        h, w = h * 2, w * 2
        total += 2 * 9 * h * w * (2 * width_out * width_out + width_out * width_out)
        previous = width_out
    total += 2 * h * w * previous  # 1x1 head
    return total, first


def train_flops_per_image(height: int, width: int, channels: tuple[int, ...] = CHANNELS) -> int:
    """Forward + backward FLOPs for one training image (of the UNet with these encoder widths)."""
    forward, first = forward_flops(height, width, channels)
    return 3 * forward - first


def mfu(images_per_s: float, flops_per_image: int, peak_tflops: float | None, devices: int) -> float | None:
    """Model FLOPs utilisation per device: the cell's model FLOP/s shared by its `devices`,
    over one device's peak (None if the peak is unknown)."""
    if not peak_tflops:
        return None
    return images_per_s / devices * flops_per_image / (peak_tflops * 1e12)


def matching_device(device_model: str, table: dict) -> str | None:
    """The key of config's cluster.peak_tflops table that names this device: keys match as
    substrings of the device name (e.g. "H100"), the longest first ("H100 PCIe" before "H100")."""
    for key in sorted(table, key=len, reverse=True):
        if key.lower() in device_model.lower():
            return key
    return None


def peak_tflops(device_model: str, precision: str, table: dict) -> float | None:
    """The device's peak TFLOP/s for this precision (fp32, tf32, bf16 or fp16), or None."""
    key = matching_device(device_model, table)
    return table[key].get(precision) if key else None


def precision_key(autocast_dtype: str | None, tf32: bool) -> str:
    """Which peak applies: the autocast type of amp runs, else tf32 where the framework computes
    fp32 convolutions in TF32 (both do by default on A100 and later), else fp32."""
    if autocast_dtype is not None:
        return PRECISION_OF[autocast_dtype]
    return "tf32" if tf32 else "fp32"


def peak_fields(device_model: str, on_gpu: bool, precision: str, table: dict) -> dict:
    """run.json's record of the peak MFU is measured against; warns (never guesses) when unknown."""
    key = matching_device(device_model, table)
    peak = table[key].get(precision) if key else None
    if on_gpu and peak is None:
        missing = f"no {precision} peak for {key}" if key else f"no entry matches '{device_model}'"
        print(f"warning: MFU stays empty: cluster.peak_tflops has {missing}", flush=True)
    return {"peak_device": key, "peak_precision": precision, "peak_tflops": peak}


def throughput_fields(images_per_s: float, flops_per_image: int, peak: float | None, devices: int) -> dict:
    """The cell's achieved model TFLOP/s and the MFU per device (None where the peak is unknown)."""
    return {
        "model_tflops": images_per_s * flops_per_image / 1e12,
        "mfu": mfu(images_per_s, flops_per_image, peak, devices),
    }
