"""The download against the local Zenodo stand-in: the real zenodo_get code path over TLS."""

from __future__ import annotations

import json
import shutil

import pytest
from scalebench.data.zenodo import DownloadError, download_record, receipt_path, verified_archives
from zenodo_standin import ZenodoStandIn

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="the stand-in makes its certificates with openssl"),
]

RECORD = 4242
FILES = {"images.tar.gz": b"images" * 4000, "masks.tar.gz": b"masks" * 3000, "README.md": b"about"}


@pytest.fixture
def zenodo(tmp_path, monkeypatch):
    with ZenodoStandIn(tmp_path / "standin") as standin:
        for name, value in standin.env().items():
            monkeypatch.setenv(name, value)
        yield standin


def files_under(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name != ".lock")


def test_downloads_the_matching_files_verified_and_writes_a_receipt(zenodo, tmp_path):
    zenodo.add_record(RECORD, FILES)
    receipt = download_record(RECORD, "*.tar.gz", tmp_path / "dl", retries=1, timeout_s=10, pause_s=0)
    assert files_under(tmp_path / "dl") == ["4242/images.tar.gz", "4242/masks.tar.gz", "record-4242.json"]
    assert receipt["record"] == RECORD and receipt["doi"] == "10.5281/zenodo.4242"
    assert [f["name"] for f in receipt["files"]] == ["images.tar.gz", "masks.tar.gz"]
    assert json.loads(receipt_path(tmp_path / "dl", RECORD).read_text()) == receipt
    _, archives = verified_archives(receipt_path(tmp_path / "dl", RECORD))
    assert [a.read_bytes() for a in archives] == [FILES["images.tar.gz"], FILES["masks.tar.gz"]]
    # A second run finds the files verified in place and fetches nothing.
    download_record(RECORD, "*.tar.gz", tmp_path / "dl", retries=1, timeout_s=10, pause_s=0)
    assert zenodo.downloads("images.tar.gz") == zenodo.downloads("masks.tar.gz") == 1


def test_bad_md5_fails_and_leaves_no_file(zenodo, tmp_path):
    zenodo.add_record(RECORD, FILES, corrupt={"masks.tar.gz"})
    with pytest.raises(DownloadError) as error:
        download_record(RECORD, "masks.tar.gz", tmp_path / "dl", retries=2, timeout_s=10, pause_s=0)
    assert str(error.value) == f"record {RECORD}: download failed: Aborting due to checksum error for masks.tar.gz."
    assert files_under(tmp_path / "dl") == []


def test_glob_matching_nothing_lists_the_record_files(zenodo, tmp_path):
    zenodo.add_record(RECORD, FILES)
    with pytest.raises(DownloadError) as error:
        download_record(RECORD, "*.zip", tmp_path / "dl", retries=1, timeout_s=10)
    assert (
        str(error.value)
        == f"no files in record {RECORD} match *.zip; files are: images.tar.gz, masks.tar.gz, README.md"
    )
    assert files_under(tmp_path / "dl") == []


def test_unknown_record_names_the_url(zenodo, tmp_path):
    with pytest.raises(
        DownloadError, match=r"^record 99: could not read its metadata: HTTP error .* 404 .*zenodo.org/api/records/99"
    ):
        download_record(99, "*", tmp_path / "dl", retries=1, timeout_s=10)


def test_a_cut_transfer_is_retried_within_the_configured_attempts(zenodo, tmp_path):
    zenodo.add_record(RECORD, FILES, truncate={"masks.tar.gz": 1})
    download_record(RECORD, "masks.tar.gz", tmp_path / "dl", retries=2, timeout_s=10, pause_s=0)
    assert (tmp_path / "dl" / "4242" / "masks.tar.gz").read_bytes() == FILES["masks.tar.gz"]
    assert zenodo.downloads("masks.tar.gz") == 2


def test_an_interrupted_download_resumes_with_the_verified_files(zenodo, tmp_path):
    zenodo.add_record(RECORD, FILES, truncate={"masks.tar.gz": 1})
    with pytest.raises(DownloadError, match=r"download failed: Download aborted for masks.tar.gz after 0 retries"):
        download_record(RECORD, "*.tar.gz", tmp_path / "dl", retries=1, timeout_s=10, pause_s=0)
    # The cut file is gone; the complete one waits in the staging folder; no receipt yet.
    assert files_under(tmp_path / "dl") == ["4242/.partial/images.tar.gz"]
    download_record(RECORD, "*.tar.gz", tmp_path / "dl", retries=1, timeout_s=10, pause_s=0)
    assert files_under(tmp_path / "dl") == ["4242/images.tar.gz", "4242/masks.tar.gz", "record-4242.json"]
    assert zenodo.downloads("images.tar.gz") == 1 and zenodo.downloads("masks.tar.gz") == 2
    verified_archives(receipt_path(tmp_path / "dl", RECORD))


def test_a_file_changed_after_download_is_caught_before_extraction(zenodo, tmp_path):
    zenodo.add_record(RECORD, FILES)
    download_record(RECORD, "masks.tar.gz", tmp_path / "dl", retries=1, timeout_s=10)
    (tmp_path / "dl" / "4242" / "masks.tar.gz").write_bytes(b"changed")
    with pytest.raises(
        DownloadError, match=r"masks.tar.gz: md5 \w+ differs from \w+ in .*record-4242.json; delete both"
    ):
        verified_archives(receipt_path(tmp_path / "dl", RECORD))
