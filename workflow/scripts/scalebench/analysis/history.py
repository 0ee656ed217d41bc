"""A history of finished studies (`history.path`): a folder a person can read, copy and back up.

A site reruns its study after each upgrade of a driver, NCCL or a framework, or on new nodes; kept
one after another, the studies show when a figure changed and what changed with it. The history is
plain files, one folder per study, named by the study's id:

    <history>/
        .history.lock               taken while a study is added (two adds at once both land)
        3f9c2a7b1e04/               one entry: a study, added once
            entry.json              what the entry is (below)
            runs.csv  scaling.csv  verdicts.csv  provenance.csv   always
            epochs.csv  answer.json  ...   the study's other summary tables, as they were

The study id is the first 12 hex digits of the sha256 of the study's runs.csv: the same study gives
the same id wherever it is added from, so adding it again writes nothing. The tables are copied
byte for byte from the study's results/summary/. entry.json (format FORMAT) holds:

- ``format``: the entry's format version; a reader skips an entry of another version, saying so;
- ``study_id``, ``added`` (when it was added, UTC), ``study``: the study's own dates (the earliest
  ``start`` and latest ``end`` of its cells in runs.csv, null where the tables predate them), its
  cells and those that ended ok;
- ``provenance``: per runs.csv column or site field, the distinct values over the study's own cells
  (``versions``, ``driver``, ``nccl``, ``devices``, ``nodes``, ``hosts``, ``config_hash``,
  ``data_key``), and ``unrecorded``: those the tables did not hold (older tables);
- ``git_commit``: the project's commits the cells ran (empty where none was recorded);
- ``files``: each copied file's sha256, which a reader checks: a file changed or lost since it was
  added makes the entry skipped with the reason, never a wrong figure.

An entry is written into a hidden folder inside the history and renamed into place at the end, so
a reader sees a whole entry or none, and a study refused (a table missing, unreadable, truncated
or without the columns the history needs) leaves the history exactly as it was.

As a database: one table per summary table (runs, scaling, verdicts, provenance, epochs, ...), each
the union of the entries' CSVs with a ``study_id`` column added as the first part of its key (runs:
study_id + the cell's keys); one ``studies`` table of the entry.json fields keyed by study_id, with
``provenance`` and ``files`` as child tables (study_id, name, value). Loading is a loop over the
entry folders; nothing in an entry needs this project to be read.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from scalebench import locks
from scalebench.analysis.baseline_tables import REQUIRED_COLUMNS
from scalebench.cell import OWN_SOURCE
from scalebench.files import WriteFailed

FORMAT = 1
ENTRY = "entry.json"
LOCK = ".history"  # the lock file .history.lock: hidden, as every name of the history's own
ADDING = ".adding-"  # an entry being written: hidden until it is renamed into place
ID_DIGITS = 12
# The tables every entry has and the columns the history needs of each: runs.csv's are those a
# comparison with the study needs (compare.baseline), the others' what names a row.
REQUIRED = {
    "runs.csv": list(REQUIRED_COLUMNS),
    "scaling.csv": ["framework", "backend", "gpus"],
    "verdicts.csv": ["kind", "gpus", "a", "b", "verdict"],
    "provenance.csv": ["framework", "backend", "gpus", "seed", "status"],
}
ANSWER = "answer.json"
# runs.csv columns whose distinct values describe where and with what the study ran
PROVENANCE = ("versions", "devices", "nodes", "hosts", "config_hash", "data_key")
LISTS = ("devices", "hosts")  # comma-separated in a cell's row: counted one by one
SITE = ("driver", "nccl")  # from runs.csv's site column: the driver, NCCL as the ranks loaded it
ALSO_READ = ("git_commit", "start", "end")  # the other runs.csv columns the entry reads


class DamagedStudy(ValueError):
    """A study whose tables cannot go into the history; the message names the file and what is wrong."""


class HistoryError(RuntimeError):
    """The history folder cannot take the study (not a folder, or its entry of this study is damaged)."""


@dataclass(frozen=True)
class Entry:
    """One study in the history, as its entry.json says (module docstring)."""

    study_id: str
    folder: Path
    added: str
    start: str | None
    end: str | None
    cells: int
    ok: int
    provenance: dict[str, list[str]]
    unrecorded: list[str]
    git_commit: list[str]
    files: dict[str, str]
    format: int = FORMAT
    new: bool = field(default=False, compare=False)  # add's answer: False where it was already there

    def record(self) -> dict:
        """entry.json's content."""
        return {
            "format": self.format,
            "study_id": self.study_id,
            "added": self.added,
            "study": {"start": self.start, "end": self.end, "cells": self.cells, "ok": self.ok},
            "provenance": self.provenance,
            "unrecorded": self.unrecorded,
            "git_commit": self.git_commit,
            "files": self.files,
        }


