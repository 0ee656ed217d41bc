"""Find the image and mask files in a dataset tree, pair them and check the pairs.

Every source (an extracted Zenodo record, a user's folder, the synthetic set)
goes through the same steps:

1. discover: the folders holding PNG or TIFF files; each is an image folder or
   a mask folder, by its name (mask, label, annotation, ...) or, when the
   names do not say, by its content (a mask folder's first file is binary).
2. pair: by file stem; only when no stem matches but the stems differ by a
   constant prefix or suffix (``img_001`` / ``mask_001``) by sorted order. The
   rule used is returned and recorded in the manifest.
3. validate: readable headers, same size per pair, a mode that converts to
   grayscale. Decoding and the binary check of the masks happen while
   preprocessing streams the pixels (one pass over the data).

Errors name the first offending files and count the rest.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

IMAGE_SUFFIXES = (".png", ".tif", ".tiff")
MASK_WORDS = re.compile(r"mask|label|annot|ground.?truth|(^|[_\-. ])gt($|[_\-. ])", re.IGNORECASE)
IMAGE_WORDS = re.compile(r"image|img|raw|input|original", re.IGNORECASE)
GRAY_MODES = {"1", "L", "LA", "P", "PA", "RGB", "RGBA", "RGBX", "CMYK", "YCbCr", "I", "I;16", "I;16B", "I;16L", "F"}


class DatasetError(ValueError):
    """The dataset's files cannot be paired or fail validation; the message names them."""


@dataclass(frozen=True)
class Pair:
    image: Path
    mask: Path


def summary(items: list[str], limit: int = 3) -> str:
    """'a, b, c and 4 more': the first offenders and a count of the rest."""
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def image_files(folder: Path) -> list[Path]:
    """PNG/TIFF files directly in `folder`, skipping hidden files (e.g. macOS ._ forks)."""
    return sorted(
        p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith(".")
    )


def _image_folders(root: Path) -> dict[Path, list[Path]]:
    folders = {}
    for current, dirs, _ in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__MACOSX")
        files = image_files(Path(current))
        if files:
            folders[Path(current)] = files
    return folders


def to_gray(image: Image.Image) -> np.ndarray:
    """A uint8 grayscale array; 16-bit and float images are scaled, not clipped."""
    if image.mode in ("I;16", "I;16B", "I;16L") or (image.mode == "I" and np.asarray(image).max() > 255):
        return np.round(np.asarray(image, dtype=np.float64) / 65535 * 255).astype(np.uint8)
    if image.mode == "F":
        values = np.asarray(image, dtype=np.float64)
        scale = 255 if values.max() <= 1 else 1
        return np.clip(np.round(values * scale), 0, 255).astype(np.uint8)
    if image.mode == "I":
        return np.asarray(image).astype(np.uint8)
    return np.asarray(image.convert("L"))


def nonbinary_pixels(mask: np.ndarray) -> int:
    """Pixels that are neither 0 nor the mask's maximum (anti-aliasing, compression noise)."""
    top = int(mask.max())
    return int(np.count_nonzero((mask != 0) & (mask != top)))


def _looks_like_masks(files: list[Path]) -> bool:
    """Whether the first file of a folder is (almost) binary."""
    try:
        with Image.open(files[0]) as image:
            gray = to_gray(image)
    except (OSError, UnidentifiedImageError, ValueError):
        return False
    return nonbinary_pixels(gray) <= 0.01 * gray.size


def _classify(folder: Path, files: list[Path], root: Path) -> str:
    """'mask' or 'image': the deepest folder name that says so wins, else the content decides."""
    for part in reversed(folder.relative_to(root).parts or (folder.name,)):
        if MASK_WORDS.search(part):
            return "mask"
        if IMAGE_WORDS.search(part):
            return "image"
    return "mask" if _looks_like_masks(files) else "image"


def discover(root: str | Path) -> tuple[list[Path], list[Path], str]:
    """The image files and the mask files under `root`, and how the folders were told apart."""
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root}: not a folder")
    folders = _image_folders(root)
    if not folders:
        raise DatasetError(f"{root}: no image files ({', '.join(IMAGE_SUFFIXES)}) found in it or below it")
    kinds = {folder: _classify(folder, files, root) for folder, files in folders.items()}
    images = [f for folder, files in folders.items() if kinds[folder] == "image" for f in files]
    masks = [f for folder, files in folders.items() if kinds[folder] == "mask" for f in files]
    listing = ", ".join(f"{folder.relative_to(root) or '.'} ({kinds[folder]}, {len(folders[folder])} files)"
                        for folder in sorted(folders))  # fmt: skip
    if not images or not masks:
        missing = "mask" if not masks else "image"
        raise DatasetError(
            f"{root}: found no {missing} folder; expected one folder of images and one of masks, found: {listing}"
        )
    return images, masks, listing


