"""Turn image/mask pairs into the arrays every cell trains on.

Output, in one directory:
  images.npy     uint8 [N, H, W], grayscale, resized with aspect-preserving padding
  masks.npy      uint8 [N, H, W], 0 or 1
  manifest.json  source, files, checksums, the train/test split by the split seed

Images are streamed one at a time into memory-mapped arrays, so memory stays
at the arrays' size plus one image whatever the dataset's size.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

IMAGE_SUFFIXES = (".png", ".tif", ".tiff")


@dataclass(frozen=True)
class Pair:
    image: Path
    mask: Path


def find_pairs(root: str | Path) -> tuple[list[Pair], str]:
    """Pairs from ``root/images`` and ``root/masks``, matched by file stem.

    Returns the pairs and the name of the pairing rule used.
    """
    root = Path(root)
    images = sorted(p for p in (root / "images").iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    masks = {p.stem: p for p in (root / "masks").iterdir() if p.suffix.lower() in IMAGE_SUFFIXES}
    missing = [p.name for p in images if p.stem not in masks]
    if missing:
        raise ValueError(f"{len(missing)} images have no mask, first: {missing[:3]}")
    return [Pair(p, masks[p.stem]) for p in images], "stem"


def split_indices(count: int, test_fraction: float, split_seed: int) -> tuple[list[int], list[int]]:
    """A fixed train/test split: the same seed gives the same split everywhere."""
    n_test = max(1, round(count * test_fraction))
    order = np.random.default_rng(split_seed).permutation(count)
    return sorted(int(i) for i in order[n_test:]), sorted(int(i) for i in order[:n_test])


def fit_with_padding(image: Image.Image, height: int, width: int, resample: int) -> np.ndarray:
    """Resize keeping the aspect ratio, then pad with zeros to height x width, centred."""
    scale = min(height / image.height, width / image.width)
    new_h = max(1, round(image.height * scale))
    new_w = max(1, round(image.width * scale))
    resized = np.asarray(image.resize((new_w, new_h), resample))
    out = np.zeros((height, width), dtype=np.uint8)
    top, left = (height - new_h) // 2, (width - new_w) // 2
    out[top : top + new_h, left : left + new_w] = resized
    return out


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def preprocess(
    pairs: list[Pair],
    out_dir: str | Path,
    image_size: tuple[int, int],
    test_fraction: float,
    split_seed: int,
    provenance: dict,
) -> dict:
    """Write images.npy, masks.npy and manifest.json; return the manifest."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    height, width = image_size
    count = len(pairs)
    images = np.lib.format.open_memmap(out / "images.npy", mode="w+", dtype=np.uint8, shape=(count, height, width))
    masks = np.lib.format.open_memmap(out / "masks.npy", mode="w+", dtype=np.uint8, shape=(count, height, width))
    step = max(1, count // 10)
    for index, pair in enumerate(pairs):
        with Image.open(pair.image) as image:
            images[index] = fit_with_padding(image.convert("L"), height, width, Image.Resampling.BILINEAR)
        with Image.open(pair.mask) as mask:
            # Bilinear then threshold at half intensity: smooth edges, strictly binary result.
            soft = fit_with_padding(mask.convert("L"), height, width, Image.Resampling.BILINEAR)
            masks[index] = (soft > 127).astype(np.uint8)
        if (index + 1) % step == 0 or index + 1 == count:
            print(f"preprocess: {index + 1}/{count} pairs", flush=True)
    images.flush()
    masks.flush()
    del images, masks
    train, test = split_indices(count, test_fraction, split_seed)
    manifest = {
        **provenance,
        "image_size": [height, width],
        "count": count,
        "files": [{"image": p.image.name, "mask": p.mask.name} for p in pairs],
        "split_seed": split_seed,
        "test_fraction": test_fraction,
        "train": train,
        "test": test,
        "sha256": {name: _sha256(out / name) for name in ("images.npy", "masks.npy")},
    }
    with open(out / "manifest.json", "w") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
        handle.write("\n")
    return manifest


def load_arrays(data_dir: str | Path) -> tuple[np.ndarray, np.ndarray, dict]:
    """Memory-mapped images and masks plus the manifest."""
    data = Path(data_dir)
    with open(data / "manifest.json") as handle:
        manifest = json.load(handle)
    images = np.load(data / "images.npy", mmap_mode="r")
    masks = np.load(data / "masks.npy", mmap_mode="r")
    return images, masks, manifest
