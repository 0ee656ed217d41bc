"""TensorFlow's collectives for the benchmark (train/collectives.py), through each backend's own
library: the strategy's all-reduce in replica context, the call its gradients are reduced with
(MultiWorkerMirroredStrategy: RING or NCCL between processes; MirroredStrategy: between the
devices of its one process), and Horovod's allreduce of TensorFlow tensors. Buffers are float32
zeros; each run waits for the devices before it returns. A size's first call traces its function
(the benchmark's warm-up)."""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from scalebench.train.collectives import TENSOR_NAME, Bench, all_reduce_bench
from scalebench.train.tf import runtime


def strategy(distribution: tf.distribute.Strategy, local_replicas: int, library: str) -> Bench:
    """The strategy's all-reduce of one float32 tensor per replica, handed to it as the training
    step's inputs are (StrategyBackend.run_replicas): the tensor itself where the process has one
    replica, a value per local replica where it has several (MirroredStrategy)."""

    def all_reduce(elements: int) -> Callable[[], None]:
        if local_replicas == 1:
            values = tf.zeros([elements], tf.float32)
        else:
            values = distribution.experimental_distribute_values_from_function(
                lambda context: tf.zeros([elements], tf.float32)
            )

        def replica(value):
            # identity places the input on the replica's device (a placeholder has none for the
            # all-reduce to send to) without copying it: the kernel forwards its buffer
            return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, tf.identity(value))

        step = tf.function(lambda x: distribution.run(replica, args=(x,)))
        return lambda: (step(values), runtime.synchronize())

    return all_reduce_bench(all_reduce, distribution.num_replicas_in_sync, library)


def horovod(hvd, library: str, fusion_bytes: int, fusion_source: str) -> Bench:
    """Horovod's allreduce of TensorFlow tensors (on the GPU where the rank has one)."""

    def all_reduce(elements: int) -> Callable[[], None]:
        tensor = tf.zeros([elements], tf.float32)
        name = f"{TENSOR_NAME}.{elements}"
        return lambda: (hvd.allreduce(tensor, op=hvd.Sum, name=name), runtime.synchronize())

    return all_reduce_bench(all_reduce, hvd.size(), library, fusion_bytes, fusion_source)