@dataclass(frozen=True)
class Skipped:
    """A folder of the history that read() could not take as an entry, and why."""

    folder: Path
    reason: str


def add(study_results: Path, history: Path) -> Entry:
    """Add the finished study whose results folder (the one holding summary/) is `study_results` to
    `history` as one entry; the entry already there (`new` False, nothing written) where the study
    was added before. DamagedStudy (the history untouched) where a table cannot be taken."""
    tables = study_files(Path(study_results) / "summary")
    study_id = id_of(tables["runs.csv"])
    history = Path(history).expanduser()
    try:
        history.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise HistoryError(f"the history {history} cannot be created: {error}") from error
    with locks.held(LOCK, history):  # one add at a time: the check below and the rename are one step
        if (history / study_id).exists():
            found = read_entry(history / study_id)
            if isinstance(found, Skipped):
                raise HistoryError(
                    f"{study_results} is already in the history as {found.folder}, whose entry is damaged "
                    f"({found.reason}): move that folder away to add the study again"
                )
            return found
        remove_unfinished(history)
        entry = describe(study_id, history / study_id, tables)
        write_entry(entry, tables)
    return replace(entry, new=True)


def id_of(runs_csv: bytes) -> str:
    """A study's id: the start of its runs.csv's sha256 (the same study gives the same id anywhere)."""
    return hashlib.sha256(runs_csv).hexdigest()[:ID_DIGITS]


def provenance_of(runs_csv: bytes) -> dict[str, list[str]]:
    """The provenance an entry of this runs.csv would record (entry.json's `provenance`)."""
    return describe("", Path(), {"runs.csv": runs_csv}).provenance


def read(history: Path) -> tuple[list[Entry], list[Skipped]]:
    """Every entry of `history`, oldest study first (by its first cell's start, else when it was
    added), and the folders skipped with the reason (another format, a file changed or lost).
    Hidden names (the lock, an entry being written) and plain files are not entries."""
    history = Path(history).expanduser()
    entries: list[Entry] = []
    skipped: list[Skipped] = []
    folders = (
        sorted(p for p in history.iterdir() if p.is_dir() and not p.name.startswith(".")) if history.is_dir() else []
    )
    for folder in folders:
        found = read_entry(folder)
        (skipped if isinstance(found, Skipped) else entries).append(found)
    entries.sort(key=oldest_first)
    return entries, skipped


def oldest_first(entry: Entry) -> tuple[str, str, str]:
    """The history's order: by the study's first cell's start, else when it was added."""
    return (entry.start or entry.added, entry.added, entry.study_id)


def study_files(summary: Path) -> dict[str, bytes]:
    """Each file the entry copies, read once (the copies and their checks are of the same bytes):
    the REQUIRED tables, the other summary CSVs and answer.json where present; DamagedStudy naming
    the first file that is missing, unreadable, truncated or without the columns the history needs."""
    if not summary.is_dir():
        raise DamagedStudy(
            f"{summary}: no such folder (name a finished study's results folder, the one holding summary/)"
        )
    others = sorted(p.name for p in summary.glob("*.csv") if p.name not in REQUIRED)
    names = [*REQUIRED, *others, *([ANSWER] if (summary / ANSWER).is_file() else [])]
    tables = {}
    for name in names:
        path = summary / name
        if not path.is_file():
            raise DamagedStudy(f"{path}: missing (a finished study's summary holds it: run the analysis first)")
        try:
            data = path.read_bytes()
        except OSError as error:
            raise DamagedStudy(f"{path}: cannot be read ({error.strerror})") from error
        problem = json_problem(data) if name == ANSWER else csv_problem(data, REQUIRED.get(name, []))
        if problem:
            raise DamagedStudy(f"{path}: {problem}")
        tables[name] = data
    if len(csv_rows(tables["runs.csv"])) < 2:
        raise DamagedStudy(f"{summary / 'runs.csv'}: holds no cells")
    return tables


