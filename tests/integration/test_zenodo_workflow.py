"""The data rules end to end: zenodo (against the local stand-in) and folder sources."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile

import numpy as np
import pytest
from conftest import run_snakemake, tiny_config
from PIL import Image
from scalebench.data import synthetic
from zenodo_standin import ZenodoStandIn

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="the stand-in makes its certificates with openssl"),
]

RECORD = 7639190
MANIFEST = "prepared_data"  # the rule whose input is this study's manifest


def prepared_manifest(work) -> dict:
    """The one manifest of the study in `work` (its folder is named by the dataset settings)."""
    (path,) = (work / "results" / "data" / "prepared").glob("*/manifest.json")
    return json.loads(path.read_text())


def png(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def tar_gz(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def record_files(count: int = 10) -> dict[str, bytes]:
    """A record shaped like the real one: an images archive and masks.tar.gz, folder names unknown."""
    rng = np.random.default_rng(0)
    pairs = [synthetic.make_pair(rng, 48, 64) for _ in range(count)]
    return {
        "SEM_images.tar.gz": tar_gz({f"Indents/indent_{i:03d}.png": png(p[0]) for i, p in enumerate(pairs)}),
        "masks.tar.gz": tar_gz({f"masks/indent_{i:03d}.png": png(p[1]) for i, p in enumerate(pairs)}),
        "README.txt": b"about the record",
    }


@pytest.fixture
def zenodo(tmp_path, monkeypatch):
    with ZenodoStandIn(tmp_path / "standin") as standin:
        for name, value in standin.env().items():
            monkeypatch.setenv(name, value)
        yield standin


def zenodo_config(**zenodo: object) -> dict:
    return tiny_config(
        dataset={"source": "zenodo", "zenodo": {"record": RECORD, "retries": 1, "timeout_s": 10, **zenodo}}
    )


def test_zenodo_source_downloads_extracts_and_preprocesses(zenodo, tmp_path):
    files = zenodo.add_record(RECORD, record_files()).files
    work = tmp_path / "work"
    result = run_snakemake(work, zenodo_config(), "--cores", "1", MANIFEST)
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = prepared_manifest(work)
    assert manifest["source"] == "zenodo" and manifest["record"] == RECORD
    assert manifest["pairing"] == "stem" and manifest["counts"] == {"pairs": 10, "train": 7, "val": 1, "test": 2}
    assert manifest["files"][0] == {"image": "SEM_images/Indents/indent_000.png", "mask": "masks/masks/indent_000.png"}
    assert manifest["archives"] == [
        {"name": name, "md5": hashlib.md5(files[name].data).hexdigest(), "size": len(files[name].data)}
        for name in ("SEM_images.tar.gz", "masks.tar.gz")
    ]
    receipt = work / "resources" / "zenodo" / f"record-{RECORD}.json"
    assert receipt.stat().st_mode & 0o222 == 0, "the receipt is protected"
    assert not list((work / "results").rglob("*.tar.gz")), "downloads never go under results/"
    # Rerunning the later rules leaves the download alone.
    again = run_snakemake(work, zenodo_config(), "--cores", "1", MANIFEST, "--forcerun", "extract_dataset")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "localrule extract_dataset" in again.stdout + again.stderr
    assert "localrule train" not in again.stdout + again.stderr
    assert zenodo.downloads("masks.tar.gz") == 1 and receipt.exists()


def test_zenodo_bad_md5_fails_the_rule_and_leaves_nothing(zenodo, tmp_path):
    zenodo.add_record(RECORD, record_files(4), corrupt={"masks.tar.gz"})
    work = tmp_path / "work"
    result = run_snakemake(work, zenodo_config(), "--cores", "1", MANIFEST)
    assert result.returncode != 0
    log = (work / "results" / "logs" / "download_dataset.log").read_text()
    assert f"record {RECORD}: download failed: Aborting due to checksum error for masks.tar.gz." in log
    # The corrupt file is gone and there is no receipt; only the verified images archive waits
    # in the staging folder for the next attempt.
    downloaded = [p.relative_to(work).as_posix() for p in (work / "resources").rglob("*") if p.is_file()]
    assert sorted(downloaded) == [
        f"resources/zenodo/{RECORD}/.lock",
        f"resources/zenodo/{RECORD}/.partial/SEM_images.tar.gz",
    ]
    assert not (work / "results" / "data").exists()


def test_zenodo_glob_matching_nothing(zenodo, tmp_path):
    zenodo.add_record(RECORD, record_files(2))
    work = tmp_path / "work"
    result = run_snakemake(work, zenodo_config(files="*.zip"), "--cores", "1", MANIFEST)
    assert result.returncode != 0
    log = (work / "results" / "logs" / "download_dataset.log").read_text()
    assert f"no files in record {RECORD} match *.zip; files are: SEM_images.tar.gz, masks.tar.gz, README.txt" in log


def test_record_id_that_is_not_an_integer_stops_before_any_job(tmp_path):
    result = run_snakemake(tmp_path / "work", zenodo_config(record="seven"), "--cores", "1", "-n", MANIFEST)
    assert result.returncode != 0
    assert "config key 'dataset.zenodo.record': 'seven' is not of type 'integer'" in result.stdout + result.stderr


def test_folder_source_goes_through_the_same_discovery(tmp_path):
    folder = tmp_path / "my data"
    synthetic.write_dataset(folder, 10, 48, 64, seed=1)
    (folder / "images").rename(folder / "micrographs")
    (folder / "masks").rename(folder / "labels")
    work = tmp_path / "work"
    config = tiny_config(dataset={"source": "folder", "folder": str(folder)})
    result = run_snakemake(work, config, "--cores", "1", MANIFEST)
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = prepared_manifest(work)
    assert manifest["source"] == "folder" and manifest["folder"] == str(folder)
    assert manifest["files"][0] == {"image": "micrographs/sem_0000.png", "mask": "labels/sem_0000.png"}


def test_folder_source_with_no_images(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "notes.txt").write_text("nothing to see")
    work = tmp_path / "work"
    result = run_snakemake(
        work, tiny_config(dataset={"source": "folder", "folder": str(folder)}), "--cores", "1", MANIFEST
    )
    assert result.returncode != 0
    log = (work / "results" / "logs" / "preprocess_dataset.log").read_text()
    assert f"{folder}: no image files (.png, .tif, .tiff) found in it or below it" in log
