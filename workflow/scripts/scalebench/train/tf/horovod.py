"""Horovod for TensorFlow (Gloo controller here; NCCL allreduce when built with it).

The learning rate is already scaled by the replicas in lr_schedule.learning_rate,
so nothing here scales it again.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from scalebench.refusal import HorovodBuildError
from scalebench.settings import RunSettings
from scalebench.train.collectives import Bench
from scalebench.train.horovod_common import INSTALL_HINT, HorovodBackend, fusion_threshold
from scalebench.train.rank_env import RankInfo
from scalebench.train.tf import collectives


def _import_horovod():
    try:
        import horovod.tensorflow as hvd
    except ImportError as error:  # also Horovod built without its TensorFlow extension
        raise HorovodBuildError(
            f"backend horovod: cannot import horovod.tensorflow ({error}); Horovod must be built with "
            f"TensorFlow (HOROVOD_WITH_TENSORFLOW=1): {INSTALL_HINT}"
        ) from error
    return hvd


class HorovodTFBackend(HorovodBackend):
    framework = "tensorflow"

    library = staticmethod(_import_horovod)

    def distribute(self, model, optimizer, marks=None) -> tuple:
        # Every rank starts from rank 0's weights and optimizer state (its slots exist: built or restored).
        self.hvd.broadcast_variables(model.variables, root_rank=0)
        self.hvd.broadcast_variables(optimizer.variables, root_rank=0)
        return model, optimizer

    def reduce_gradients(self, gradients: list) -> list:
        # what hvd.DistributedGradientTape does: an averaging allreduce per gradient
        return [self.hvd.allreduce(g, op=self.hvd.Average, compression=self.compression) for g in gradients]

    def broadcast_from_root(self, tensors: list) -> None:
        if tensors:
            self.hvd.broadcast_variables(tensors, root_rank=0)

    def allreduce_sum(self, values: np.ndarray) -> np.ndarray:
        return self.hvd.allreduce(tf.constant(values, dtype=tf.float64), op=self.hvd.Sum).numpy()

    def allreduce_max(self, values: np.ndarray) -> np.ndarray:
        return self.hvd.allreduce(tf.constant(values, dtype=tf.float64), op=self.hvd.Max).numpy()

    def collective_bench(self, model) -> Bench:
        return collectives.horovod(self.hvd, self.collective_library(), *fusion_threshold())


def create(run: RunSettings, place: RankInfo, device_type: str, share_gpu: bool) -> HorovodTFBackend:
    """The backend once hvd.init() has joined the ranks."""
    return HorovodTFBackend.joined(run, place, device_type, share_gpu)
