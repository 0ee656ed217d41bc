"""Atomic file writes: a reader sees the old file or the whole new one, never half of one.

Every writer in the package (run.json, manifests, receipts, checkpoints) goes
through here: write beside the target under a hidden temporary name, then
rename over it (a rename within one folder is atomic on POSIX file systems).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def temporary_path(path: str | Path) -> Path:
    """A hidden name beside `path`, unique to this process."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


@contextmanager
def replaced_atomically(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces `path`, on failure it is removed."""
    temporary = temporary_path(path)
    try:
        yield temporary
        os.replace(temporary, path)
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
