"""Safe extraction: unsafe, damaged and empty archives are refused and leave nothing behind."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from scalebench.data.extract import ExtractError, safe_extract


def make_tar(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                name, data = member
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def special(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info


def leftovers(parent: Path) -> list[str]:
    """Everything in `parent` except the archives: no target, no temporary sibling."""
    return sorted(p.name for p in parent.iterdir() if not p.name.endswith(".tar.gz"))


def test_extracts_each_archive_into_its_own_folder_and_replaces_the_target(tmp_path):
    images = make_tar(tmp_path / "images.tar.gz", [("SEM/a.png", b"1"), ("SEM/b.png", b"2")])
    masks = make_tar(tmp_path / "masks.tar.gz", [("a.png", b"3")])
    target = tmp_path / "raw"
    (target / "stale").mkdir(parents=True)
    safe_extract([images, masks], target)
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file()) == [
        "images/SEM/a.png",
        "images/SEM/b.png",
        "masks/a.png",
    ]
    assert leftovers(tmp_path) == ["raw"]


@pytest.mark.parametrize(
    ("member", "reason"),
    [
        (("../evil.txt", b"x"), "../evil.txt ('..' in the path)"),
        (("/tmp/evil-absolute.txt", b"x"), "/tmp/evil-absolute.txt (absolute path)"),
        (special("link", tarfile.SYMTYPE, "../../outside"), "link (link to ../../outside leaves the target folder)"),
        (special("abslink", tarfile.SYMTYPE, "/etc/passwd"), "abslink (link to absolute path /etc/passwd)"),
        (special("hard", tarfile.LNKTYPE, "../outside"), "hard (link to ../outside leaves the target folder)"),
        (special("null", tarfile.CHRTYPE), "null (device or FIFO file)"),
        (special("pipe", tarfile.FIFOTYPE), "pipe (device or FIFO file)"),
    ],
)
def test_unsafe_member_refuses_the_archive_and_writes_nothing(tmp_path, member, reason):
    archive = make_tar(tmp_path / "bad.tar.gz", [("ok.png", b"fine"), member])
    with pytest.raises(ExtractError) as error:
        safe_extract([archive], tmp_path / "raw")
    assert str(error.value) == f"bad.tar.gz: refused, 1 unsafe members: {reason}"
    assert leftovers(tmp_path) == []
    assert not Path("/tmp/evil-absolute.txt").exists()


def test_many_unsafe_members_name_the_first_three_and_count_the_rest(tmp_path):
    archive = make_tar(tmp_path / "bad.tar.gz", [(f"../e{i}", b"x") for i in range(5)])
    with pytest.raises(ExtractError, match=r"5 unsafe members: \.\./e0 .*\.\./e2 \('\.\.' in the path\); and 2 more$"):
        safe_extract([archive], tmp_path / "raw")


def test_truncated_archive_is_refused(tmp_path):
    good = make_tar(tmp_path / "full.tar.gz", [(f"f{i}.png", bytes(range(256)) * 200) for i in range(4)])
    data = good.read_bytes()
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(data[: len(data) // 2])
    good.unlink()
    with pytest.raises(ExtractError, match=r"^cut\.tar\.gz: not a readable tar archive \(truncated or corrupt\?\)"):
        safe_extract([cut], tmp_path / "raw")
    assert leftovers(tmp_path) == []


def test_empty_archive_is_refused(tmp_path):
    archive = make_tar(tmp_path / "empty.tar.gz", [special("just-a-folder", tarfile.DIRTYPE)])
    with pytest.raises(ExtractError, match=r"^empty\.tar\.gz: the archive is empty \(no regular files\)$"):
        safe_extract([archive], tmp_path / "raw")
    assert leftovers(tmp_path) == []


def test_a_failure_in_the_second_archive_keeps_the_old_target(tmp_path):
    good = make_tar(tmp_path / "images.tar.gz", [("a.png", b"1")])
    bad = make_tar(tmp_path / "masks.tar.gz", [("../a.png", b"1")])
    target = tmp_path / "raw"
    (target / "old").mkdir(parents=True)
    with pytest.raises(ExtractError, match="masks.tar.gz: refused"):
        safe_extract([good, bad], target)
    assert leftovers(tmp_path) == ["raw"]
    assert [p.name for p in target.iterdir()] == ["old"]
