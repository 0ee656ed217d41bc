"""Discovery, pairing and validation of image/mask files, shared by every source."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scalebench.data.pairing import DatasetError, discover, find_pairs, pair_files


def write_pair(root: Path, image_name: str, mask_name: str, size=(48, 64), mask_size=None, seed=0) -> None:
    rng = np.random.default_rng(seed)
    height, width = size
    image = rng.integers(0, 256, (height, width), dtype=np.uint8)
    mh, mw = mask_size or size
    mask = np.zeros((mh, mw), np.uint8)
    mask[mh // 4 : mh // 2, mw // 4 : mw // 2] = 255
    for name, array in ((image_name, image), (mask_name, mask)):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(array).save(path)


def dataset(root: Path, count: int = 4, images="images/{i:03d}.png", masks="masks/{i:03d}.png") -> Path:
    for i in range(count):
        write_pair(root, images.format(i=i), masks.format(i=i), seed=i)
    return root


def test_pairs_by_stem_in_a_nested_extracted_tree(tmp_path):
    root = dataset(tmp_path, images="images/SEM_images/{i:03d}.png", masks="masks/label_png/{i:03d}.png")
    pairs, rule = find_pairs(root)
    assert rule == "stem"
    assert [(p.image.relative_to(root).as_posix(), p.mask.relative_to(root).as_posix()) for p in pairs][0] == (
        "images/SEM_images/000.png",
        "masks/label_png/000.png",
    )


def test_folders_without_telling_names_are_told_apart_by_content(tmp_path):
    root = dataset(tmp_path, images="a/{i}.tif", masks="b/{i}.tif")
    images, masks, listing = discover(root)
    assert {p.parent.name for p in images} == {"a"} and {p.parent.name for p in masks} == {"b"}
    assert listing == "a (image, 4 files), b (mask, 4 files)"


def test_sorted_order_only_when_stems_differ_by_a_constant_affix(tmp_path):
    root = dataset(tmp_path, images="images/img_{i:03d}.png", masks="masks/mask_{i:03d}.png")
    pairs, rule = find_pairs(root)
    assert rule == "sorted order (stems differ by a constant prefix/suffix, e.g. img_000 <-> mask_000)"
    assert [(p.image.stem, p.mask.stem) for p in pairs][-1] == ("img_003", "mask_003")


def test_inconsistent_stems_are_an_error_not_a_guess(tmp_path):
    root = dataset(tmp_path, images="images/img_{i:03d}.png", masks="masks/m{i}x.png")
    (root / "masks" / "m2x.png").rename(root / "masks" / "zz.png")
    with pytest.raises(DatasetError, match=r"^no image has a mask with the same file stem and the stems do not differ"):
        find_pairs(root)


def test_count_mismatch_names_the_lonely_files(tmp_path):
    root = dataset(tmp_path, count=6)
    for i in (1, 3, 4, 5):
        (root / "masks" / f"{i:03d}.png").unlink()
    with pytest.raises(DatasetError) as error:
        find_pairs(root)
    assert str(error.value) == (
        f"6 images but 2 masks under {root}; images without a mask: "
        "images/001.png, images/003.png, images/004.png and 1 more"
    )


def test_some_stems_unmatched_with_equal_counts(tmp_path):
    root = dataset(tmp_path)
    (root / "masks" / "002.png").rename(root / "masks" / "other.png")
    with pytest.raises(DatasetError, match=r"^1 of 4 images have no mask with the same file stem: images/002\.png$"):
        find_pairs(root)


def test_a_mask_of_a_different_size(tmp_path):
    root = dataset(tmp_path)
    write_pair(root, "images/001.png", "masks/001.png", mask_size=(24, 32))
    with pytest.raises(DatasetError) as error:
        find_pairs(root)
    assert str(error.value) == (
        f"dataset under {root} fails validation: 1 masks differ in size from their image: "
        "masks/001.png is 32x24 but images/001.png is 64x48"
    )


def test_an_unreadable_png(tmp_path):
    root = dataset(tmp_path)
    (root / "images" / "002.png").write_bytes(b"not a png at all")
    with pytest.raises(DatasetError) as error:
        find_pairs(root)
    assert str(error.value).startswith(
        f"dataset under {root} fails validation: 1 unreadable files: images/002.png (UnidentifiedImageError: "
    )


def test_a_folder_with_no_images(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("no images here")
    with pytest.raises(DatasetError) as error:
        find_pairs(tmp_path)
    assert str(error.value) == f"{tmp_path}: no image files (.png, .tif, .tiff) found in it or below it"


def test_only_one_kind_of_folder(tmp_path):
    dataset(tmp_path)
    for mask in (tmp_path / "masks").iterdir():
        mask.unlink()
    with pytest.raises(DatasetError, match=r"found no mask folder; expected one folder of images and one of masks"):
        find_pairs(tmp_path)


def test_repeated_stems_across_folders_are_refused(tmp_path):
    root = dataset(tmp_path, count=2)
    write_pair(root, "images/more/000.png", "masks/more/000.png")
    images, masks, _ = discover(root)
    with pytest.raises(DatasetError, match=r"^1 image file names repeat in different folders: images/000\.png & "):
        pair_files(images, masks, root)