def csv_rows(data: bytes) -> list[list[str]]:
    """A CSV's rows, its header first (strict: a quote left open at the end is an error)."""
    return list(csv.reader(io.StringIO(data.decode("utf-8"), newline=""), strict=True))


def csv_problem(data: bytes, columns: list[str]) -> str | None:
    """What is wrong with a summary CSV the entry copies, or None. pandas ends every table it writes
    with a newline and gives every row the header's fields: a file that does not was cut short."""
    if not data:
        return "empty (a truncated file: the analysis writes at least a header)"
    if not data.endswith(b"\n"):
        return "truncated: its last line ends without a newline"
    try:
        rows = csv_rows(data)
    except UnicodeDecodeError as error:
        return f"not UTF-8 text ({error.reason} at byte {error.start})"
    except csv.Error as error:
        return f"not a whole CSV file ({error}): truncated or damaged"
    header = rows[0] if rows else []
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            return f"row {number} has {len(row)} fields and the header {len(header)}: truncated or damaged"
    missing = [column for column in columns if column not in header]
    if missing:
        return f"lacks the column(s) {', '.join(missing)}, which the history needs (tables of an older version?)"
    return None


def json_problem(data: bytes) -> str | None:
    """What is wrong with answer.json, or None."""
    try:
        json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return f"not whole JSON ({error}): truncated or damaged"
    return None


def describe(study_id: str, folder: Path, tables: dict[str, bytes]) -> Entry:
    """The entry of a study from its tables: dates, cells and provenance from its own rows of runs.csv."""
    reader = csv.DictReader(io.StringIO(tables["runs.csv"].decode("utf-8"), newline=""))
    # the study's own cells: an imported study's rows (legacy) carry no provenance; older tables no source
    own = [row for row in reader if row.get("source") in (OWN_SOURCE, "", None)]
    header = reader.fieldnames or []
    provenance = {column: distinct(value for row in own for value in values(row, column)) for column in PROVENANCE}
    provenance |= site_values(own)
    unrecorded = [name for name in (*PROVENANCE, *ALSO_READ) if name not in header]
    unrecorded += list(SITE) if "site" not in header else []
    starts = [time for row in own if (time := moment(row.get("start")))]
    ends = [time for row in own if (time := moment(row.get("end")))]
    return Entry(
        study_id=study_id,
        folder=folder,
        added=datetime.now(UTC).isoformat(timespec="seconds"),
        start=min(starts).isoformat() if starts else None,
        end=max(ends).isoformat() if ends else None,
        cells=len(own),
        ok=sum(row.get("status") == "ok" for row in own),
        provenance=provenance,
        unrecorded=unrecorded,
        git_commit=distinct(row.get("git_commit") for row in own),
        files={name: hashlib.sha256(data).hexdigest() for name, data in tables.items()},
    )


def values(row: dict, column: str) -> list[str]:
    """A runs.csv row's value of `column`, split where the column lists several (LISTS)."""
    text = row.get(column) or ""
    return text.split(",") if column in LISTS else [text]


def distinct(found: Iterable[str | None]) -> list[str]:
    """The non-empty values, once each, sorted."""
    return sorted({text.strip() for text in found if text and text.strip()})


def site_values(rows: list[dict]) -> dict[str, list[str]]:
    """The driver and NCCL versions the cells' site recorded (runs.csv's site: run.json's, flattened:
    `driver`, and `libraries.nccl.<library>` for each NCCL the ranks loaded)."""
    found: dict[str, set[str]] = {name: set() for name in SITE}
    for row in rows:
        try:
            site = json.loads(row.get("site") or "{}")
        except json.JSONDecodeError:  # a hand-edited cell: its site says nothing
            continue
        for key, value in site.items() if isinstance(site, dict) else ():
            if key == "driver" or key.startswith("libraries.nccl."):
                found["driver" if key == "driver" else "nccl"].add(str(value))
    return {name: sorted(seen) for name, seen in found.items()}


