"""What a rank refuses before training (preflight.py): a launch that does not fit the cell, a batch larger than a shard."""

from __future__ import annotations

import pytest
from scalebench.train import rank_env
from scalebench.train.preflight import LaunchMismatch, check_batch, check_launch
from scalebench.train.tf.mirrored import MirroredBackend
from scalebench.train.torch.native import DDPBackend

TWO_RANKS = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}


def test_world_size_must_be_the_cells_gpus():
    place = rank_env.detect(TWO_RANKS)
    check_launch(2, place.world_size_source, DDPBackend(place), 2)
    with pytest.raises(LaunchMismatch, match=r"^WORLD_SIZE = 2 ranks, but the cell asks for 4 GPUs$"):
        check_launch(2, place.world_size_source, DDPBackend(place), 4)


def test_one_process_backends_say_how_many_processes_to_start():
    place = rank_env.detect(TWO_RANKS)
    mirrored = MirroredBackend(place)
    with pytest.raises(LaunchMismatch, match=r"mirrored drives from 1 process\(es\).*'\{python\} \{program\}'"):
        check_launch(2, place.world_size_source, mirrored, 2)
    check_launch(1, place.world_size_source, mirrored, 2)


def test_batch_larger_than_a_shard_names_the_key():
    check_batch(4, 32, 8)
    with pytest.raises(ValueError, match=r"training.batch_per_gpu = 5 is larger than .* \(32 pairs / 8 ranks = 4\)"):
        check_batch(5, 32, 8)
