"""TensorFlow's multi-worker backend: MultiWorkerMirroredStrategy, one process per GPU or CPU rank.

The processes are started by torchrun or srun; TF_CONFIG comes from the launcher's
environment (train/tf_config.py); collectives are NCCL on GPU and RING on CPU, each
bounded by training.collective_timeout_s. MirroredStrategy in one process is the
mirrored backend (mirrored.py).
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

from scalebench.settings import RunSettings
from scalebench.train import tf_config
from scalebench.train.rank_env import RankInfo
from scalebench.train.tf.strategy import StrategyBackend

# TensorFlow 2.21's profiler, tracing in two workers of one job at once, corrupts a worker's memory
# (a double free in tf.profiler.experimental.stop on the second worker, in about 1 run in 4 on 2 CPU
# workers; either worker alone, and Horovod's ranks together, trace without it)
UNTRACED = (
    "TensorFlow's profiler crashes a MultiWorkerMirrored worker when two workers trace at once, so rank 0 "
    "alone traces (every rank runs the same step)"
)


class MultiWorkerBackend(StrategyBackend):
    name = "native"
    strategy_name = "MultiWorkerMirroredStrategy"
    untraced_ranks = UNTRACED

    @property
    def ends_in_teardown(self) -> bool:
        """Workers shut their coordination service down together as the interpreter ends: one that
        ended without it cut the other's last collective ("Socket closed")."""
        return self.processes > 1


def create_strategy(run: RunSettings, place: RankInfo, device_type: str) -> tuple[tf.distribute.Strategy, str]:
    """MultiWorkerMirroredStrategy over the cell's workers (joining them), and its collective."""
    # Every check runs before TensorFlow starts a server or builds anything.
    config = tf_config.resolve_tf_config(place, dict(os.environ))
    if config is None:
        os.environ.pop("TF_CONFIG", None)
    else:
        os.environ["TF_CONFIG"] = json.dumps(config)
    implementation = tf.distribute.experimental.CommunicationImplementation
    chosen = implementation.NCCL if device_type == "cuda" else implementation.RING
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=chosen,
        timeout_seconds=run.training.collective_timeout_s,  # None: no timeout
    )
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options), chosen.name


def create(run: RunSettings, place: RankInfo, device_type: str, share_gpu: bool) -> MultiWorkerBackend:
    """The backend of the workers' strategy."""
    backend = MultiWorkerBackend(place, device_type, share_gpu, *create_strategy(run, place, device_type))
    print(backend.joined(), flush=True)
    return backend
