"""Preprocessing: deterministic arrays and manifest, binary masks, nothing half-written on failure."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest
from PIL import Image
from scalebench.data import pairing, preprocess, synthetic
from scalebench.data.pairing import DatasetError


@pytest.fixture
def raw(tmp_path):
    synthetic.write_dataset(tmp_path / "raw", 8, 48, 64, seed=3)
    return tmp_path / "raw"


def run(raw, out, **kwargs):
    pairs, rule = pairing.find_pairs(raw)
    provenance = {"source": "zenodo", "record": 7, "archives": [{"name": "masks.tar.gz", "md5": "0" * 32}]}
    return preprocess.preprocess(pairs, out, (32, 48), 0.25, 42, {**provenance, "pairing": rule}, root=raw, **kwargs)


def test_the_same_run_twice_gives_byte_identical_outputs_without_timestamps(raw, tmp_path):
    run(raw, tmp_path / "first")
    run(raw, tmp_path / "second")
    for name in ("images.npy", "masks.npy", "manifest.json"):
        assert (tmp_path / "first" / name).read_bytes() == (tmp_path / "second" / name).read_bytes(), name
    text = (tmp_path / "first" / "manifest.json").read_text()
    assert not re.search(r"\d{4}-\d{2}-\d{2}|time|date", text)
    assert sorted(p.name for p in (tmp_path / "first").iterdir()) == ["images.npy", "manifest.json", "masks.npy"]


def test_manifest_records_source_files_checksums_split_and_rule(raw, tmp_path):
    manifest = run(raw, tmp_path / "out")
    assert manifest["source"] == "zenodo" and manifest["record"] == 7
    assert manifest["archives"] == [{"name": "masks.tar.gz", "md5": "0" * 32}]
    assert manifest["pairing"] == "stem"
    assert manifest["files"][0] == {"image": "images/sem_0000.png", "mask": "masks/sem_0000.png"}
    assert manifest["counts"] == {"pairs": 8, "train": 5, "val": 1, "test": 2}
    assert sorted(manifest["train"] + manifest["val"] + manifest["test"]) == list(range(8))
    for name in ("images.npy", "masks.npy"):
        assert manifest["sha256"][name] == hashlib.sha256((tmp_path / "out" / name).read_bytes()).hexdigest()
    assert json.loads((tmp_path / "out" / "manifest.json").read_text()) == manifest


def test_arrays_are_memory_mappable_uint8_with_binary_masks(raw, tmp_path):
    run(raw, tmp_path / "out")
    images, masks, _ = preprocess.load_arrays(tmp_path / "out")
    assert isinstance(images, np.memmap) and images.shape == masks.shape == (8, 32, 48)
    assert images.dtype == masks.dtype == np.uint8
    assert set(np.unique(masks)) == {0, 1}


def test_aspect_preserving_padding_and_zero_one_masks(tmp_path):
    root = tmp_path / "raw"
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    Image.fromarray(np.full((16, 64), 200, np.uint8)).save(root / "images" / "a.png")
    Image.fromarray(np.ones((16, 64), np.uint8)).save(root / "masks" / "a.png")  # a 0/1 mask
    Image.fromarray(np.full((16, 64), 90, np.uint8)).save(root / "images" / "b.png")
    Image.fromarray(np.zeros((16, 64), np.uint8)).save(root / "masks" / "b.png")
    Image.fromarray(np.full((16, 64), 90, np.uint8)).save(root / "images" / "c.png")  # a third: one for each split
    Image.fromarray(np.zeros((16, 64), np.uint8)).save(root / "masks" / "c.png")
    run(root, tmp_path / "out")
    images, masks, _ = preprocess.load_arrays(tmp_path / "out")
    # 16 x 64 scaled by 0.75 -> 12 x 48, centred in 32 rows: rows 10..21 hold the image.
    assert images[0, 10:22].min() == 200 and images[0, :10].max() == 0 and images[0, 22:].max() == 0
    assert masks[0, 10:22].min() == 1 and masks[0].sum() == 12 * 48


def test_sixteen_bit_images_are_scaled_not_clipped(tmp_path):
    root = tmp_path / "raw"
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    for name in ("a", "b", "c"):
        Image.fromarray(np.full((32, 48), 32768, np.uint16)).save(root / "images" / f"{name}.png")
        Image.fromarray(np.full((32, 48), 255, np.uint8)).save(root / "masks" / f"{name}.png")
    run(root, tmp_path / "out")
    images, _, _ = preprocess.load_arrays(tmp_path / "out")
    assert int(images[0, 5, 5]) == 128


def test_non_binary_masks_fail_with_their_fraction_and_leave_no_output(raw, tmp_path):
    noisy = np.random.default_rng(0).integers(0, 256, (48, 64), dtype=np.uint8)
    Image.fromarray(noisy).save(raw / "masks" / "sem_0005.png")
    with pytest.raises(DatasetError) as error:
        run(raw, tmp_path / "out")
    assert re.fullmatch(
        rf"dataset under {raw} fails validation: 1 masks are not binary \(over 5% of pixels neither 0 nor the "
        r"mask's maximum\): masks/sem_0005\.png \(9\d\.\d% non-binary pixels\)",
        str(error.value),
    )
    assert list((tmp_path / "out").iterdir()) == []


def test_a_png_that_fails_to_decode_is_named_and_nothing_is_left(raw, tmp_path):
    data = (raw / "images" / "sem_0002.png").read_bytes()
    (raw / "images" / "sem_0002.png").write_bytes(data[: len(data) // 2])  # header fine, pixels cut
    with pytest.raises(DatasetError, match=r"1 pairs could not be decoded: images/sem_0002\.png / masks/sem_0002\.png"):
        run(raw, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


def test_split_is_70_10_20_disjoint_and_fixed_by_the_split_seed():
    train, val, test = preprocess.split_indices(100, 0.2, split_seed=42, val_fraction=0.1)
    assert (len(train), len(val), len(test)) == (70, 10, 20)
    assert sorted(train + val + test) == list(range(100))  # disjoint and complete
    assert preprocess.split_indices(100, 0.2, split_seed=42, val_fraction=0.1) == (train, val, test)
    other = preprocess.split_indices(100, 0.2, split_seed=7, val_fraction=0.1)
    assert other[1] != val and other[2] != test


def test_the_validation_split_leaves_the_test_pairs_of_a_seed_as_they_were():
    small = preprocess.split_indices(100, 0.2, split_seed=42, val_fraction=0.05)
    large = preprocess.split_indices(100, 0.2, split_seed=42, val_fraction=0.3)
    assert small[2] == large[2] and set(small[1]) < set(large[1])


def test_tiny_counts_hold_out_one_pair_each_or_fail_naming_the_keys():
    assert [len(part) for part in preprocess.split_indices(3, 0.01, split_seed=0, val_fraction=0.01)] == [1, 1, 1]
    with pytest.raises(DatasetError, match=r"2 pairs leave no training data.*dataset\.val_fraction"):
        preprocess.split_indices(2, 0.01, split_seed=0, val_fraction=0.01)


def test_too_few_pairs_for_the_split_write_nothing(tmp_path):
    synthetic.write_dataset(tmp_path / "raw", 2, 48, 64, seed=3)
    with pytest.raises(DatasetError, match="no training data"):
        run(tmp_path / "raw", tmp_path / "out")
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_synthetic_images_are_grayscale_with_a_dark_mark_and_binary_masks(tmp_path):
    synthetic.write_dataset(tmp_path, 4, 48, 64, seed=0)
    for path in sorted((tmp_path / "images").iterdir()):
        image = np.asarray(Image.open(path))
        mask = np.asarray(Image.open(tmp_path / "masks" / path.name))
        assert image.shape == mask.shape == (48, 64) and image.dtype == np.uint8
        assert set(np.unique(mask)) <= {0, 255} and 0 < (mask > 0).mean() < 0.5
        # the indentation mark is darker than the polished surface around it
        assert image[mask > 0].mean() < image[mask == 0].mean() - 30
