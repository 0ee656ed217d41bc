"""Atomic, rank-0-written PyTorch checkpoints keyed by the config hash (checkpoint.pt): restore()
loads one into the Model before the backend distributes it, a Checkpointer saves the distributed one."""

from __future__ import annotations

from pathlib import Path

import torch

from scalebench.files import WriteFailed, replaced_atomically
from scalebench.train import resume
from scalebench.train.interfaces import Backend
from scalebench.train.torch.model import Distributed, Model


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


def restore(model: Model, directory: Path, config_hash: str) -> dict | None:
    """Load the cell's checkpoint in `directory` into the model, optimizer, scaler and generators;
    its loop state, or None."""
    state = Checkpoint(directory, config_hash).load()
    if state is None:
        return None
    model.network.load_state_dict(state["model"])
    model.optimizer.load_state_dict(state["optimizer"])
    model.scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["torch_rng"])
    resume.set_host_rng_state(state["host_rng"])
    return state["loop"]


class Checkpointer:
    """The cell's checkpoint of the distributed model, in the cell's folder `out`."""

    def __init__(self, out: Path, config_hash: str, distributed: Distributed, backend: Backend) -> None:
        self.out, self.distributed, self.backend = Path(out), distributed, backend
        self.checkpoint = Checkpoint(self.out, config_hash)

    def save(self, state: dict, epoch: int) -> None:
        backend, distributed = self.backend, self.distributed
        if backend.rank != 0 and not backend.checkpoint_on_all_ranks:
            return
        # whole tensors, as an unsharded model holds them: a checkpoint restores into the plain
        # model and optimizer before the backend distributes them (FSDP: every rank gathers)
        model_state = backend.gather_state(distributed.raw.state_dict())
        optimizer_state = backend.gather_state(distributed.optimizer.state_dict())
        if backend.rank != 0:
            return
        self.checkpoint.save(
            {
                "model": model_state,
                "optimizer": optimizer_state,
                "scaler": distributed.scaler.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "host_rng": resume.host_rng_state(),
                "loop": state,
            }
        )

    def remove(self) -> None:
        remove(self.out)
