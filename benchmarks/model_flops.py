"""Benchmark: the UNet's model FLOPs per training image (issue 7, item 6).

scalebench.flops counts forward + backward FLOPs from the architecture (the figure the
training loops turn into model_tflops and mfu); this prints it at the benchmark sizes and,
with --check, compares it with torch.utils.flop_counter.FlopCounterMode on one real
forward + backward pass of scalebench.train.torch.model.UNet.

    .venv/frameworks/torch/bin/python benchmarks/model_flops.py [--sizes 256x256 768x1024] [--check] [--smoke]

It runs with torch's Python: FlopCounterMode counts in this process.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402  (puts workflow/scripts on sys.path)

_common.runs_with("torch", __name__)

SMOKE = {"sizes": ["32x48"], "check": True}


def counted_by_torch(height: int, width: int) -> int:
    """FLOPs FlopCounterMode sees in one training step of one image."""
    import torch
    import torch.nn.functional as F
    from scalebench.train.torch.model import UNet
    from torch.utils.flop_counter import FlopCounterMode

    model = UNet()
    image = torch.rand(1, 1, height, width)
    mask = (torch.rand(1, 1, height, width) > 0.5).float()
    counter = FlopCounterMode(display=False)
    with counter:
        F.binary_cross_entropy_with_logits(model(image), mask).backward()
    return counter.get_total_flops()


def main() -> None:
    from scalebench.train import flops

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["256x256", "768x1024"], help="HxW (default 256x256 768x1024)")
    parser.add_argument("--check", action="store_true", help="also count with FlopCounterMode (one real step)")
    options = _common.parse_options(parser, SMOKE)
    print(_common.machine_line())
    for size in options.sizes:
        height, width = (int(part) for part in size.split("x"))
        forward, _ = flops.forward_flops(height, width)
        train = flops.train_flops_per_image(height, width)
        line = (
            f"{height}x{width}: forward {forward / 1e9:.2f} GFLOP, forward+backward {train / 1e9:.2f} GFLOP per image"
        )
        if options.check:
            counted = counted_by_torch(height, width)
            line += f"; FlopCounterMode {counted / 1e9:.2f} GFLOP (ratio {train / counted:.4f})"
        print(line, flush=True)


if __name__ == "__main__":
    main()
