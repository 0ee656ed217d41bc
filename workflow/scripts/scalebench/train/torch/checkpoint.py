"""Atomic, rank-0-written PyTorch checkpoints keyed by the config hash (checkpoint.pt)."""

from __future__ import annotations

from pathlib import Path

import torch

from scalebench.files import WriteFailed, replaced_atomically
from scalebench.train import resume


class Checkpoint:
    def __init__(self, directory: Path, config_hash: str) -> None:
        self.path = Path(directory) / "checkpoint.pt"
        self.config_hash = config_hash

    def save(self, state: dict) -> None:
        with replaced_atomically(self.path) as temporary:
            try:  # through a Python file, whose OSError (a full disk, a quota) torch's error carries
                with open(temporary, "wb") as handle:
                    torch.save({**state, "config_hash": self.config_hash}, handle)
            except RuntimeError as error:
                raise WriteFailed(self.path, error) from error

    def load(self) -> dict | None:
        """The stored state, or None (with a warning when one exists but cannot be used)."""
        if not self.path.exists():
            return None
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=False)
        except Exception as error:  # truncated or corrupt
            resume.ignore_unreadable(self.path, error)
            return None
        if not resume.matches(self.path, state.get("config_hash"), self.config_hash):
            return None
        return state


def remove(directory: Path) -> None:
    """Remove the cell's checkpoint (a finished cell keeps none, so a forced rerun starts fresh)."""
    (Path(directory) / "checkpoint.pt").unlink(missing_ok=True)
