"""Atomic file writes: a reader sees the old file or the whole new one, never half of one.

Every writer in the package (run.json, manifests, receipts, checkpoints) goes
through here: write beside the target under a hidden temporary name, then
rename over it (a rename within one folder is atomic on POSIX file systems).
A write that fails (a full file system, a quota, a file-size limit) leaves the
old file as it was and raises WriteFailed, which names the file and the error.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class WriteFailed(RuntimeError):
    """Writing a file failed (a full file system or quota, a file-size limit); the message names the
    file (not its temporary name) and the system's error."""

    def __init__(self, path: str | Path, error: BaseException):
        self.path = Path(path)
        self.error = error
        super().__init__(f"could not write {self.path}: {error_words(error, self.path.parent)}")


def error_words(error: BaseException, folder: str | Path = ".") -> str:
    """The system's words for `error` (the OSError behind a library's own error, without the
    temporary name it carries); where there is none, the library's words and what limits writing here."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno is not None:
            return f"[Errno {cause.errno}] {cause.strerror}"
        cause = cause.__cause__ or cause.__context__
    return f"{type(error).__name__}: {error} ({write_limits(folder)})"


def write_limits(folder: str | Path = ".") -> str:
    """What can stop a write here: the file system's free space and this process's file-size limit."""
    import resource

    try:
        stats = os.statvfs(folder)
        free = f"{stats.f_bavail * stats.f_frsize / 1e6:.0f} MB free on the file system"
    except OSError as error:
        free = f"free space unknown ({error.strerror})"
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    limit = "no file-size limit" if soft == resource.RLIM_INFINITY else f"a file-size limit of {soft} bytes"
    return f"{free}, {limit}"


def temporary_path(path: str | Path) -> Path:
    """A hidden name beside `path`, unique to this process."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


@contextmanager
def replaced_atomically(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces `path`, on failure it is removed (an
    OSError while writing becomes WriteFailed naming `path`)."""
    temporary = temporary_path(path)
    try:
        yield temporary
        os.replace(temporary, path)
    except OSError as error:
        raise WriteFailed(path, error) from error
    finally:
        if temporary.exists():
            temporary.unlink()


def write_text_atomic(path: str | Path, text: str) -> None:
    with replaced_atomically(path) as temporary:
        with open(temporary, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())


def json_safe(value: Any) -> Any:
    """JSON has no NaN: non-finite floats become null so no reader mistakes them for numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def write_json_atomic(path: str | Path, data: dict) -> None:
    """`data` as indented JSON with sorted keys (stable diffs), non-finite floats as null."""
    write_text_atomic(path, json.dumps(json_safe(data), indent=1, sort_keys=True) + "\n")
