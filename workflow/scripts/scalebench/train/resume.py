"""What both frameworks' checkpoints share: whether one may be resumed, and the host RNG state.

A checkpoint is written for one configuration (the config hash covers the
settings and the exact arrays); a truncated one, or one written for another
configuration, is never fatal and never loaded: the cell warns and starts fresh.

Rank 0 decides: the epoch of the checkpoint it loads (0 without one) goes to every
rank, and the others load that checkpoint or say why they cannot. One rank that
cannot (a node-local folder, a shared filesystem that has not shown the file yet)
fails the whole cell at once with its reason, instead of starting from epoch 0 and
leaving the others waiting in a collective until its timeout.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

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


class ResumeMismatch(RuntimeError):
    """A rank cannot load the checkpoint rank 0 resumes from; the message names the ranks and why."""


def epoch_of(state: dict | None) -> int:
    """The epoch a loaded loop state resumes after (0: no checkpoint, start fresh)."""
    return int(state["epoch"]) if state is not None else 0


def problem(state: dict | None, epoch: int, folder: Path) -> str:
    """Why this rank cannot resume after `epoch` as rank 0 does ("" when it can)."""
    if state is None:
        # short: TensorFlow's ranks exchange these texts in 256 bytes
        return f"found no usable checkpoint (missing, unreadable or for another configuration) in {folder}"
    if epoch_of(state) != epoch:
        return f"loaded the checkpoint of epoch {epoch_of(state)} from {folder}"
    return ""


def check_agreement(epoch: int, problems: list[str]) -> None:
    """Raise ResumeMismatch unless every rank could load rank 0's checkpoint (`problems` by rank)."""
    failed = [f"rank {rank} {text}" for rank, text in enumerate(problems) if text]
    if failed:
        raise ResumeMismatch(
            f"rank 0 resumes from its checkpoint after epoch {epoch}, but " + "; ".join(failed) + ": every rank "
            "must see the cell's folder (a shared filesystem; not a node-local one)"
        )


class Ranks(Protocol):
    """What the agreement asks of the backend (train/interfaces.py Backend)."""

    rank: int

    def allreduce_max(self, values: np.ndarray) -> np.ndarray: ...

    def allgather_text(self, text: str) -> list[str]: ...


def agreed_state(ranks: Ranks, load: Callable[[], dict | None], folder: Path) -> dict | None:
    """The loop state every rank resumes from: rank 0 loads the checkpoint (`load`: into the model
    as built, from `folder`), if any, and tells the others its epoch; they load the same one, or the
    cell fails at once with their reasons (ResumeMismatch). None: every rank starts fresh."""
    root = ranks.rank == 0
    state = load() if root else None
    epoch = int(ranks.allreduce_max(np.array([epoch_of(state) if root else 0], dtype=np.float64))[0])
    mine = ""
    if epoch and not root:
        state = load()
        mine = problem(state, epoch, folder)
    check_agreement(epoch, ranks.allgather_text(mine))
    return state


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
