"""Download the files of a Zenodo record with zenodo_get, verified and resumable.

Layout under the download directory (shareable between checkouts):
  <record>/<file>               verified files, moved in only after their md5 matched
  <record>/.partial/            zenodo_get's working folder; a rerun skips verified files here
  record-<record>.json          the receipt: record, glob and each file's name, size and md5

The receipt is written last, so it exists only when every selected file is in
place with the md5 the record's own metadata gives. Nothing in it depends on
the time or the machine, so the same record gives the same receipt.
"""

from __future__ import annotations

import fcntl
import glob as globlib
import hashlib
import json
import os
import signal
from dataclasses import asdict, dataclass
from fnmatch import fnmatch
from pathlib import Path
from types import ModuleType

from scalebench.files import write_text_atomic


class DownloadError(RuntimeError):
    """The record could not be downloaded as configured; the message says why."""


@dataclass(frozen=True)
class RecordFile:
    name: str
    size: int
    md5: str


def _zenodo_get():
    """Import zenodo_get, keeping Ctrl-C as it was.

    zenodo_get installs a SIGINT handler at import time (for its CLI) that turns
    the first Ctrl-C into a soft abort; a library caller wants Ctrl-C to stop.
    """
    previous = signal.getsignal(signal.SIGINT)
    import zenodo_get
    from zenodo_get import downloader, metadata

    signal.signal(signal.SIGINT, previous)
    return zenodo_get, downloader, metadata