def moment(text: str | None) -> datetime | None:
    """A runs.csv time (ISO 8601; UTC where it names no zone, as the cells write it), or None where
    empty or unreadable."""
    try:
        time = datetime.fromisoformat(text) if text else None
    except ValueError:
        return None
    if time is None:
        return None
    return time.astimezone(UTC) if time.tzinfo else time.replace(tzinfo=UTC)


def remove_unfinished(history: Path) -> None:
    """Remove what an add killed before its rename left (the caller holds the lock: no other add is writing)."""
    for folder in history.glob(f"{ADDING}*"):
        shutil.rmtree(folder, ignore_errors=True)


def write_entry(entry: Entry, tables: dict[str, bytes]) -> None:
    """Write the entry into a hidden folder beside its place and rename it there (whole or not at all)."""
    temporary = entry.folder.with_name(f"{ADDING}{entry.study_id}-{os.getpid()}")
    files = {**tables, ENTRY: (json.dumps(entry.record(), indent=1, sort_keys=True) + "\n").encode()}
    try:
        temporary.mkdir()
        for name, data in files.items():
            with open(temporary / name, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        os.rename(temporary, entry.folder)
        synced(entry.folder.parent)  # the rename itself survives a crash of the node
    except OSError as error:
        raise WriteFailed(entry.folder, error) from error
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def synced(folder: Path) -> None:
    """Flush a folder's own record (the names in it) to the disk."""
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def read_entry(folder: Path) -> Entry | Skipped:
    """The entry in `folder`, or why it is skipped: no or unreadable entry.json, another format, a
    file lost or changed since it was added."""
    try:
        record = json.loads((folder / ENTRY).read_text())
    except FileNotFoundError:
        return Skipped(folder, f"no {ENTRY}: not an entry of the history")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        return Skipped(folder, f"{ENTRY} cannot be read ({error})")
    version = record.get("format") if isinstance(record, dict) else None
    if version != FORMAT:
        return Skipped(folder, f"{ENTRY} is of format {version!r}; this version of scalebench reads format {FORMAT}")
    try:
        entry = entry_of(folder, record)
    except (KeyError, TypeError, ValueError) as error:
        return Skipped(folder, f"{ENTRY} lacks or garbles {error} (edited by hand?)")
    problem = files_problem(entry)
    return Skipped(folder, problem) if problem else entry


def entry_of(folder: Path, record: dict) -> Entry:
    """An Entry from entry.json's content (KeyError, TypeError naming what is missing or wrong)."""
    study = record["study"]
    return Entry(
        study_id=str(record["study_id"]),
        folder=folder,
        added=str(record["added"]),
        start=study["start"],
        end=study["end"],
        cells=int(study["cells"]),
        ok=int(study["ok"]),
        provenance={str(k): list(v) for k, v in record["provenance"].items()},
        unrecorded=list(record["unrecorded"]),
        git_commit=list(record["git_commit"]),
        files={str(k): str(v) for k, v in record["files"].items()},
        format=record["format"],
    )


def files_problem(entry: Entry) -> str | None:
    """Why the entry's files are not those it was added with, or None."""
    if entry.study_id != entry.folder.name:
        return f"{ENTRY} names the study {entry.study_id}, and its folder is {entry.folder.name} (renamed by hand?)"
    lacking = [name for name in REQUIRED if name not in entry.files]
    if lacking:
        return f"{ENTRY} lists no {', '.join(lacking)}"
    for name, digest in entry.files.items():
        path = entry.folder / name
        try:
            data = path.read_bytes()
        except OSError as error:
            return f"{name} cannot be read ({error.strerror})"
        if hashlib.sha256(data).hexdigest() != digest:
            return (
                f"{name} is not the file that was added (its sha256 differs from {ENTRY}'s): changed or damaged since"
            )
    return None
