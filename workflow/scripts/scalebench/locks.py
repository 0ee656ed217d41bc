"""Lock files that a process holds until it exits, shared by every user of the host.

A launcher holds a cell's port block (cluster/ports.py) and, locally, its GPU ids and
cores (launch/local_pool.py) this way: an flock on one file per item, taken without
waiting, kept open by the process. The kernel drops the lock when the process ends,
however it ends, so a killed cell gives its items back by itself.

`held` is the waiting kind, for a short piece of work that must not run twice at once (adding a
study to the history of studies, analysis/history.py): it waits for the lock, holds it for a
`with` block and lets it go at the block's end (or when the process dies inside it).
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

_held: list[IO] = []  # the lock files this process holds for its lifetime


def shared_folder(folder: str | Path) -> Path:
    """`folder`, created where missing and open to every user of the host (sticky, as /tmp)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        os.chmod(folder, 0o1777)
    except PermissionError:  # another user's folder: it was opened when it was made
        pass
    return folder


def try_lock(name: str, folder: str | Path) -> IO | None:
    """The open, locked file `name`.lock in `folder`, or None when another process holds it."""
    path = Path(folder) / f"{name}.lock"
    try:
        handle = open(path, "a")
    except PermissionError:  # another user's file: a read-only descriptor can still be locked
        handle = open(path)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        handle.close()
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    return handle


def keep(handle: IO) -> None:
    """Hold the lock of `handle` until this process exits."""
    _held.append(handle)


@contextmanager
def held(name: str, folder: str | Path) -> Iterator[None]:
    """Hold `name`.lock in `folder` for the `with` block, waiting while another process holds it."""
    with open(Path(folder) / f"{name}.lock", "a") as handle:  # "a": opening neither empties nor dates it
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield  # closing the file at the block's end lets the lock go
