"""The sizes of the train/validation/test split, apart from numpy so the config check can use them."""

from __future__ import annotations


def split_counts(count: int, test_fraction: float, val_fraction: float) -> tuple[int, int, int]:
    """(train, validation, test) sizes of `count` pairs: each held-out part gets at least one pair."""
    n_test = max(1, round(count * test_fraction))
    n_val = max(1, round(count * val_fraction))
    return count - n_test - n_val, n_val, n_test
