"""Where a cell's two records live on disk: metrics.jsonl and run.json, each written whole and
atomically, under its output name and under `.kept/` beside it (the same file, a hard link).

Snakemake removes a job's existing outputs before it runs the job (snakemake/jobs.py: Job.prepare
calls remove_existing_output; inside a SLURM job the jobstep's own Snakemake does it). When a
second job of a cell starts while the first still runs (a restarted Snakemake, a second instance
on the study), the second waits for the first (cluster/cell_holder.py), but the removal has
already taken the first one's records by their names. The kept name is no output, so Snakemake
leaves it, and `restore` links the output names back: the first job at its end, the second when it
adopts the first one's outcome. The writers read back through `read_text`, which falls back to the
kept name, so a record whose name was removed is continued, not restarted.

Written whole: a write that fails (a full file system, a quota) leaves the last complete file,
never half a line (files.py raises WriteFailed naming the file).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from scalebench import files

KEPT = ".kept"
NAMES = ("metrics.jsonl", "run.json")


def kept_path(path: str | Path) -> Path:
    path = Path(path)
    return path.parent / KEPT / path.name


def publish(path: str | Path, text: str) -> None:
    """Write `text` as `path`, atomically, and as its kept name: the kept one first, so it is never
    older than the output."""
    path, kept = Path(path), kept_path(path)
    kept.parent.mkdir(parents=True, exist_ok=True)
    with files.replaced_atomically(path) as temporary:
        with open(temporary, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        with files.replaced_atomically(kept) as twin:
            try:
                os.link(temporary, twin)
            except OSError:  # a file system without hard links: a second copy
                shutil.copyfile(temporary, twin)


def read_text(path: str | Path) -> str | None:
    """The record's text: under its output name, else under its kept name; None where neither exists."""
    for candidate in (Path(path), kept_path(path)):
        try:
            return candidate.read_text()
        except FileNotFoundError:
            continue
    return None


def write_run(path: str | Path, run: dict) -> None:
    """run.json: indented JSON with sorted keys, non-finite floats as null (files.json_safe)."""
    publish(path, json.dumps(files.json_safe(run), indent=1, sort_keys=True) + "\n")


def read_run(path: str | Path) -> dict | None:
    text = read_text(path)
    return json.loads(text) if text is not None else None


def record_line(record: dict) -> str:
    return json.dumps(files.json_safe(record), sort_keys=True) + "\n"


def write_metrics(path: str | Path, records: list[dict]) -> None:
    """metrics.jsonl with exactly `records`, one per line."""
    publish(path, "".join(record_line(record) for record in records))


def append_record(path: str | Path, record: dict) -> None:
    """`record` as the last line of metrics.jsonl, the file rewritten whole (a last line left
    truncated by a killed writer is dropped: records.read_metrics keeps what precedes it)."""
    text = read_text(path) or ""
    complete = text if text.endswith("\n") or not text else text[: text.rfind("\n") + 1]
    publish(path, complete + record_line(record))


def restore(folder: str | Path) -> list[str]:
    """Link back each record whose output name was removed while its kept name remains; the names restored."""
    folder = Path(folder)
    restored = []
    for name in NAMES:
        path, kept = folder / name, kept_path(folder / name)
        if path.exists() or not kept.exists():
            continue
        try:
            os.link(kept, path)
        except FileExistsError:  # written meanwhile
            continue
        except OSError:
            shutil.copyfile(kept, path)
        restored.append(name)
    return restored
