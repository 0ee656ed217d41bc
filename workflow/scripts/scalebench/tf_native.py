"""TensorFlow's own distribution: MultiWorkerMirroredStrategy, or MirroredStrategy in one process.

multiworker: one process per GPU (or CPU rank), started by torchrun or srun;
TF_CONFIG comes from the launcher's environment (tf_cluster.py); collectives
are NCCL on GPU and RING on CPU, each bounded by training.collective_timeout_s.
mirrored: one process holding every replica of the cell (its local GPUs; on a
machine without GPUs, logical CPU devices). auto picks mirrored when the
launcher started a single process for the cell and multiworker otherwise.
"""

from __future__ import annotations

import json
import os
from contextlib import AbstractContextManager

import numpy as np

from . import distenv, tf_cluster, tf_runtime
from .tf_cluster import ClusterMismatch

tf = tf_runtime.tf


def choose_strategy(setting: str, processes: int) -> str:
    if setting == "auto":
        return "mirrored" if processes == 1 else "multiworker"
    return setting


class StrategyBackend:
    name = "native"
    gradient_scale = 1.0
    checkpoint_on_all_ranks = False

    def __init__(self, training: dict) -> None:
        self.info = distenv.detect()
        self.rank, self.local_rank = self.info.rank, self.info.local_rank
        self.world_size, self.local_world_size = self.info.world_size, self.info.local_world_size
        self.kind = choose_strategy(training["tf_strategy"], self.world_size)

    def setup(self, training: dict, cell_ranks: int, threads: int) -> None:
        timeout = float(training["collective_timeout_s"])
        if self.kind == "mirrored":
            self.strategy = self._mirrored(training, cell_ranks, threads)
        else:
            self.strategy = self._multiworker(training, cell_ranks, threads, timeout)
        self.replicas = self.strategy.num_replicas_in_sync
        if self.replicas != cell_ranks:
            raise ClusterMismatch(f"{self.kind} strategy has {self.replicas} replicas, the cell asks for {cell_ranks}")
        first = self.rank * (self.replicas // self.world_size)
        self.replica_ids = list(range(first, first + self.replicas // self.world_size))
        self.gradient_scale = 1.0 / self.replicas  # the optimizer sums replica gradients: this makes it a mean
        self.checkpoint_on_all_ranks = self.world_size > 1  # saving reads on-read variables across workers
        self._collectives()
        print(
            f"rank {self.rank}/{self.world_size}: {type(self.strategy).__name__} with {self.replicas} replicas "
            f"({self.device_type}, {self.implementation}) via {self.info.launcher}",
            flush=True,
        )

    def _mirrored(self, training: dict, cell_ranks: int, threads: int):
        if self.world_size != 1:
            raise ClusterMismatch(
                f"training.tf_strategy is mirrored (one process per cell) but {self.info.launcher} started "
                f"{self.world_size} ranks; make launchers.*.tensorflow_native start one process "
                "('{python} {program}') or use multiworker"
            )
        self.device_type = tf_runtime.configure(threads, training["device"], None, cpu_replicas=cell_ranks)
        kind = "GPU" if self.device_type == "gpu" else "CPU"
        devices = [d.name for d in tf.config.list_logical_devices(kind)]
        if len(devices) < cell_ranks:
            raise ClusterMismatch(f"the cell asks for {cell_ranks} GPUs, this process sees {len(devices)}")
        self.implementation = "NCCL" if kind == "GPU" else "local"
        return tf.distribute.MirroredStrategy(devices[:cell_ranks])

    def _multiworker(self, training: dict, cell_ranks: int, threads: int, timeout: float):
        # Every check runs before TensorFlow starts a server or builds anything.
        tf_config = tf_cluster.resolve_tf_config(self.info, dict(os.environ), cell_ranks)
        if tf_config is None:
            os.environ.pop("TF_CONFIG", None)
        else:
            os.environ["TF_CONFIG"] = json.dumps(tf_config)
        self.device_type = tf_runtime.configure(threads, training["device"], self.local_rank)
        implementation = tf.distribute.experimental.CommunicationImplementation
        chosen = implementation.NCCL if self.device_type == "gpu" else implementation.RING
        self.implementation = chosen.name
        options = tf.distribute.experimental.CommunicationOptions(implementation=chosen, timeout_seconds=timeout)
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

    def scope(self) -> AbstractContextManager:
        return self.strategy.scope()

    def run(self, fn, per_replica_args: list[tuple]) -> list:
        if len(per_replica_args) == 1:  # one replica in this process: its own tensors are its inputs
            result = self.strategy.run(fn, args=per_replica_args[0])
        else:
            first = self.replica_ids[0]
            args = tuple(
                self.strategy.experimental_distribute_values_from_function(
                    lambda context, i=i: per_replica_args[context.replica_id_in_sync_group - first][i]
                )
                for i in range(len(per_replica_args[0]))
            )
            result = self.strategy.run(fn, args=args)
        return list(self.strategy.experimental_local_results(result))

    def run_local(self, fn, args: tuple):
        if self.kind == "mirrored":  # all replicas are here: read on-read variables directly
            return fn(*args)
        return self.strategy.experimental_local_results(self.strategy.run(fn, args=args))[0]

    def wrap_tape(self, tape):
        return tape

    def after_first_step(self, model, optimizer) -> None:
        pass  # tf.distribute created every variable with rank 0's initial value

    def broadcast_from_root(self, variables: list) -> None:
        if not variables:
            return
        key = id(variables)  # one traced function per variable list, closing over the variables
        if key not in self._broadcasts:

            def replica():
                self._broadcast_fn(variables)

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
        rows = self._gather(tf.constant(tf_runtime.encode_text(text))).numpy()
        return [tf_runtime.decode_text(row) for row in rows]

    def versions(self) -> dict:
        return {"distributed": f"tf.distribute {type(self.strategy).__name__} {self.implementation}"}

    def shutdown(self) -> None:
        pass  # the strategy's server stops with the process


def create(training: dict) -> StrategyBackend:
    return StrategyBackend(training)
