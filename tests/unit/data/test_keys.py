"""Data folders are named by the settings that make them."""

from __future__ import annotations

import copy

import pytest
from conftest import REPO, sb_config
from scalebench.data import keys


def dataset(**changes) -> dict:
    config = sb_config.validate({"dataset": changes}, sb_config.load_schema(REPO / "config" / "schema.yaml"))
    return config["dataset"]


def test_the_prepared_key_is_readable_and_stable():
    key = keys.prepared_key(dataset(image_size=[32, 48]))
    assert key.startswith("synthetic-32x48-") and key == keys.prepared_key(dataset(image_size=[32, 48]))


@pytest.mark.parametrize(
    "changes",
    [
        {"image_size": [64, 48]},
        {"test_fraction": 0.3},
        {"val_fraction": 0.2},
        {"split_seed": 7},
        {"max_nonbinary_fraction": 0.5},
        {"synthetic": {"count": 201}},
        {"synthetic": {"seed": 3}},
        {"source": "zenodo"},
        {"source": "zenodo", "zenodo": {"record": 1}},
    ],
)
def test_every_setting_that_shapes_the_arrays_changes_the_key(changes):
    assert keys.prepared_key(dataset(**changes)) != keys.prepared_key(dataset())


def test_settings_that_do_not_shape_the_arrays_keep_the_key():
    base = dataset()
    other = copy.deepcopy(base)
    other["zenodo"]["retries"] = 9  # how the download is tried, not what it holds
    assert keys.prepared_key(other) == keys.prepared_key(base)
    # a folder source is keyed by its resolved path
    assert keys.prepared_key(dataset(source="folder", folder="/data/a")) != keys.prepared_key(
        dataset(source="folder", folder="/data/b")
    )


def test_raw_trees_are_keyed_too():
    assert keys.synthetic_key({"count": 40, "size": [48, 64], "seed": 0}) != keys.synthetic_key(
        {"count": 40, "size": [48, 64], "seed": 1}
    )
    assert keys.zenodo_key(7639190) == "zenodo-7639190"