def md5sum(path: str | Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def receipt_path(directory: str | Path, record: int) -> Path:
    return Path(directory) / f"record-{int(record)}.json"


def record_files(metadata: dict, record: int) -> list[RecordFile]:
    """Name, size and md5 of every file of a record, from its API metadata."""
    files = []
    for entry in metadata.get("files") or []:
        name = entry.get("filename") or entry.get("key")
        checksum = entry.get("checksum", "")
        algorithm, _, value = checksum.rpartition(":")
        if not name or (algorithm and algorithm != "md5") or not value:
            raise DownloadError(f"record {record}: file entry {entry.get('id', '?')} has no name or no md5 checksum")
        files.append(RecordFile(name, int(entry.get("filesize") or entry.get("size") or 0), value.strip()))
    return files


def select_files(files: list[RecordFile], pattern: str, record: int) -> list[RecordFile]:
    """The files matching `pattern`; an error listing the record's files if none does."""
    if not files:
        raise DownloadError(f"record {record} has no files")
    chosen = [f for f in files if fnmatch(f.name, pattern)]
    if not chosen:
        names = ", ".join(f.name for f in files)
        raise DownloadError(f"no files in record {record} match {pattern}; files are: {names}")
    return chosen


def fetch_metadata(record: int, timeout_s: float, retries: int) -> dict:
    """The record's metadata, fetched by zenodo_get's own client and URL."""
    _, downloader, metadata = _zenodo_get()
    downloader.configure_client(retry_total=max(0, retries - 1), verbosity=1)
    try:
        result = metadata.fetch_record_metadata(
            str(record), False, None, timeout_s, True, get_client=downloader.get_client
        )
    except (ConnectionError, ValueError, TypeError) as error:
        raise DownloadError(f"record {record}: could not read its metadata: {error}") from None
    if not result:
        raise DownloadError(f"record {record}: empty metadata")
    return result


def _verified(path: Path, expected: RecordFile) -> bool:
    return path.is_file() and path.stat().st_size == expected.size and md5sum(path) == expected.md5


def _remove_unverified(staging: Path, wanted: list[RecordFile]) -> None:
    """Delete staged files that are incomplete or wrong: nothing half-written survives a failure."""
    for item in wanted:
        path = staging / item.name
        if path.exists() and not _verified(path, item):
            path.unlink()


def download_record(
    record: int,
    pattern: str,
    directory: str | Path,
    retries: int = 3,
    timeout_s: float = 120,
    pause_s: float = 1.0,
) -> dict:
    """Download the files of `record` matching `pattern` into `directory`; return the receipt.

    Files already in place with the right md5 are not downloaded again, and
    verified files left in the staging folder by an interrupted run are reused.
    """
    record = int(record)
    zenodo_get, _, _ = _zenodo_get()
    target = Path(directory).resolve() / str(record)
    staging = target / ".partial"
    staging.mkdir(parents=True, exist_ok=True)
    with open(target / ".lock", "w") as lock:
        # Several checkouts may share the directory: one downloads, the others wait.
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
        except OSError as error:  # some network file systems refuse locks
            print(f"zenodo: cannot lock {target / '.lock'} ({error}); go on without a lock", flush=True)
        metadata = fetch_metadata(record, timeout_s, retries)
        wanted = select_files(record_files(metadata, record), pattern, record)
        missing = [f for f in wanted if not _verified(target / f.name, f)]
        print(f"zenodo: record {record}: {len(wanted)} files match {pattern}, {len(missing)} to download")
        if missing:
            _download(zenodo_get, record, staging, missing, retries, timeout_s, pause_s)
            _move_verified(record, staging, target, missing)
        receipt = {
            "record": record,
            "doi": metadata.get("doi") or metadata.get("metadata", {}).get("doi"),
            "title": metadata.get("metadata", {}).get("title"),
            "glob": pattern,
            "files": [asdict(f) for f in wanted],
        }
        write_text_atomic(receipt_path(directory, record), json.dumps(receipt, indent=1, sort_keys=True) + "\n")
    if not any(staging.iterdir()):
        staging.rmdir()
    return receipt


def _download(
    zenodo_get: ModuleType,
    record: int,
    staging: Path,
    missing: list[RecordFile],
    retries: int,
    timeout_s: float,
    pause_s: float,
) -> None:
    """Download the `missing` files into `staging` with zenodo_get; on failure, remove what it left
    unverified there and raise DownloadError."""
    try:
        zenodo_get.download(
            record=str(record),
            output_dir=staging,
            # Exact names, escaped, so the glob cannot pick other files.
            file_glob=tuple(globlib.escape(f.name) for f in missing),
            retry_attempts=retries - 1,
            retry_pause=pause_s,
            timeout=timeout_s,
            max_http_retries=retries - 1,
            verbosity=1,
            exceptions_on_failure=True,
        )
    except Exception as error:
        _remove_unverified(staging, missing)
        raise DownloadError(f"record {record}: download failed: {error}") from None


def _move_verified(record: int, staging: Path, target: Path, missing: list[RecordFile]) -> None:
    """Move each downloaded file from `staging` into `target` once its md5 matches the record's;
    raise DownloadError at the first one absent (removing every unverified one) or different
    (removing it)."""
    for item in missing:
        staged = staging / item.name
        if not staged.is_file():
            _remove_unverified(staging, missing)
            raise DownloadError(f"record {record}: {item.name} was not downloaded")
        actual = md5sum(staged)
        if actual != item.md5:
            staged.unlink()
            raise DownloadError(
                f"record {record}: md5 of {item.name} is {actual}, the record says {item.md5}; file removed"
            )
        os.replace(staged, target / item.name)


def verified_archives(receipt_file: str | Path) -> tuple[dict, list[Path]]:
    """The receipt and its files' paths, after checking each file's md5 again.

    The download directory may be shared, so a file can change after download.
    """
    receipt = json.loads(Path(receipt_file).read_text())
    folder = Path(receipt_file).parent / str(receipt["record"])
    paths = []
    for item in receipt["files"]:
        path = folder / item["name"]
        if not path.is_file():
            raise DownloadError(f"{path} is listed in {receipt_file} but missing; delete the receipt to download again")
        actual = md5sum(path)
        if actual != item["md5"]:
            raise DownloadError(
                f"{path}: md5 {actual} differs from {item['md5']} in {receipt_file}; delete both to download again"
            )
        paths.append(path)
    return receipt, paths
