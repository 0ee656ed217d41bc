"""Turn image/mask pairs into the arrays every cell trains on.

Output, in one directory:
  images.npy     uint8 [N, H, W], grayscale, resized with aspect-preserving padding
  masks.npy      uint8 [N, H, W], 0 or 1 (mask / its maximum, resized, > 0.5)
  manifest.json  source, record, archives' md5, file names, arrays' sha256,
                 the train/validation/test split by the split seed, counts, pairing rule

Pairs are decoded one at a time and appended to the .npy files, so memory
stays at one image whatever the dataset's size (writing through a memory map
would keep every written page resident). Training memory-maps the result.
Nothing in the manifest depends on the time or the machine: the same input
gives byte-identical arrays and manifest. Files are written under temporary
names and renamed at the end, so a failure leaves no half-written output.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from scalebench import files
from scalebench.data.pairing import DatasetError, Pair, summary, to_gray
from scalebench.data.split import split_counts

__all__ = ["DatasetError", "Pair", "preprocess", "read_manifest", "load_arrays", "split_indices", "fit_with_padding"]

MASK_THRESHOLD = 0.5
MAX_NONBINARY_FRACTION = 0.05


def split_indices(
    count: int, test_fraction: float, split_seed: int, val_fraction: float
) -> tuple[list[int], list[int], list[int]]:
    """A fixed train/validation/test split: the same seed gives the same split everywhere.

    The test pairs are the permutation's first ones, so adding a validation split leaves
    the test set of a seed as it was; validation takes the next ones, training the rest.
    """
    n_train, n_val, n_test = split_counts(count, test_fraction, val_fraction)
    if n_train < 1:
        raise DatasetError(
            f"{count} pairs leave no training data after {n_test} test and {n_val} validation pairs "
            "(dataset.test_fraction, dataset.val_fraction)"
        )
    order = np.random.default_rng(split_seed).permutation(count)
    test, val, train = order[:n_test], order[n_test : n_test + n_val], order[n_test + n_val :]
    return tuple(sorted(int(i) for i in part) for part in (train, val, test))


def fit_with_padding(image: Image.Image, height: int, width: int, resample: int) -> np.ndarray:
    """Resize keeping the aspect ratio, then pad with zeros to height x width, centred."""
    scale = min(height / image.height, width / image.width)
    new_h = max(1, round(image.height * scale))
    new_w = max(1, round(image.width * scale))
    resized = np.asarray(image.resize((new_w, new_h), resample))
    out = np.zeros((height, width), dtype=resized.dtype)
    top, left = (height - new_h) // 2, (width - new_w) // 2
    out[top : top + new_h, left : left + new_w] = resized
    return out


class _NpyStream:
    """A .npy file written row by row, hashed on the way."""

    def __init__(self, path: Path, shape: tuple[int, ...]) -> None:
        self.path = path
        self.temporary = files.temporary_path(path)
        self.digest = hashlib.sha256()
        self.handle = open(self.temporary, "wb")
        header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.uint8)), "fortran_order": False, "shape": shape}
        np.lib.format.write_array_header_1_0(self, header)

    def write(self, data: bytes) -> None:
        self.digest.update(data)
        self.handle.write(data)

    def finish(self) -> str:
        self.handle.close()
        os.replace(self.temporary, self.path)
        return self.digest.hexdigest()

    def discard(self) -> None:
        self.handle.close()
        self.temporary.unlink(missing_ok=True)


def _image_row(path: Path, height: int, width: int) -> np.ndarray:
    with Image.open(path) as image:
        gray = Image.fromarray(to_gray(image))
    return fit_with_padding(gray, height, width, Image.Resampling.BILINEAR)


def _mask_row(path: Path, height: int, width: int) -> tuple[np.ndarray, int, int]:
    """The binary mask row, its non-binary pixel count and its pixel count."""
    with Image.open(path) as image:
        gray = to_gray(image)
    top = int(gray.max())
    nonbinary = int(np.count_nonzero((gray != 0) & (gray != top)))
    # Resize the mask as a fraction of its maximum, then threshold: smooth edges, strictly 0/1.
    soft = Image.fromarray(gray.astype(np.float32) / max(top, 1))
    row = fit_with_padding(soft, height, width, Image.Resampling.BILINEAR) > MASK_THRESHOLD
    return row.astype(np.uint8), nonbinary, gray.size


def _relative(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def preprocess(
    pairs: list[Pair],
    out_dir: str | Path,
    image_size: tuple[int, int],
    test_fraction: float,
    split_seed: int,
    provenance: dict,
    root: str | Path | None = None,
    max_nonbinary_fraction: float = MAX_NONBINARY_FRACTION,
    val_fraction: float = 0.1,
) -> dict:
    """Write images.npy, masks.npy and manifest.json; return the manifest.

    `provenance` (source, pairing rule, record, archives, ...) goes into the
    manifest as given; file names are recorded relative to `root` (by default
    the folder all pairs share).
    """
    if not pairs:
        raise DatasetError("no image/mask pairs to preprocess")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(root) if root else Path(os.path.commonpath([p for pair in pairs for p in (pair.image, pair.mask)]))
    height, width = image_size
    count = len(pairs)
    train, val, test = split_indices(count, test_fraction, split_seed, val_fraction)  # before any file is written
    images = _NpyStream(out / "images.npy", (count, height, width))
    masks = _NpyStream(out / "masks.npy", (count, height, width))
    try:
        fraction = _write_pairs(pairs, images, masks, root, image_size, max_nonbinary_fraction)
    except BaseException:
        images.discard()
        masks.discard()
        raise
    checksums = {"images.npy": images.finish(), "masks.npy": masks.finish()}
    print(f"preprocess: {fraction:.4%} of mask pixels were neither 0 nor the mask's maximum", flush=True)
    manifest = {
        **provenance,
        "image_size": [height, width],
        "count": count,
        "counts": {"pairs": count, "train": len(train), "val": len(val), "test": len(test)},
        "files": [{"image": _relative(p.image, root), "mask": _relative(p.mask, root)} for p in pairs],
        "mask_threshold": MASK_THRESHOLD,
        "mask_nonbinary_fraction": round(fraction, 8),
        "split_seed": split_seed,
        "test_fraction": test_fraction,
        "val_fraction": val_fraction,
        "train": train,
        "val": val,  # evaluated during training; the test pairs only at the end
        "test": test,
        "sha256": checksums,
    }
    files.write_json_atomic(out / "manifest.json", manifest)
    return manifest


def _write_pairs(
    pairs: list[Pair],
    images: _NpyStream,
    masks: _NpyStream,
    root: Path,
    image_size: tuple[int, int],
    max_nonbinary_fraction: float,
) -> float:
    """Decode each pair into its row of `images` and `masks` (zeros where it cannot be decoded),
    saying how far it got; raise DatasetError naming every pair that fails validation, else return
    the fraction of mask pixels that were neither 0 nor their mask's maximum."""
    height, width = image_size
    count = len(pairs)
    unreadable, not_binary = [], []
    nonbinary_total = pixels_total = 0
    step = max(1, count // 10)
    for index, pair in enumerate(pairs):
        try:
            image_row = _image_row(pair.image, height, width)
            mask_row, nonbinary, pixels = _mask_row(pair.mask, height, width)
        except (OSError, UnidentifiedImageError, ValueError, SyntaxError) as error:
            unreadable.append(f"{_relative(pair.image, root)} / {_relative(pair.mask, root)} ({error})")
            image_row = mask_row = np.zeros((height, width), np.uint8)
            nonbinary, pixels = 0, 0
        if pixels and nonbinary > max_nonbinary_fraction * pixels:
            not_binary.append(f"{_relative(pair.mask, root)} ({nonbinary / pixels:.1%} non-binary pixels)")
        nonbinary_total += nonbinary
        pixels_total += pixels
        images.write(image_row.tobytes())
        masks.write(mask_row.tobytes())
        if (index + 1) % step == 0 or index + 1 == count:
            print(f"preprocess: {index + 1}/{count} pairs", flush=True)
    problems = _validation_problems(unreadable, not_binary, max_nonbinary_fraction)
    if problems:
        raise DatasetError(f"dataset under {root} fails validation: " + "; ".join(problems))
    return nonbinary_total / pixels_total if pixels_total else 0.0


def _validation_problems(unreadable: list[str], not_binary: list[str], max_nonbinary_fraction: float) -> list[str]:
    """What fails validation, in words: the pairs that could not be decoded, the masks not binary."""
    problems = []
    if unreadable:
        problems.append(f"{len(unreadable)} pairs could not be decoded: {summary(unreadable)}")
    if not_binary:
        problems.append(
            f"{len(not_binary)} masks are not binary (over {max_nonbinary_fraction:.0%} of pixels neither 0 "
            f"nor the mask's maximum): {summary(not_binary)}"
        )
    return problems


def read_manifest(data_dir: str | Path) -> dict:
    """The manifest of prepared arrays: sources, checksums and the train/validation/test split."""
    with open(Path(data_dir) / "manifest.json") as handle:
        return json.load(handle)


def load_arrays(data_dir: str | Path) -> tuple[np.ndarray, np.ndarray, dict]:
    """Memory-mapped images and masks plus the manifest."""
    data = Path(data_dir)
    manifest = read_manifest(data)
    images = np.load(data / "images.npy", mmap_mode="r")
    masks = np.load(data / "masks.npy", mmap_mode="r")
    return images, masks, manifest