def _unique_stems(files: list[Path], kind: str, root: Path) -> dict[str, Path]:
    by_stem: dict[str, list[Path]] = {}
    for path in files:
        by_stem.setdefault(path.stem, []).append(path)
    clashes = [" & ".join(str(p.relative_to(root)) for p in paths) for paths in by_stem.values() if len(paths) > 1]
    if clashes:
        raise DatasetError(f"{len(clashes)} {kind} file names repeat in different folders: {summary(clashes)}")
    return {stem: paths[0] for stem, paths in by_stem.items()}


def _strip_common(stems: list[str]) -> list[str]:
    """Stems without the prefix and suffix they all share."""
    prefix = os.path.commonprefix(stems)
    rest = [s[len(prefix) :] for s in stems]
    suffix = os.path.commonprefix([r[::-1] for r in rest])
    return [r[: len(r) - len(suffix)] for r in rest]


def pair_files(images: list[Path], masks: list[Path], root: str | Path) -> tuple[list[Pair], str]:
    """Pairs and the rule used: 'stem' or 'sorted order (...)'."""
    root = Path(root)
    image_stems = _unique_stems(images, "image", root)
    mask_stems = _unique_stems(masks, "mask", root)

    def rel(path: Path) -> str:
        return str(path.relative_to(root))

    if len(image_stems) != len(mask_stems):
        lonely_images = [rel(p) for s, p in sorted(image_stems.items()) if s not in mask_stems]
        lonely_masks = [rel(p) for s, p in sorted(mask_stems.items()) if s not in image_stems]
        detail = []
        if lonely_images and len(lonely_images) < len(image_stems):
            detail.append(f"images without a mask: {summary(lonely_images)}")
        if lonely_masks and len(lonely_masks) < len(mask_stems):
            detail.append(f"masks without an image: {summary(lonely_masks)}")
        raise DatasetError(
            f"{len(image_stems)} images but {len(mask_stems)} masks under {root}"
            + ("; " + "; ".join(detail) if detail else "")
        )
    common = set(image_stems) & set(mask_stems)
    if len(common) == len(image_stems):
        return [Pair(image_stems[s], mask_stems[s]) for s in sorted(image_stems)], "stem"
    if common:
        lonely = [rel(image_stems[s]) for s in sorted(image_stems) if s not in mask_stems]
        raise DatasetError(
            f"{len(lonely)} of {len(image_stems)} images have no mask with the same file stem: {summary(lonely)}"
        )
    image_order, mask_order = sorted(image_stems), sorted(mask_stems)
    if len(image_order) > 1 and _strip_common(image_order) == _strip_common(mask_order):
        pairs = [Pair(image_stems[i], mask_stems[m]) for i, m in zip(image_order, mask_order)]
        example = f"{image_order[0]} <-> {mask_order[0]}"
        return pairs, f"sorted order (stems differ by a constant prefix/suffix, e.g. {example})"
    raise DatasetError(
        f"no image has a mask with the same file stem and the stems do not differ consistently "
        f"(e.g. {image_order[0]} vs {mask_order[0]}); rename the files so image and mask share a stem"
    )


def validate_headers(pairs: list[Pair], root: str | Path) -> None:
    """Every file opens, converts to grayscale, and each mask has its image's size."""
    root = Path(root)
    unreadable, modes, sizes = [], [], []
    for pair in pairs:
        found = {}
        for kind, path in (("image", pair.image), ("mask", pair.mask)):
            try:
                with Image.open(path) as image:
                    found[kind] = image.size
                    if image.mode not in GRAY_MODES:
                        modes.append(f"{path.relative_to(root)} (mode {image.mode})")
            except (OSError, UnidentifiedImageError, ValueError) as error:
                unreadable.append(f"{path.relative_to(root)} ({type(error).__name__}: {error})")
        if len(found) == 2 and found["image"] != found["mask"]:
            (iw, ih), (mw, mh) = found["image"], found["mask"]
            sizes.append(f"{pair.mask.relative_to(root)} is {mw}x{mh} but {pair.image.relative_to(root)} is {iw}x{ih}")
    problems = []
    if unreadable:
        problems.append(f"{len(unreadable)} unreadable files: {summary(unreadable)}")
    if sizes:
        problems.append(f"{len(sizes)} masks differ in size from their image: {summary(sizes)}")
    if modes:
        problems.append(f"{len(modes)} files cannot be converted to grayscale: {summary(modes)}")
    if problems:
        raise DatasetError(f"dataset under {root} fails validation: " + "; ".join(problems))


def find_pairs(root: str | Path) -> tuple[list[Pair], str]:
    """Discover, pair and validate; return the pairs and the pairing rule."""
    images, masks, listing = discover(root)
    print(f"pairing: {listing}", flush=True)
    pairs, rule = pair_files(images, masks, root)
    validate_headers(pairs, root)
    return pairs, rule
