"""A synthetic stand-in for the SEM indentation-mark dataset.

Each pair is a grayscale SEM-like image (uneven illumination, grain texture and
noise) with one dark indentation mark, a rotated square (Vickers) or triangle
(Berkovich) with soft edges, and its binary mask. Pairs are written as PNGs in
``images/`` and ``masks/`` with matching file names, the layout preprocessing
reads from every source.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def _background(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    tilt = rng.uniform(-30, 30) * (xx / width - 0.5) + rng.uniform(-30, 30) * (yy / height - 0.5)
    # Grain texture: coarse noise upsampled, like a polished metal surface.
    coarse = rng.normal(0, 1, (max(2, height // 16), max(2, width // 16))).astype(np.float32)
    grain = np.asarray(Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC), dtype=np.float32)
    return rng.uniform(130, 170) + tilt + 8 * grain


def _mark_polygon(rng: np.random.Generator, height: int, width: int) -> list[tuple[float, float]]:
    sides = 4 if rng.random() < 0.5 else 3
    radius = rng.uniform(0.12, 0.3) * min(height, width)
    cy = rng.uniform(radius, height - radius)
    cx = rng.uniform(radius, width - radius)
    angle = rng.uniform(0, 2 * math.pi)
    return [
        (
            cx + radius * math.cos(angle + 2 * math.pi * k / sides),
            cy + radius * math.sin(angle + 2 * math.pi * k / sides),
        )
        for k in range(sides)
    ]


def make_pair(rng: np.random.Generator, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """One (image, mask) pair as uint8 arrays; the mask holds 0 and 255."""
    polygon = _mark_polygon(rng, height, width)
    mask_image = Image.new("L", (width, height), 0)
    ImageDraw.Draw(mask_image).polygon(polygon, fill=255)
    mask = np.asarray(mask_image)
    blur = max(1.0, min(height, width) / 200)
    soft = np.asarray(mask_image.filter(ImageFilter.GaussianBlur(blur)), dtype=np.float32) / 255
    depth = rng.uniform(70, 110)
    image = _background(rng, height, width) - depth * soft
    image += rng.normal(0, 6, (height, width))
    return np.clip(image, 0, 255).astype(np.uint8), mask


def write_dataset(out_dir: str | Path, count: int, height: int, width: int, seed: int) -> None:
    """Write `count` pairs as images/sem_NNNN.png and masks/sem_NNNN.png."""
    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / "masks").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for index in range(count):
        image, mask = make_pair(rng, height, width)
        name = f"sem_{index:04d}.png"
        Image.fromarray(image).save(out / "images" / name)
        Image.fromarray(mask).save(out / "masks" / name)
        if (index + 1) % max(1, count // 10) == 0 or index + 1 == count:
            print(f"synthetic: {index + 1}/{count} pairs", flush=True)
