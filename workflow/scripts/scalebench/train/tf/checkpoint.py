"""Atomic, rank-0-written tf.train checkpoints keyed by the config hash (the checkpoint/ folder).

The folder holds one `ckpt-EPOCH` and TensorFlow's `checkpoint` state file,
which names it and is replaced atomically after the data is written, so an
interrupted save leaves the previous checkpoint in force. The loop's state, the
host RNG states and the config hash travel in a string variable next to model,
optimizer and TensorFlow's generator. restore() loads one into the Model before the backend
distributes it; a Checkpointer saves the distributed one.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import tensorflow as tf

from scalebench.files import WriteFailed
from scalebench.train import resume
from scalebench.train.interfaces import Backend
from scalebench.train.tf.model import Distributed, Model


class Checkpoint:
    META_KEY = "meta/.ATTRIBUTES/VARIABLE_VALUE"

    def __init__(self, directory: Path, config_hash: str, objects: dict, writes: bool, participates: bool):
        self.directory = Path(directory) / "checkpoint"
        self.config_hash = config_hash
        self.objects = objects
        self.writes = writes  # writes the real checkpoint (rank 0)
        self.participates = participates  # takes part in the save (all ranks where saving is a collective)
        # Built at the first save and reused: building them walks the whole object graph (0.4 s per epoch).
        self._meta: tf.Variable | None = None
        self._checkpoint: tf.train.Checkpoint | None = None
        self._manager: tf.train.CheckpointManager | None = None

    def save(self, meta: dict, epoch: int) -> None:
        if not (self.writes or self.participates):
            return
        if self._meta is None:
            self._meta = tf.Variable("", trainable=False)
            self._checkpoint = tf.train.Checkpoint(meta=self._meta, **self.objects)
            if self.writes:
                self._manager = tf.train.CheckpointManager(
                    self._checkpoint, self.directory, max_to_keep=1, checkpoint_name="ckpt"
                )
        self._meta.assign(json.dumps({**meta, "config_hash": self.config_hash}))
        if self._manager is not None:
            try:  # the manager names the new checkpoint only once it is whole: a failure keeps the last one
                self._manager.save(checkpoint_number=epoch)
            except (OSError, tf.errors.OpError) as error:  # a full disk, a quota: TensorFlow's error has no words
                raise WriteFailed(self.directory / f"ckpt-{epoch}", error) from error
            return
        scratch = Path(tempfile.mkdtemp(prefix="scalebench-ckpt-"))  # a participant's copy is thrown away
        try:
            self._checkpoint.write(str(scratch / "ckpt"))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def load(self) -> dict | None:
        """Restore `objects` and return the stored meta, or None (with a warning if one was unusable)."""
        path = tf.train.latest_checkpoint(str(self.directory)) if self.directory.exists() else None
        if path is None:
            if self.directory.exists() and any(self.directory.iterdir()):
                resume.ignore_unreadable(self.directory, "no complete checkpoint")
            return None
        try:  # read every tensor first: a truncated file fails here, before any variable changes
            reader = tf.train.load_checkpoint(path)
            for key in reader.get_variable_to_shape_map():
                reader.get_tensor(key)
            meta = json.loads(reader.get_tensor(self.META_KEY))
        except Exception as error:  # corrupt or not ours
            resume.ignore_unreadable(path, error)
            return None
        if not resume.matches(path, meta.get("config_hash"), self.config_hash):
            return None
        tf.train.Checkpoint(**self.objects).restore(path).assert_existing_objects_matched()
        return meta


def remove(directory: Path) -> None:
    """Remove the cell's checkpoint (a finished cell keeps none, so a forced rerun starts fresh)."""
    shutil.rmtree(Path(directory) / "checkpoint", ignore_errors=True)


def objects(network, optimizer) -> dict:
    """What a checkpoint holds beside its meta: the model, the optimizer and TensorFlow's generator."""
    return {"model": network, "optimizer": optimizer, "rng": tf.random.get_global_generator()}


def restore(model: Model, directory: Path, config_hash: str) -> dict | None:
    """Load the cell's checkpoint in `directory` into the model, optimizer and generators; its
    loop state, or None."""
    meta = Checkpoint(directory, config_hash, objects(model.network, model.optimizer), False, False).load()
    if meta is None:
        return None
    resume.set_host_rng_state(meta["host_rng"])
    return meta["loop"]


class Checkpointer:
    """The cell's checkpoint of the distributed model, in the cell's folder `out`: one Checkpoint for
    the run (it caches TensorFlow's manager)."""

    def __init__(self, out: Path, config_hash: str, distributed: Distributed, backend: Backend) -> None:
        self.out = Path(out)
        held = objects(distributed.network, distributed.optimizer)
        self.checkpoint = Checkpoint(self.out, config_hash, held, backend.rank == 0, backend.checkpoint_on_all_ranks)

    def save(self, state: dict, epoch: int) -> None:
        self.checkpoint.save({"loop": state, "host_rng": resume.host_rng_state()}, epoch)

    def remove(self) -> None:
        remove(self.out)
