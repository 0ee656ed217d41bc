"""What a rank refuses before training (preflight.py): a launch that does not fit the cell, a batch larger than a shard."""

from __future__ import annotations

import pytest
from scalebench.train import rank_env
from scalebench.train.preflight import LaunchMismatch, check_batch, check_launch
from scalebench.train.torch.native import DDPBackend

ENVIRONMENT = "torch"

TWO_RANKS = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}


def test_the_processes_must_be_the_cells_gpus():
    place = rank_env.detect(TWO_RANKS)
    check_launch(2, place.processes_source, "torch", "native", 2)
    with pytest.raises(LaunchMismatch, match=r"^WORLD_SIZE = 2 ranks, but the cell asks for 4 GPUs$"):
        check_launch(2, place.processes_source, "torch", "native", 4)


def test_one_process_backends_say_how_many_processes_to_start():
    place = rank_env.detect(TWO_RANKS)
    with pytest.raises(LaunchMismatch, match=r"mirrored drives from 1 process\(es\).*'\{python\} \{program\}'"):
        check_launch(2, place.processes_source, "tensorflow", "mirrored", 2)
    check_launch(1, place.processes_source, "tensorflow", "mirrored", 2)


def test_batch_larger_than_a_shard_names_the_key():
    check_batch(4, 32, 8)
    with pytest.raises(ValueError, match=r"training.batch_per_gpu = 5 is larger than .* \(32 pairs / 8 ranks = 4\)"):
        check_batch(5, 32, 8)


def test_the_planner_and_the_rank_read_one_fact_of_whether_a_backend_shards(schema, monkeypatch):
    """Width 16 with a batch of 4: the whole state does not fit 1.5 GiB, FSDP's half of it does.
    The planner's check (config/checks.py) and the rank's (check_model_fits) read the registry
    entry's shards_state, so the entry flipped flips both, with no other edit."""
    import dataclasses

    import numpy as np
    from conftest import cell_settings, tiny_config
    from scalebench import backends
    from scalebench import config as sb_config
    from scalebench.refusal import SettingRefused
    from scalebench.settings import RunSettings
    from scalebench.train.preflight import check_model_fits
    from scalebench.train.torch.fsdp import FSDPBackend

    free = int(1.5 * 2**30)
    matrix = {"frameworks": ["torch"], "backends": ["fsdp"], "gpus": [2], "seeds": [1]}
    planned = tiny_config(matrix=matrix, model={"width": 16}, cluster={"device_memory_gb": 1.5})
    settings = cell_settings("torch", "fsdp", 2)
    settings["model"] = {"width": 16}
    run = RunSettings.from_json(settings, "data", "out")

    backend = FSDPBackend(rank_env.detect(TWO_RANKS))  # two ranks, each with 1.5 GiB free
    monkeypatch.setattr(backend, "allreduce_max", lambda values: np.asarray(values, dtype=np.float64))

    sb_config.validate(planned, schema)  # sharded over two ranks: it fits, for both
    check_model_fits(run, backend, free)
    monkeypatch.setitem(backends.REGISTRY["torch"], "fsdp", dataclasses.replace(backends.FSDP, shards_state=False))
    with pytest.raises(sb_config.ConfigError, match="width 16 .* more than a GPU's 1.5 GiB"):
        sb_config.validate(planned, schema)
    with pytest.raises(SettingRefused, match=r"model.width = 16: .* more than the 1.50 GiB free"):
        check_model_fits(run, backend, free)


def test_the_planner_and_the_rank_read_one_size_of_an_activation(schema, monkeypatch):
    """Bytes per activation element at a precision are architecture.ACTIVATION_ITEMSIZE's: the
    planner's memory check (config/checks.py) and the rank's (check_model_fits) both read it, so a
    size changed there changes both verdicts, with no other edit."""
    import numpy as np
    from conftest import cell_settings, tiny_config
    from scalebench import architecture
    from scalebench import config as sb_config
    from scalebench.refusal import SettingRefused
    from scalebench.settings import RunSettings
    from scalebench.train.preflight import check_model_fits

    planned = tiny_config(cluster={"device_memory_gb": 1.0})
    run = RunSettings.from_json(cell_settings("torch", "native", 1), "data", "out")
    assert run.training.precision == "fp32"

    backend = DDPBackend(rank_env.detect({}))  # one rank with 1 GiB free
    monkeypatch.setattr(backend, "allreduce_max", lambda values: np.asarray(values, dtype=np.float64))

    sb_config.validate(planned, schema)  # width 1 fits 1 GiB at four bytes per activation
    check_model_fits(run, backend, 2**30)
    monkeypatch.setitem(architecture.ACTIVATION_ITEMSIZE, "fp32", 10**5)
    with pytest.raises(sb_config.ConfigError, match=r"config key 'model.width': width 1 .* \(fp32\) needs"):
        sb_config.validate(planned, schema)
    with pytest.raises(SettingRefused, match=r"^model.width = 1: .* more than the 1.00 GiB free"):
        check_model_fits(run, backend, 2**30)
