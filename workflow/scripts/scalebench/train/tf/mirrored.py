"""TensorFlow's one-process backend: MirroredStrategy over every device of the cell, on one node.

One process (started by "{python} {program}" locally, by srun as one task on SLURM)
holds a replica per GPU and reduces with NCCL. Without GPUs it splits the CPU into
one logical device per replica (runtime.configure): the replicas then share this
process's threads, a functional run rather than a scaling measurement, and train.log
and run.json (training.tf_replica_devices: logical CPU) say so. Cells beyond one node are left
out of the matrix (scalebench/config/matrix.py); a node with fewer GPUs than the cell
fails before the first step (devices.use_gpus).
"""

from __future__ import annotations

import tensorflow as tf

from scalebench.settings import RunSettings
from scalebench.train.rank_env import RankInfo
from scalebench.train.tf.strategy import StrategyBackend


class LayoutMismatch(RuntimeError):
    """The process sees fewer devices than the cell has replicas."""


class MirroredBackend(StrategyBackend):
    name = "mirrored"
    strategy_name = "MirroredStrategy"

    def __init__(
        self,
        place: RankInfo,
        device_type: str,
        share_gpu: bool,
        strategy: tf.distribute.Strategy,
        implementation: str,
        replica_devices: str,
    ) -> None:
        super().__init__(place, device_type, share_gpu, strategy, implementation)
        self.replica_devices = replica_devices  # GPU, CPU or logical CPU

    def devices_note(self) -> str:
        if self.replica_devices == "GPU":
            return f" on {self.replicas} GPUs"
        if self.replica_devices == "CPU":
            return " on the CPU (no GPU: a functional run, not a GPU measurement)"
        return (
            f" on {self.replicas} logical CPU devices: no GPU, the replicas share this process's CPU threads "
            "(a functional run, not a GPU scaling measurement)"
        )

    def options(self) -> dict:
        return {**super().options(), "tf_replica_devices": self.replica_devices}


def create(run: RunSettings, place: RankInfo, device_type: str, share_gpu: bool) -> MirroredBackend:
    """MirroredStrategy over the cell's devices of this process."""
    gpus = run.cell.gpus
    kind = "GPU" if device_type == "cuda" else "CPU"
    devices = [d.name for d in tf.config.list_logical_devices(kind)]
    if len(devices) < gpus:
        raise LayoutMismatch(f"the cell asks for {gpus} {kind} devices, this process sees {len(devices)}")
    implementation = "NCCL" if kind == "GPU" else "local"
    # runtime.configure split the CPU into a logical device per replica where there are several
    replica_devices = kind if kind == "GPU" or gpus == 1 else "logical CPU"
    strategy = tf.distribute.MirroredStrategy(devices[:gpus])
    backend = MirroredBackend(place, device_type, share_gpu, strategy, implementation, replica_devices)
    print(backend.joined(), flush=True)
    return backend
