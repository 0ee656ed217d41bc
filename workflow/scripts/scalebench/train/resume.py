"""What both frameworks' checkpoints share: whether one may be resumed, and the host RNG state.

A checkpoint is written for one configuration (the config hash covers the
settings and the exact arrays); a truncated one, or one written for another
configuration, is never fatal and never loaded: the cell warns and starts fresh.
"""

from __future__ import annotations

import random
import warnings
from pathlib import Path

import numpy as np


def ignore_unreadable(path: Path, error: object) -> None:
    warnings.warn(f"ignoring unreadable checkpoint {path}: {error}", stacklevel=3)


def matches(path: Path, written_for: str | None, config_hash: str) -> bool:
    """Whether a checkpoint was written for this cell's configuration; warns when it was not."""
    if written_for == config_hash:
        return True
    warnings.warn(
        f"ignoring checkpoint {path}: written for config {written_for}, this run is {config_hash}", stacklevel=3
    )
    return False


def host_rng_state() -> dict:
    """Python's and NumPy's generator states as JSON-able lists."""
    kind, keys, position, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    return {
        "numpy": [kind, keys.tolist(), position, has_gauss, cached],
        "python": [version, list(internal), gauss],
    }


def set_host_rng_state(state: dict) -> None:
    kind, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
