"""What TensorFlow's two strategies share as backends: MultiWorkerMirroredStrategy (native.py)
and MirroredStrategy (mirrored.py) reduce, broadcast and run replicas the same way.

Each backend's module creates its strategy (native.py: MultiWorkerMirroredStrategy, which joins
the workers; mirrored.py: MirroredStrategy) and builds the backend with it; everything the loop
asks of a backend goes through the strategy, for one replica per process or several.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import numpy as np
import tensorflow as tf

from scalebench.train.collectives import Bench
from scalebench.train.interfaces import Backend
from scalebench.train.rank_env import RankInfo
from scalebench.train.tf import collectives, runtime


class StrategyBackend(Backend):
    """A tf.distribute strategy as the loop's backend; `implementation` names its collective.
    A subclass's module creates the strategy (which joins the workers) and hands it over."""

    framework = "tensorflow"
    strategy_name: str  # the tf.distribute class

    def __init__(
        self,
        place: RankInfo,
        device_type: str,
        share_gpu: bool,
        strategy: tf.distribute.Strategy,
        implementation: str,
    ) -> None:
        super().__init__(place, device_type, share_gpu)
        self.strategy, self.implementation = strategy, implementation
        self.replicas = strategy.num_replicas_in_sync
        per_process = self.replicas // self.processes
        self.replica_ids = list(range(self.rank * per_process, (self.rank + 1) * per_process))
        self.checkpoint_on_all_ranks = self.processes > 1  # saving reads on-read variables across workers

        def per_replica(x):  # this process's value as its replica's contribution
            return strategy.experimental_distribute_values_from_function(lambda context: x)

        self._sum = tf.function(lambda x: strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica(x), axis=None))
        self._gather = tf.function(lambda x: strategy.gather(per_replica(x[None]), axis=0))
        self._broadcasts: dict[tuple[int, ...], object] = {}  # per set of variables (broadcast_from_root)

    def devices_note(self) -> str:
        """Where the replicas live, for train.log (a subclass says more where it matters)."""
        return ""

    def joined(self) -> str:
        """train.log's line of the strategy as built."""
        return (
            f"rank {self.rank}/{self.processes}: {type(self.strategy).__name__} with {self.replicas} replicas "
            f"({self.implementation}){self.devices_note()} via {self.place.launcher}"
        )

    def options(self) -> dict:
        """run.json's training record: the strategy and its collective."""
        return {"tf_strategy": self.strategy_name, "tf_collective": self.implementation}

    def local_devices(self) -> list[str] | None:
        """The devices of this process's replicas where it has several (MirroredStrategy's)."""
        if len(self.replica_ids) > 1:
            return list(self.strategy.extended.worker_devices)
        return None

    def scope(self) -> AbstractContextManager:
        return self.strategy.scope()

    def distribute(self, model, optimizer, marks=None) -> tuple:
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
        if not tensors or self.replicas == 1:  # one replica in all: nothing to agree on
            return
        # One traced function per set of variables, closing over them. Keyed by the variables, not
        # the list: Keras returns a new list at each call (non_trainable_variables), and keying by
        # the list traced a new function at every epoch, about a second of tracing each time.
        key = tuple(id(variable) for variable in tensors)
        if key not in self._broadcasts:

            def replica():
                replica_broadcast(tensors)

            def all_replicas():
                self.strategy.run(replica)

            self._broadcasts[key] = tf.function(all_replicas)
        self._broadcasts[key]()

    def allreduce_sum(self, values: np.ndarray) -> np.ndarray:
        if self.processes == 1:
            return np.asarray(values, dtype=np.float64)
        return self._sum(tf.constant(values, dtype=tf.float64)).numpy()

    def allreduce_max(self, values: np.ndarray) -> np.ndarray:
        if self.processes == 1:
            return np.asarray(values, dtype=np.float64)
        return self._gather(tf.constant(values, dtype=tf.float64)).numpy().max(axis=0)

    def allgather_text(self, text: str) -> list[str]:
        if self.processes == 1:
            return [text]
        rows = self._gather(tf.constant(runtime.encode_text(text))).numpy()
        return [runtime.decode_text(row) for row in rows]

    def versions(self) -> dict:
        return {"distributed": f"tf.distribute {type(self.strategy).__name__} {self.implementation}"}

    def collective_bench(self, model) -> Bench:
        # no bucket: a step's gradients go to one all_reduce call, which packs them itself
        library = f"tf.distribute {self.strategy_name} {self.implementation}"
        return collectives.strategy(self.strategy, len(self.replica_ids), library)


def replica_broadcast(variables: list) -> None:
    """In replica context: each variable set to replica 0's value (an on-read variable, such as a
    batch-norm statistic, is this replica's own copy here)."""
    context = tf.distribute.get_replica_context()
    is_root = tf.equal(context.replica_id_in_sync_group, 0)
    for variable in variables:
        mine = tf.where(is_root, variable, tf.zeros_like(variable))
        variable.assign(context.all_reduce(tf.distribute.ReduceOp.SUM, mine))
