"""Names of the data folders, derived from the settings that make their contents.

Two studies with other dataset settings in one results/ folder prepare their arrays
side by side instead of replacing each other's, so a finished cell's arrays are never
rebuilt under it; each cell records the key of the arrays it trained on (run.json
data_key) and the report flags a cell whose key is not the study's.

Each key digests the settings it names, never a whole config section: a release that adds a
key with a default keeps every folder name, so prepared data stays valid across upgrades. A
setting added later that shapes the data joins its digest only where it differs from the value
that reproduces today's data (a test adds keys and checks the names).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def _digest(value: object, length: int = 10) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:length]


SYNTHETIC_SHAPING = ("count", "size", "seed")  # dataset.synthetic's keys that make the raw pairs


def _synthetic(synthetic: dict) -> dict:
    return {name: synthetic[name] for name in SYNTHETIC_SHAPING}


def source_description(dataset: dict) -> dict:
    """What identifies the raw images of dataset.source (recorded in the manifest too)."""
    source = dataset["source"]
    if source == "folder":
        return {"source": source, "folder": str(Path(dataset["folder"]).expanduser().resolve())}
    if source == "zenodo":
        return {"source": source, "record": int(dataset["zenodo"]["record"]), "files_glob": dataset["zenodo"]["files"]}
    return {"source": source, "synthetic": _synthetic(dataset["synthetic"])}


def synthetic_key(synthetic: dict) -> str:
    """The folder name of a generated raw tree (dataset.synthetic: count, size, seed)."""
    return f"synthetic-{_digest(_synthetic(synthetic))}"


def zenodo_key(record: int) -> str:
    """The folder name of an extracted Zenodo record."""
    return f"zenodo-{int(record)}"


def prepared_key(dataset: dict) -> str:
    """The folder name of the prepared arrays: source, size and a digest of every setting that shapes them."""
    height, width = dataset["image_size"]
    shaping = {
        "source": source_description(dataset),
        "image_size": [height, width],
        "test_fraction": dataset["test_fraction"],
        "val_fraction": dataset["val_fraction"],
        "split_seed": dataset["split_seed"],
        "max_nonbinary_fraction": dataset["max_nonbinary_fraction"],
    }
    return f"{dataset['source']}-{height}x{width}-{_digest(shaping)}"
