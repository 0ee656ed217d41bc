"""Config validation of the dataset section: bad values name their key."""

from __future__ import annotations

import pytest
from scalebench import config as sb_config


@pytest.mark.parametrize("record", ["abc", "7639190.0", 1.5, True, None])
def test_record_id_must_be_an_integer(schema, record):
    with pytest.raises(sb_config.ConfigError) as error:
        sb_config.validate({"dataset": {"source": "zenodo", "zenodo": {"record": record}}}, schema)
    assert f"config key 'dataset.zenodo.record': {record!r} is not of type 'integer'" in str(error.value)


def test_record_id_given_as_text_is_read_as_an_integer(schema):
    # what `--config 'dataset={"zenodo": {"record": 7639190}}'` hands over
    config = sb_config.validate({"dataset": {"source": "zenodo", "zenodo": {"record": "7639190"}}}, schema)
    assert config["dataset"]["zenodo"]["record"] == 7639190


def test_zenodo_defaults_point_at_the_published_record_outside_results(schema):
    zenodo = sb_config.validate({"dataset": {"source": "zenodo"}}, schema)["dataset"]["zenodo"]
    assert zenodo == {
        "record": 7639190,
        "files": "*.tar.gz",
        "directory": "resources/zenodo",
        "retries": 3,
        "timeout_s": 120,
    }


def test_folder_source_needs_a_folder(schema):
    with pytest.raises(
        sb_config.ConfigError, match=r"config key 'dataset.folder': required when dataset.source is folder"
    ):
        sb_config.validate({"dataset": {"source": "folder"}}, schema)
