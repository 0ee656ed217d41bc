"""Safe, atomic extraction of downloaded tar archives.

Every member is checked before anything is written: absolute paths, ``..``
components, links that leave the target and device or FIFO files refuse the
whole archive. Extraction itself uses tarfile's ``data`` filter as a second
line of defence. Each archive goes into its own sub-folder (named after the
archive) of a temporary sibling of the target, which replaces the target by a
rename only when every archive extracted; a failure leaves no partial tree.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tarfile
import tempfile
from pathlib import Path

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar")


class ExtractError(RuntimeError):
    """An archive is unsafe, damaged or empty; the message names it."""


def archive_stem(path: Path) -> str:
    name = path.name
    for suffix in ARCHIVE_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def _problem(member: tarfile.TarInfo) -> str | None:
    """Why extracting `member` would be unsafe, or None."""
    name = member.name
    if name.startswith("/") or posixpath.isabs(name) or (len(name) > 1 and name[1] == ":"):
        return "absolute path"
    if ".." in Path(name).parts or ".." in name.split("/"):
        return "'..' in the path"
    if member.ischr() or member.isblk() or member.isfifo() or member.isdev():
        return "device or FIFO file"
    if member.issym() or member.islnk():
        target = member.linkname
        if posixpath.isabs(target):
            return f"link to absolute path {target}"
        base = posixpath.dirname(name) if member.issym() else ""
        resolved = posixpath.normpath(posixpath.join(base, target))
        if resolved == ".." or resolved.startswith("../"):
            return f"link to {target} leaves the target folder"
    return None


def _summary(items: list[str], limit: int = 3) -> str:
    shown = "; ".join(items[:limit])
    return shown + (f"; and {len(items) - limit} more" if len(items) > limit else "")


def check_members(archive: Path, members: list[tarfile.TarInfo]) -> None:
    """Raise ExtractError naming the first unsafe members of `archive`."""
    bad = [f"{m.name} ({reason})" for m in members if (reason := _problem(m))]
    if bad:
        raise ExtractError(f"{archive.name}: refused, {len(bad)} unsafe members: {_summary(bad)}")
    if not any(m.isfile() for m in members):
        raise ExtractError(f"{archive.name}: the archive is empty (no regular files)")


def _read_members(archive: Path) -> list[tarfile.TarInfo]:
    try:
        with tarfile.open(archive, "r:*") as tar:
            return tar.getmembers()
    except (tarfile.ReadError, EOFError, OSError) as error:
        raise ExtractError(f"{archive.name}: not a readable tar archive (truncated or corrupt?): {error}") from None


def safe_extract(archives: list[Path], target: str | Path) -> Path:
    """Extract each archive into ``target/<archive stem>/``, atomically; return target."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if not archives:
        raise ExtractError("no archives to extract")
    stems = [archive_stem(Path(a)) for a in archives]
    if len(set(stems)) != len(stems):
        raise ExtractError(f"archives with the same name stem cannot share the target: {stems}")
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        for archive, stem in zip(map(Path, archives), stems):
            check_members(archive, _read_members(archive))
            destination = staging / stem
            destination.mkdir()
            try:
                with tarfile.open(archive, "r:*") as tar:
                    tar.extractall(destination, filter="data")
            except (tarfile.TarError, EOFError, OSError) as error:
                raise ExtractError(f"{archive.name}: extraction failed: {error}") from None
            print(f"extract: {archive.name} -> {stem}/", flush=True)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
