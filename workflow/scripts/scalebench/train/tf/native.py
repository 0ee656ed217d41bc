"""TensorFlow's own distribution: MultiWorkerMirroredStrategy, or MirroredStrategy in one process.

multiworker: one process per GPU (or CPU rank), started by torchrun or srun;
TF_CONFIG comes from the launcher's environment (launch/tf_config.py);
collectives are NCCL on GPU and RING on CPU, each bounded by
training.collective_timeout_s. mirrored: one process holding every replica of
the cell (its local GPUs; on a machine without GPUs, logical CPU devices).
auto picks mirrored when the launcher started a single process for the cell
and multiworker otherwise.
"""

from __future__ import annotations

import json
import os
from contextlib import AbstractContextManager

import numpy as np
import tensorflow as tf

from scalebench.launch import tf_config
from scalebench.launch.rank_env import RankInfo
from scalebench.train.interfaces import Backend
from scalebench.train.settings import RunSettings
from scalebench.train.tf import runtime


class LayoutMismatch(RuntimeError):
    """The processes and devices do not fit the cell."""


def choose_strategy(setting: str, processes: int) -> str:
    if setting == "auto":
        return "mirrored" if processes == 1 else "multiworker"
    return setting


class StrategyBackend(Backend):
    name = "native"

    def __init__(self, place: RankInfo, tf_strategy: str) -> None:
        super().__init__(place)
        self.kind = choose_strategy(tf_strategy, self.world_size)

    def processes(self, gpus: int) -> int:
        return 1 if self.kind == "mirrored" else gpus

    def setup(self, run: RunSettings) -> None:
        gpus = run.cell.gpus
        if self.kind == "mirrored":
            self.strategy = self._mirrored(run, gpus)
        else:
            self.strategy = self._multiworker(run)
        self.replicas = self.strategy.num_replicas_in_sync
        first = self.rank * (self.replicas // self.world_size)
        self.replica_ids = list(range(first, first + self.replicas // self.world_size))
        self.checkpoint_on_all_ranks = self.world_size > 1  # saving reads on-read variables across workers
        self._collectives()
        print(
            f"rank {self.rank}/{self.world_size}: {type(self.strategy).__name__} with {self.replicas} replicas "
            f"({self.implementation}) via {self.place.launcher}",
            flush=True,
        )

    def _mirrored(self, run: RunSettings, gpus: int):
        kind = "GPU" if self.device_type == "gpu" else "CPU"
        devices = [d.name for d in tf.config.list_logical_devices(kind)]
        if len(devices) < gpus:
            raise LayoutMismatch(f"the cell asks for {gpus} GPUs, this process sees {len(devices)}")
        self.implementation = "NCCL" if kind == "GPU" else "local"
        return tf.distribute.MirroredStrategy(devices[:gpus])

    def _multiworker(self, run: RunSettings):
        # Every check runs before TensorFlow starts a server or builds anything.
        config = tf_config.resolve_tf_config(self.place, dict(os.environ))
        if config is None:
            os.environ.pop("TF_CONFIG", None)
        else:
            os.environ["TF_CONFIG"] = json.dumps(config)
        implementation = tf.distribute.experimental.CommunicationImplementation
        chosen = implementation.NCCL if self.device_type == "gpu" else implementation.RING
        self.implementation = chosen.name
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=chosen,
            timeout_seconds=run.training.collective_timeout_s,  # None: no timeout
        )
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)

    def _collectives(self) -> None:
        strategy = self.strategy

        def per_replica(x):  # this process's value as its replica's contribution
            return strategy.experimental_distribute_values_from_function(lambda context: x)

        def replica_broadcast(variables):
            # In replica context an on-read variable (batch-norm statistics) is this replica's own copy.
            context = tf.distribute.get_replica_context()
            is_root = tf.equal(context.replica_id_in_sync_group, 0)
            for variable in variables:
                mine = tf.where(is_root, variable, tf.zeros_like(variable))
                variable.assign(context.all_reduce(tf.distribute.ReduceOp.SUM, mine))

        self._sum = tf.function(lambda x: strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica(x), axis=None))
        self._gather = tf.function(lambda x: strategy.gather(per_replica(x[None]), axis=0))
        self._broadcast_fn = replica_broadcast
        self._broadcasts: dict[int, object] = {}

    def options(self) -> dict:
        return {"tf_strategy": self.kind}  # as resolved: auto becomes mirrored or multiworker

    def scope(self) -> AbstractContextManager:
        return self.strategy.scope()

    def distribute(self, model, optimizer) -> tuple:
        return model, optimizer  # tf.distribute created every variable with rank 0's initial value

    def reduce_gradients(self, gradients: list) -> list:
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.MEAN, gradients)

    def run_replicas(self, step, per_replica_args: list[tuple]) -> list:
        if len(per_replica_args) == 1 and len(self.replica_ids) > 1:
            # the same inputs on every local replica (evaluation): all replicas are here, so
            # on-read variables can be read directly
            return [step(*per_replica_args[0])]
        if len(per_replica_args) == 1:  # one replica in this process: its own tensors are its inputs
            result = self.strategy.run(step, args=per_replica_args[0])
        else:
            first = self.replica_ids[0]
            args = tuple(
                self.strategy.experimental_distribute_values_from_function(
                    lambda context, i=i: per_replica_args[context.replica_id_in_sync_group - first][i]
                )
                for i in range(len(per_replica_args[0]))
            )
            result = self.strategy.run(step, args=args)
        return list(self.strategy.experimental_local_results(result))

    def broadcast_from_root(self, tensors: list) -> None:
        if not tensors:
            return
        key = id(tensors)  # one traced function per variable list, closing over the variables
        if key not in self._broadcasts:

            def replica():
                self._broadcast_fn(tensors)

            def all_replicas():
                self.strategy.run(replica)

            self._broadcasts[key] = tf.function(all_replicas)
        self._broadcasts[key]()

    def allreduce_sum(self, values: np.ndarray) -> np.ndarray:
        if self.world_size == 1:
            return np.asarray(values, dtype=np.float64)
        return self._sum(tf.constant(values, dtype=tf.float64)).numpy()

    def allreduce_max(self, values: np.ndarray) -> np.ndarray:
        if self.world_size == 1:
            return np.asarray(values, dtype=np.float64)
        return self._gather(tf.constant(values, dtype=tf.float64)).numpy().max(axis=0)

    def allgather_text(self, text: str) -> list[str]:
        if self.world_size == 1:
            return [text]
        rows = self._gather(tf.constant(runtime.encode_text(text))).numpy()
        return [runtime.decode_text(row) for row in rows]

    def versions(self) -> dict:
        return {"distributed": f"tf.distribute {type(self.strategy).__name__} {self.implementation}"}


def create(run: RunSettings, place: RankInfo) -> StrategyBackend:
    return StrategyBackend(place, run.training.tf_strategy)
