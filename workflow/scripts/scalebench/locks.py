"""Lock files that a process holds until it exits, shared by every user of the host.

A launcher holds a cell's port block (cluster/ports.py) and, locally, its GPU ids and
cores (launch/local_pool.py) this way: an flock on one file per item, taken without
waiting, kept open by the process. The kernel drops the lock when the process ends,
however it ends, so a killed cell gives its items back by itself.
"""

from __future__ import annotations

import errno
import fcntl
import os
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
