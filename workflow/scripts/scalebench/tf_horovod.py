"""Horovod for TensorFlow (Gloo controller here; NCCL allreduce when built with it).

The learning rate is already scaled by the world size in schedule.learning_rate,
so nothing here scales it again.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext

import numpy as np

from . import tf_runtime
from .horovod_srun import adopt_srun_rank
from .tf_cluster import ClusterMismatch

tf = tf_runtime.tf

INSTALL_HINT = "run ./install.sh (it builds Horovod with PyTorch and TensorFlow support)"


def _import_horovod():
    try:
        import horovod.tensorflow as hvd
    except ImportError as error:  # also Horovod built without its TensorFlow extension
        raise RuntimeError(
            f"backend horovod: cannot import horovod.tensorflow ({error}); Horovod must be built with "
            f"TensorFlow (HOROVOD_WITH_TENSORFLOW=1): {INSTALL_HINT}"
        ) from error
    if not hvd.gloo_built() and not hvd.mpi_built():
        raise RuntimeError(f"backend horovod: Horovod was built without Gloo or MPI; {INSTALL_HINT}")
    return hvd


class HorovodTFBackend:
    name = "horovod"
    gradient_scale = 1.0  # DistributedGradientTape averages gradients over ranks
    checkpoint_on_all_ranks = False

    def __init__(self, compression_fp16: bool = False) -> None:
        self.hvd = _import_horovod()
        self.compression = self.hvd.Compression.fp16 if compression_fp16 else self.hvd.Compression.none

    def setup(self, training: dict, cell_ranks: int, threads: int) -> None:
        hvd = self.hvd
        # A rank that waits longer than this for a dead or hung peer fails instead of hanging.
        os.environ["HOROVOD_GLOO_TIMEOUT_SECONDS"] = str(max(1, int(training["collective_timeout_s"])))
        adopt_srun_rank()  # started by horovod_srun.py: take the rank from srun
        hvd.init()
        self.rank, self.local_rank = hvd.rank(), hvd.local_rank()
        self.world_size, self.local_world_size = hvd.size(), hvd.local_size()
        if self.world_size != cell_ranks:
            raise ClusterMismatch(f"horovodrun started {self.world_size} ranks, but the cell asks for {cell_ranks}")
        self.replicas, self.replica_ids = self.world_size, [self.rank]
        self.device_type = tf_runtime.configure(threads, training["device"], self.local_rank)
        print(
            f"rank {self.rank}/{self.world_size}: horovod (gloo={hvd.gloo_enabled()}, "
            f"mpi={hvd.mpi_enabled()}, nccl={hvd.nccl_built()}) on {self.device_type}",
            flush=True,
        )

    def scope(self) -> AbstractContextManager:
        return nullcontext()

    def run(self, fn, per_replica_args: list[tuple]) -> list:
        return [fn(*per_replica_args[0])]

    def run_local(self, fn, args: tuple):
        return fn(*args)

    def wrap_tape(self, tape):
        return self.hvd.DistributedGradientTape(tape, compression=self.compression, op=self.hvd.Average)

    def after_first_step(self, model, optimizer) -> None:
        # Optimizer slots exist only after the first step; from here on every rank holds rank 0's state.
        self.hvd.broadcast_variables(model.variables, root_rank=0)
        self.hvd.broadcast_variables(optimizer.variables, root_rank=0)

    def broadcast_from_root(self, variables: list) -> None:
        if variables:
            self.hvd.broadcast_variables(variables, root_rank=0)

    def allreduce_sum(self, values: np.ndarray) -> np.ndarray:
        return self.hvd.allreduce(tf.constant(values, dtype=tf.float64), op=self.hvd.Sum).numpy()

    def allreduce_max(self, values: np.ndarray) -> np.ndarray:
        return self.hvd.allreduce(tf.constant(values, dtype=tf.float64), op=self.hvd.Max).numpy()

    def allgather_text(self, text: str) -> list[str]:
        return self.hvd.allgather_object(text)

    def versions(self) -> dict:
        import horovod

        return {"horovod": horovod.__version__, "distributed": "horovod"}

    def shutdown(self) -> None:
        self.hvd.shutdown()


def create(training: dict) -> HorovodTFBackend:
    return HorovodTFBackend(training["horovod"]["fp16_compression"])
